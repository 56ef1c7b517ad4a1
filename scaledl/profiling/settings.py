"""How a profile runs: :class:`ProfileSettings` and the multi-node :class:`Rendezvous`.

:class:`ProfileSettings` is a preset's ``profiling:`` section. Both are pydantic dataclasses:
every field is checked when the settings are made (type, range, no unknown field), so a bad
preset fails when it is loaded, naming the file, the field and the value, never hours into a
profile. The launcher (:mod:`scaledl.profiling.launch`) and the worker read them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
)
from pydantic.dataclasses import dataclass

from scaledl.io.schema import describe_errors
from scaledl.profiling.stopping import MIN_VALUES

#: Unknown fields are errors (a typo in a preset must not be ignored).
_STRICT_FIELDS = ConfigDict(extra="forbid")


@dataclass(frozen=True, config=_STRICT_FIELDS)
class Rendezvous:
    """Torchrun rendezvous settings for multi-node profiling.

    Attributes:
        endpoint: ``host:port`` of the c10d rendezvous (node 0's address).
        node_rank: this node's rank (0..nnodes-1).
        backend: rendezvous backend (``c10d``).
    """

    endpoint: str
    node_rank: NonNegativeInt = 0
    backend: Literal["c10d"] = "c10d"


@dataclass(config=_STRICT_FIELDS)
class ProfileSettings:
    """How each workload is profiled; pydantic checks every field when the settings are made.

    Attributes:
        warmup_steps: iterations before measuring (DDP rebuilds buckets after the first).
        instrumented_steps: instrumented rounds: each layer call is timed once per round.
        layer_stride: iterations per instrumented round (1 / stride of the calls are timed in
            each iteration, which keeps the hooks' cost a small share of the iteration).
        repeats: independent launches per workload (the label is the median of the launch labels).
        label_target_halfwidth: label steps are measured until the relative 95% half-width of
            their 5% trimmed mean is below this fraction...
        label_min_steps: ... with at least this many steps ...
        label_max_steps: ... and at most this many (checked at epoch ends) ...
        label_budget_s: ... or until this many seconds of label measurement are spent.
        probe_repeats: timings per figure of the calibration probe.
        drift_tolerance: a GEMM probe (before, after, or the mean of the interleaved
            reference blocks) slower than the baseline by more than this fraction marks the
            attempt disturbed: beyond the range the host-drift correction
            (:mod:`scaledl.profiling.drift`) is trusted with; ``None``: 15% on a GPU, 100%
            (twice as slow) on a CPU device. Drift below it is corrected, not re-measured:
            re-measuring it quarantined half of all parts on a quiet 2-core VM (measurements:
            ``docs/history/2026-12-code-notes.md``). A core shared with another process shows
            as 100% and more, and the foreign-load meter flags it anyway.
        memory_drift_tolerance: the same for the memory sweep (another tenant saturating the
            shared cache and memory); ``None``: 50% on a GPU host, 100% on a CPU device: the
            drift correction models the memory figure too, so, as for the GEMM, drift up to
            twice as slow is corrected, not re-measured (measurements: the same page). Judged
            on the before and after probes only: the one interleaved sweep between label
            epochs runs about twice the baseline's time on a quiet host
            (:meth:`scaledl.profiling.worker._Guard.drift`).
        allreduce_drift_tolerance: the same for the all-reduce probe; ``None``: 0.25 on a GPU
            (NCCL), not used on a CPU device: gloo's loopback all-reduce of the probe varied
            1.6-4x between quiet launches on the 2-core reference machine, so it cannot tell
            interference there (the foreign-load meter does).
        max_foreign_load_cores: other processes keeping more than this many cores busy during an
            attempt mark it disturbed, and make the launcher wait before a launch; ``None``:
            0.25 on a CPU device, no limit on a GPU (its probe guards it).
        max_retries: new attempts of a disturbed workload before it is recorded with
            ``interference``.
        retry_budget_share: retries may take at most this share of a launch's time (a
            drifting host then costs a bounded share of the profile, not three times it).
        retry_wait_s: bound of the wait for a quiet host before a new attempt.
        quiet_wait_s: bound of the wait for a quiet host before a launch.
        lock_timeout_s: seconds to wait for another profiler of the same directory to finish
            (0: fail at once, naming it).
        cores_per_rank: cores each CPU rank is pinned to; ``None``: the host's cores divided by
            the largest local world size of the profile; 0: no pinning (``threads_per_rank``
            threads).
        timeout_s: seconds one workload may take before it is killed and recorded ``timeout``.
        threads_per_rank: ``OMP_NUM_THREADS`` of each unpinned CPU rank.
        seed: model initialisation seed (and of the launch orders).
        collective_timeout_s: process-group timeout (a lost rank fails the launch after it).
        startup_timeout_s: seconds a launch may take before its first workload starts
            (imports, rendezvous); past it the launch is killed and its first workload recorded
            ``timeout``.
        device: ``auto`` (CUDA when present) or ``cpu``.
        fork_ranks: CPU ranks on one node are forked from a process that imported the worker
            once (:mod:`scaledl.profiling.zygote`) instead of each starting an interpreter;
            ``False``: every launch starts fresh interpreters.
        rendezvous: multi-node rendezvous, or ``None`` for single-node ``--standalone``.
    """

    warmup_steps: NonNegativeInt = 3
    instrumented_steps: PositiveInt = 3
    layer_stride: PositiveInt = 3
    repeats: PositiveInt = 1
    label_target_halfwidth: PositiveFloat = 0.01
    label_min_steps: Annotated[int, Field(ge=MIN_VALUES)] = 16
    label_max_steps: PositiveInt = 400
    label_budget_s: PositiveFloat = 3.0
    probe_repeats: PositiveInt = 5
    drift_tolerance: PositiveFloat | None = None
    memory_drift_tolerance: PositiveFloat | None = None
    allreduce_drift_tolerance: PositiveFloat | None = None
    max_foreign_load_cores: NonNegativeFloat | None = None
    max_retries: NonNegativeInt = 2
    retry_budget_share: Annotated[float, Field(ge=0.0, le=1.0)] = 0.15
    retry_wait_s: NonNegativeFloat = 20.0
    quiet_wait_s: NonNegativeFloat = 60.0
    lock_timeout_s: NonNegativeFloat = 0.0
    cores_per_rank: NonNegativeInt | None = None
    timeout_s: PositiveFloat = 300.0
    threads_per_rank: PositiveInt = 1
    seed: int = 0
    collective_timeout_s: PositiveFloat = 120.0
    startup_timeout_s: PositiveFloat = 600.0
    device: Literal["auto", "cpu"] = "auto"
    fork_ranks: bool = True
    rendezvous: Rendezvous | None = None

    def __post_init__(self) -> None:
        if self.label_min_steps > self.label_max_steps:
            raise ValueError(
                f"field 'profiling.label_min_steps' (value {self.label_min_steps}) must not "
                f"exceed 'profiling.label_max_steps' (value {self.label_max_steps})"
            )

    @classmethod
    def from_preset(
        cls, section: dict[str, Any] | None, source: str = "preset", **overrides: Any
    ) -> ProfileSettings:
        """Settings from a preset's ``profiling:`` mapping, then keyword overrides.

        Args:
            section: the ``profiling:`` mapping (``None``: every default).
            source: the preset file, named in errors.
            **overrides: fields set after the section (command-line options).

        Returns:
            The validated settings.

        Raises:
            ValueError: one line per problem, ``<source>: field 'profiling.<name>' (value
                ...): what is wrong``: an unknown field, a value of the wrong type or out of
                range (pydantic's validation).
        """
        values = {**dict(section or {}), **overrides}
        try:
            return cls(**values)
        except ValidationError as exc:
            raise ValueError(describe_errors(exc, source, prefix="profiling")) from None

    def foreign_load_limit(self, cuda: bool) -> float:
        """The foreign-load threshold in cores (see :attr:`max_foreign_load_cores`)."""
        if self.max_foreign_load_cores is not None:
            return float(self.max_foreign_load_cores)
        return math.inf if cuda else 0.25

    def worker_settings(self, cores_per_rank: int, cuda: bool) -> dict[str, Any]:
        """The settings the worker reads from its task file."""
        keys = (
            "warmup_steps", "instrumented_steps", "layer_stride", "seed",
            "collective_timeout_s", "label_target_halfwidth", "label_min_steps",
            "label_max_steps", "label_budget_s", "probe_repeats", "max_retries", "retry_wait_s",
            "retry_budget_share",
        )  # fmt: skip
        values = {k: getattr(self, k) for k in keys}
        values["max_foreign_load_cores"] = self.foreign_load_limit(cuda)
        values["drift_tolerance"] = (
            self.drift_tolerance if self.drift_tolerance is not None else (0.15 if cuda else 1.0)
        )
        values["memory_drift_tolerance"] = (
            self.memory_drift_tolerance
            if self.memory_drift_tolerance is not None
            else (0.5 if cuda else 1.0)
        )
        values["allreduce_drift_tolerance"] = (
            self.allreduce_drift_tolerance
            if self.allreduce_drift_tolerance is not None
            else (0.25 if cuda else math.inf)
        )
        values["cores_per_rank"] = cores_per_rank
        return values

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe view (the rendezvous as a mapping)."""
        return dataclasses.asdict(self)
