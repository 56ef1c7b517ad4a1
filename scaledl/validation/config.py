"""Thresholds and tolerances of the profile validation (:class:`ValidationConfig`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ValidationConfig(BaseModel):
    """Limits the profile validation applies.

    Attributes:
        max_time_ms: largest plausible duration of one timed unit (layer, iteration, all-reduce)
            in milliseconds; larger values are quarantined as absurd.
        max_epoch_s: largest plausible epoch time in seconds.
        layer_sum_tolerance: relative slack allowed when the per-layer forward + backward sum of
            an instrumented step exceeds that step's ``iteration_ms``. The sum is collected over
            the ``layer_stride`` iterations of a round and compared with their mean, so the
            iterations' own variation enters it. 25%: a double-counted layer shows as far more.
            With tensor parallelism's all-reduces waited on inside their units, a tp2 step's
            layers cover a median 0.88-0.90 of it (up to 1.03, committed layout dataset). A
            two-rank Llama tp2 in the test suite, with the other test worker busy, reached 1.11
            and the old 10% quarantined it.
        allreduce_bytes_tolerance: relative slack between the all-reduced bytes of one step and
            ``grad_bytes_per_param`` times the trainable parameter count.
        max_iteration_cv: coefficient of variation of the iteration time above which a run is
            flagged (``flag_high_cv``); flagged runs are kept.
        grad_bytes_per_param: bytes of one all-reduced gradient element; ``None`` (default)
            takes it from the workload's ``precision`` (fp32: 4, bf16/fp16: 2), because the
            profiler builds the model's parameters, hence its gradients, in that dtype.
        required_run_tables: per-rank tables in which every ``ok`` run must have rows.
        epoch_ratio_min: smallest plausible ``epoch_s / (steps_per_epoch x median label
            iteration)``; the epoch is one real pass over those steps, so the ratio is about 1
            (1.00-1.24 over the tiny CPU workloads of ``tests/evaluation/data``).
        epoch_ratio_max: largest plausible ratio (data loading and the epoch's first step add
            to the iterations; a unit error is 60x or 1000x off).
        imported_required_run_tables: the same for runs imported from another source (a
            ``runs.source`` other than ``scaledl``): they carry what they measured, and an
            import without epoch times (NeuSight) is valid without ``epochs`` rows.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_time_ms: float = Field(default=600_000.0, gt=0)
    max_epoch_s: float = Field(default=7 * 86_400.0, gt=0)
    layer_sum_tolerance: float = Field(default=0.25, ge=0)
    allreduce_bytes_tolerance: float = Field(default=0.10, ge=0)
    max_iteration_cv: float = Field(default=0.10, ge=0)
    grad_bytes_per_param: int | None = Field(default=None, gt=0)
    required_run_tables: tuple[str, ...] = ("layer_timings", "iteration_timings", "epochs")
    epoch_ratio_min: float = Field(default=0.5, gt=0)
    epoch_ratio_max: float = Field(default=3.0, gt=0)
    imported_required_run_tables: tuple[str, ...] = ("layer_timings", "iteration_timings")
