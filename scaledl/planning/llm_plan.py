"""Plan the layout of a large-language-model training job: the fastest fitting layout per GPU count.

:func:`plan_llm` searches ``dp x tp x pp x vp x cp x sharding x recompute x micro-batch`` for
each GPU count (:class:`LlmSpace`), with ``dp = n_gpus / (tp pp cp)``, sequence parallelism on
whenever ``tp > 1`` (Megatron's default with tensor parallelism), and for each candidate:

1. the grid's rules, each refused combination counted under the first rule it breaks, in this
   order (:data:`RULES`): ``gpus`` (``tp pp cp`` divides ``n_gpus``), ``tp_heads`` (``tp``
   divides the heads and the feed-forward width, and the key/value heads or has more ranks
   than they: replicated K/V), ``tp_domain`` (``tp`` within one NVLink domain: tensor
   parallelism over the scale-out network is never run at this scale), ``vp_needs_pp``,
   ``layers`` (``pp vp <= L``; when ``pp vp`` does not divide ``L`` the split is uneven,
   :func:`uneven_split`, or refused with ``LlmSpace.uneven=False``), ``cp_seq`` (``2 cp``
   divides the sequence: the load-balanced causal split), ``cp_attention`` (context
   parallelism runs ring attention over flash-attention chunks: not with ``unfused``),
   ``batch`` (``micro_batch * dp`` divides the global batch), ``interleave`` (``vp > 1``
   needs the micro-batches per step to be a multiple of ``pp``, Megatron-LM's interleaved
   schedule), ``sharding`` (``fsdp`` or
   ``hsdp`` with nothing to shard, ``dp cp = 1``: the ``zero1`` candidate is that layout),
   ``hsdp_group`` (``hsdp`` shards within the NVLink domain: ``domain / (tp cp)`` ranks, which
   must divide ``dp`` and lie strictly between 1 and ``dp``);
2. memory per rank (:mod:`scaledl.planning.llm_memory`, the most loaded stage), refused when
   above the device's memory less the headroom, the figures in the table's ``refusal``;
3. the step time of the fitting ones, ``compose(job, kernels, network).iteration_s``
   (:func:`scaledl.parallel.llm_step.compose_step` with
   :func:`~scaledl.models.llm_kernels.kernel_model` and
   :func:`~scaledl.parallel.llm_collectives.network_model` of the GPU by default; a layout
   the composition raises ``ValueError`` for is counted under ``compose`` with its message),
   times a correction when one is given (a callable of the jobs and their step breakdowns
   returning corrected seconds: :func:`step_correction` of a fitted
   :class:`~scaledl.models.step_correction.StepCorrection`, e.g. :func:`published_correction`);
   with a team's measured steps (``measured``), times one factor in ``calibrated_iteration_s``
   (:func:`calibrate`: at least :data:`MIN_MEASURED` steps on the plan's GPU);
4. cost: GPU-hours per step (and, with ``tokens``, to train on them; with a price, money), MFU
   against the device's dense bf16 peak (fp16 where it has none) with model FLOPs
   ``6 N + 12 L h s`` per token (Narayanan et al. 2021, no recomputation counted), the
   convention of the evaluation's fixed-MFU rule; fp8 and fp4 jobs can exceed 1 on it.

A GPU count without a fitting composed layout gets one line saying why
(:attr:`LlmPlan.unplanned`); a GPU count above the largest published run
(:func:`published_max_gpus`) a warning (:attr:`LlmPlan.warnings`, the table's
``beyond_published``). :func:`plan_job` with ``as_given`` plans exactly a job's own layout
through the same steps (``given``).

The Pareto front of step time vs GPU-hours per step over the fitting candidates
(:func:`scaledl.planning.pareto.pareto_sweep`; with a fixed global batch, tokens per step are the
same for every candidate, so the front is the same for time-to-train vs GPU-hours to train)
and the fastest fitting layout per GPU count come with what was searched
(:class:`LlmSearch`). The search is bounded before it is built: at most
:data:`MAX_COMBINATIONS` combinations. Each candidate job is a copy of one validated
:class:`~scaledl.workloads.training_job.TrainingJob` with the layout the rules above checked
(they are the job's own rules plus the grid's), since validating each costs more than the
planner's budget per candidate.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scaledl.devices import UnknownDeviceError, device_spec
from scaledl.io.safe import check_regular_file, read_text
from scaledl.layout import external_root
from scaledl.models.llm_kernels import kernel_model
from scaledl.models.step_correction import (
    CorrectionGraph,
    StepCorrection,
    context_features,
    correction_graph,
)
from scaledl.parallel.llm_collectives import network_model
from scaledl.parallel.llm_step import compose_step
from scaledl.planning.llm_memory import (
    DEFAULT_HEADROOM,
    GIB,
    RECOMPUTES,
    SHARDINGS,
    attention_memory,
    rank_memory,
    usable_bytes,
)
from scaledl.planning.pareto import pareto_sweep
from scaledl.stats.metrics import scale_factor
from scaledl.workloads.files import load_yaml
from scaledl.workloads.parallelism import normalise_sharding
from scaledl.workloads.training_job import ModelShape, TrainingJob

#: The grid's rules, in the order they are checked (module docstring); then ``memory``.
RULES = ("gpus", "tp_heads", "tp_domain", "vp_needs_pp", "layers", "cp_seq", "cp_attention",
         "batch", "interleave", "sharding", "hsdp_group")  # fmt: skip
#: Most combinations (GPU counts x the space) one plan examines.
MAX_COMBINATIONS = 2_000_000
#: Columns of the layout in the plan's table.
LAYOUT_COLUMNS = ("n_gpus", "dp_size", "tp_size", "pp_size", "vp_size", "cp_size", "sharding",
                  "shard_group_size", "recompute", "micro_batch", "grad_accum",
                  "layers_per_stage")  # fmt: skip
#: A correction: the fitting jobs and their step breakdowns -> corrected step seconds.
Correction = Callable[[Sequence[TrainingJob], Sequence], np.ndarray]
#: Fewest measured steps on the plan's GPU a calibration takes: with one run of its own stack
#: the scaled composition is no better than a fixed-MFU rule (docs/llm_at_scale.md, "With a
#: few runs of your own stack": 24.8% against 24.3% mean MRE; 3 runs 18.7%, 5 runs 17.8%).
MIN_MEASURED = 3
#: Columns of :attr:`Calibration.rows`.
CALIBRATION_COLUMNS = ("file", "row", "gpu", "n_gpus", "model", "measured_s", "predicted_s",
                       "ratio", "used", "unused_kind", "reason")  # fmt: skip


def published_max_gpus(directory: str | Path | None = None) -> tuple[int, int] | None:
    """The largest GPU count of the published runs and how many files were read.

    Reads the ``n_gpus`` column of every ``*.csv`` of the published-runs folder (non-numbers
    skipped); a plan beyond it is extrapolated (:attr:`LlmPlan.warnings`).

    Args:
        directory: the folder (default: ``<external>/scale_runs``, :func:`scaledl.layout.
            external_root`).

    Returns:
        ``(largest n_gpus, files)``, or ``None`` when the folder has no CSV file.

    Raises:
        ValueError: a file that is not a regular CSV file or has no ``n_gpus`` column (named).
    """
    directory = Path(directory) if directory is not None else external_root() / "scale_runs"
    files = sorted(directory.glob("*.csv")) if directory.is_dir() else []
    if not files:
        return None
    largest = 0
    for path in files:
        try:
            column = pd.read_csv(check_regular_file(path), usecols=["n_gpus"])["n_gpus"]
        except ValueError as exc:
            raise ValueError(f"{path}: published runs: {exc}") from None
        counts = pd.to_numeric(column, errors="coerce").dropna()
        largest = max(largest, int(counts.max()) if len(counts) else 0)
    return largest, len(files)


def _coverage_warnings(counts: Sequence[int], published: tuple[int, int] | None,
                       directory: Path) -> list[str]:  # fmt: skip
    """One line when a GPU count lies beyond the published runs (or none were found)."""
    if published is None:
        return [f"warning: no published runs under {directory}: the GPU counts are not checked "
                "against the largest published run"]  # fmt: skip
    largest = published[0]
    beyond = [n for n in counts if n > largest]
    if not beyond:
        return []
    named = (f"GPU counts {', '.join(f'{n:,}' for n in beyond)} exceed" if len(beyond) > 1
             else f"GPU count {beyond[0]:,} exceeds")  # fmt: skip
    return [f"warning: {named} the largest published run ({largest:,} GPUs, {directory}): "
            "step times there are extrapolated, not checked against any measured step"]  # fmt: skip


class LlmPlanError(ValueError):
    """A plan's inputs are refused (named), or nothing fits (with the counts)."""


def _positive_ints(name: str, values) -> tuple[int, ...]:
    values = tuple(values)
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, np.integer))
           or v < 1]  # fmt: skip
    if not values or bad:
        raise LlmPlanError(f"plan space: field {name!r} (value {values!r}): positive integers")
    return tuple(dict.fromkeys(int(v) for v in values))


@dataclass(frozen=True)
class LlmSpace:
    """The layouts a plan searches for each GPU count.

    Attributes:
        tp_sizes, pp_sizes, vp_sizes, cp_sizes: tensor, pipeline, virtual-pipeline and
            context-parallel sizes.
        shardings: ``none``, ``zero1`` (Megatron's distributed optimizer), ``zero2``,
            ``fsdp``, ``hsdp``.
        recomputes: ``none``, ``selective``, ``full``.
        micro_batches: samples per micro-batch.
        uneven: whether ``pp * vp`` not dividing the layers gives an uneven split
            (:func:`uneven_split`) rather than a refusal.
    """

    tp_sizes: tuple[int, ...] = (1, 2, 4, 8)
    pp_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    vp_sizes: tuple[int, ...] = (1, 2, 4, 5)
    cp_sizes: tuple[int, ...] = (1, 2, 4)
    shardings: tuple[str, ...] = ("zero1", "fsdp", "hsdp")
    recomputes: tuple[str, ...] = RECOMPUTES
    micro_batches: tuple[int, ...] = (1, 2)
    uneven: bool = True

    def __post_init__(self) -> None:
        """Check the values; drop repeats.

        Raises:
            LlmPlanError: an empty field or a bad value (naming the field and the value).
        """
        for name in ("tp_sizes", "pp_sizes", "vp_sizes", "cp_sizes", "micro_batches"):
            object.__setattr__(self, name, _positive_ints(name, getattr(self, name)))
        object.__setattr__(
            self, "shardings", tuple(normalise_sharding(v) for v in self.shardings)
        )  # the job's aliases (distributed_optimizer = zero1) are accepted here too
        for name, allowed in (("shardings", SHARDINGS), ("recomputes", RECOMPUTES)):
            values = tuple(getattr(self, name))
            bad = [v for v in values if v not in allowed]
            if bad or not values:
                raise LlmPlanError(
                    f"plan space: field {name!r} (value {bad or 'empty'}): each one of {allowed}"
                )
            object.__setattr__(self, name, tuple(dict.fromkeys(values)))

    def combinations(self) -> int:
        """Layouts per GPU count (the product of the fields' sizes)."""
        return math.prod(len(getattr(self, f)) for f in (
            "tp_sizes", "pp_sizes", "vp_sizes", "cp_sizes", "shardings", "recomputes",
            "micro_batches"))  # fmt: skip


@dataclass(frozen=True)
class Calibration:
    """A plan's step times calibrated on a team's measured steps (:func:`calibrate`).

    Attributes:
        factor: the geometric mean of measured / predicted seconds over the used rows.
        rows: one row per CSV data row read (:data:`CALIBRATION_COLUMNS`): ``file`` and
            ``row`` (1-based data row) name it; ``measured_s`` and, where composed,
            ``predicted_s`` and ``ratio`` (measured / predicted); ``used``; for the others
            ``unused_kind`` (``quarantined``, ``no measured step``, ``another GPU``,
            ``composition``) and ``reason``.
        gpu: the plan's GPU (device-table name).
        other_stack: used rows whose ``attention_kernel`` or ``elementwise`` differ from the
            plan's job (the factor then carries the difference between the two stacks).
        stack: the plan job's ``(attention_kernel, elementwise)``.
    """

    factor: float
    rows: pd.DataFrame
    gpu: str
    other_stack: int = 0
    stack: tuple[str, str] = ("cudnn", "fused")

    @property
    def k(self) -> int:
        """Measured steps the factor is fitted on."""
        return int(self.rows["used"].sum())

    @property
    def ratio_range(self) -> tuple[float, float]:
        """The smallest and largest measured / predicted over the used rows."""
        ratios = self.rows.loc[self.rows["used"], "ratio"]
        return float(ratios.min()), float(ratios.max())

    def text(self) -> str:
        """Lines: the factor, k, the spread, and every unused row with its reason."""
        low, high = self.ratio_range
        lines = [
            f"calibrated on {self.k} measured steps on {self.gpu}: factor {self.factor:.3f} "
            f"(geometric mean of measured / predicted; range {low:.3f}-{high:.3f}); "
            "calibrated_iteration_s = iteration_s x factor (one factor: ranking and front "
            "unchanged; mfu, train_h, gpu_hours and cost are of iteration_s)"
        ]
        if self.other_stack:
            lines.append(
                f"warning: {self.other_stack} of the {self.k} measured steps ran another "
                f"attention kernel or elementwise operators than the plan's job "
                f"({self.stack[0]}, {self.stack[1]}): give the job your stack's values"
            )
        unused = self.rows[~self.rows["used"]]
        if len(unused):
            lines.append(f"unused measured rows ({len(unused)}):")
            lines += [f"  {r.file} row {r.row}: {r.reason}" for r in unused.itertuples()]
        return "\n".join(lines)


@dataclass(frozen=True)
class LlmSearch:
    """What a plan searched.

    Attributes:
        combinations: GPU counts x layouts examined.
        refused: combinations refused per rule (:data:`RULES`, then ``memory``, then
            ``compose``: a fitting layout the composition raised a ``ValueError`` for).
        candidates: combinations passing the grid's rules (the table's rows).
        fitting: candidates whose memory fits.
        composed: fitting candidates with a step time.
        seconds: wall time of the plan.
        compose_seconds: of it, composing (and correcting) the fitting candidates' steps.
        refused_by_count: ``refused`` of each GPU count (rules with no refusal left out).
    """

    combinations: int
    refused: dict[str, int]
    candidates: int
    fitting: int
    composed: int
    seconds: float
    compose_seconds: float
    refused_by_count: dict[int, dict[str, int]] = field(default_factory=dict)

    def text(self, usable_gib: float, memory_gib: float, headroom: float) -> str:
        """Lines saying what was searched and why candidates were dropped."""
        rules = ", ".join(f"{k} {v:,}" for k, v in self.refused.items()
                          if k not in ("memory", "compose") and v)  # fmt: skip
        failed = self.refused.get("compose", 0)
        not_composed = f" ({failed:,} refused by the composition)" if failed else ""
        return (
            f"searched {self.combinations:,} combinations: {self.candidates:,} valid layouts "
            f"(refused by rule: {rules or 'none'}); {self.refused.get('memory', 0):,} do not "
            f"fit in {usable_gib:.1f} GiB per rank ({memory_gib:g} GiB less {headroom:.0%} "
            f"headroom); {self.composed:,} composed{not_composed} in "
            f"{self.compose_seconds:.1f} s of {self.seconds:.1f} s"
        )


@dataclass(frozen=True)
class LlmPlan:
    """A planned job: every valid layout, the front, the fastest per GPU count.

    Attributes:
        table: one row per valid layout (:data:`LAYOUT_COLUMNS`; memory per rank in GiB by
            kind, ``peak_stage``, ``fits``, ``refusal``; for fitting ones ``iteration_s``,
            ``tokens_per_s``, ``mfu``, ``gpu_hours_per_step``, optional ``train_h``,
            ``gpu_hours``, ``cost``, the composition's components in seconds; ``pareto``).
        searched: what was searched (:class:`LlmSearch`).
        description: the job planned, one line.
        memory_gib: the device's memory, GiB.
        headroom: share of it kept free.
        calibration: the team's measured steps' factor (:class:`Calibration`; the table then
            has ``calibrated_iteration_s``), or ``None``.
        given: the plan is of a job's own layout (:func:`plan_job` with ``as_given``): at
            most one row, composed even when it does not fit.
        unplanned: for each GPU count with no fitting composed layout, one line saying why
            (:func:`_unplanned`).
        warnings: lines printed under the description: GPU counts beyond the largest published
            run (:func:`published_max_gpus`; the table's ``beyond_published`` column).
    """

    table: pd.DataFrame
    searched: LlmSearch
    description: str
    memory_gib: float
    headroom: float = DEFAULT_HEADROOM
    calibration: Calibration | None = None
    given: bool = False
    unplanned: dict[int, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    @property
    def front(self) -> pd.DataFrame:
        """The Pareto front (step time vs GPU-hours per step), fastest first."""
        return self.table[self.table["pareto"]].sort_values("iteration_s", kind="stable")

    @property
    def best_per_gpu_count(self) -> pd.DataFrame:
        """The fastest fitting layout of each GPU count (ties: the first in search order)."""
        fit = self.table[self.table["fits"] & self.table["iteration_s"].notna()]
        if fit.empty:
            return fit
        return fit.loc[fit.groupby("n_gpus", sort=True)["iteration_s"].idxmin()]

    def why_none(self) -> str:
        """Why no layout has a step time: the counts; the least memory layout, its figures.

        Raises:
            ValueError: some layout fits and was composed.
        """
        if self.table["iteration_s"].notna().any():
            raise ValueError("a layout fits")
        usable = usable_bytes(self.memory_gib, self.headroom) / GIB
        head = f"no layout fits: {self.searched.text(usable, self.memory_gib, self.headroom)}"
        if self.table.empty:
            return head
        least = self.table.loc[self.table["memory_gib"].idxmin()]
        if least["fits"]:  # every fitting layout was refused by the composition
            return f"{head}; e.g. {least['refusal']}"
        layout = " ".join(f"{c}={least[c]}" for c in LAYOUT_COLUMNS[:10])
        return f"{head}; the least memory per rank: {layout}: {least['refusal']}"

    def given_problem(self) -> str:
        """Why a job's own layout (``given``) has no usable step time; ``""`` when it has one.

        The layout refused by a rule (the counts), not fitting in memory (its figures, and its
        step time composed as if it fitted where the composition ran), or refused by the
        composition (its message).
        """
        if self.table.empty:
            usable = usable_bytes(self.memory_gib, self.headroom) / GIB
            return ("the job's layout is refused: "
                    + self.searched.text(usable, self.memory_gib, self.headroom))  # fmt: skip
        row = self.table.iloc[0]
        composed = math.isfinite(row["iteration_s"])
        if row["fits"] and composed:
            return ""
        if row["fits"]:
            return f"the job's layout: {row['refusal']}"
        step = (f"; its step time composed as if it fitted: {row['iteration_s']:.3f} s"
                if composed else "")  # fmt: skip
        return f"the job's layout {row['refusal']}{step}"

    def to_text(self, all_rows: bool = False) -> str:
        """The plan as text: the job, what was searched, the best per GPU count, the front.

        A ``given`` plan: the job and the job's layout's row (marked ``DOES NOT FIT`` when it
        does not fit in memory; :meth:`given_problem` says why in one line).
        """
        usable = usable_bytes(self.memory_gib, self.headroom) / GIB
        lines = [self.description, *self.warnings]
        if not self.given:
            lines.append(self.searched.text(usable, self.memory_gib, self.headroom))
        if self.calibration is not None:
            lines.append(self.calibration.text())
        if self.given:
            shown = _shown(self.table)
            if len(shown) and not self.table["fits"].all():
                shown.insert(0, "fits", "DOES NOT FIT")
            lines += ["", "the job's layout as given:", shown.to_string(index=False)]
            return "\n".join(lines)
        if all_rows:
            lines += ["", "every valid layout:", _shown(self.table).to_string(index=False)]
        lines += ["", "fastest fitting layout per GPU count:",
                  _shown(self.best_per_gpu_count).to_string(index=False)]  # fmt: skip
        lines += [f"{n:,} GPUs: {why}" for n, why in self.unplanned.items()]
        lines += ["", "Pareto front (step time vs GPU-hours per step):",
                  _shown(self.front).to_string(index=False)]  # fmt: skip
        return "\n".join(lines)


_SHOWN = ("n_gpus", "dp_size", "tp_size", "pp_size", "vp_size", "cp_size", "sharding",
          "recompute", "micro_batch", "grad_accum", "memory_gib", "iteration_s",
          "calibrated_iteration_s", "mfu", "gpu_hours_per_step", "train_h", "gpu_hours", "cost",
          "refusal")  # fmt: skip


def _shown(t: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in _SHOWN if c in t.columns]
    out = t[cols].copy()
    if "refusal" in out and out["refusal"].eq("").all():
        out = out.drop(columns="refusal")
    for c, digits in (("memory_gib", 1), ("iteration_s", 3), ("calibrated_iteration_s", 3),
                      ("mfu", 3), ("gpu_hours_per_step", 4), ("train_h", 1), ("gpu_hours", 0),
                      ("cost", 0)):  # fmt: skip
        if c in out:
            out[c] = out[c].round(digits)
    return out


def _rule_texts(global_batch: int, seq_len: int, domain: int) -> dict[str, str]:
    """What each grid rule asks, one phrase each (:data:`RULES`)."""
    return {
        "gpus": "tp x pp x cp must divide the GPU count",
        "tp_heads": "tp must divide the heads, the feed-forward width and the KV heads",
        "tp_domain": f"tp within the NVLink domain of {domain}",
        "vp_needs_pp": "vp > 1 needs pp > 1",
        "layers": "pp x vp at most the layers",
        "cp_seq": f"2 x cp must divide the sequence {seq_len:,}",
        "cp_attention": "no context parallelism with unfused attention",
        "batch": f"micro_batch x dp must divide the global batch {global_batch:,}",
        "interleave": "with vp > 1 the micro-batches per step a multiple of pp",
        "sharding": "fsdp/hsdp with dp x cp = 1 shard nothing",
        "hsdp_group": "the HSDP group (NVLink domain / (tp x cp)) must divide dp",
    }


def _unplanned(refused_by_count: dict[int, Counter], table: pd.DataFrame, global_batch: int,
               seq_len: int, domain: int) -> dict[int, str]:  # fmt: skip
    """Why each GPU count without a fitting composed layout has none, one line each.

    No valid layout: the refusals by rule with what each rule asks, the last rule in the
    checking order first (the one the layouts passing the others break); valid
    layouts but none fitting: how many and the least memory per rank; fitting ones the
    composition refused: how many and its first message.
    """
    texts = _rule_texts(global_batch, seq_len, domain)
    out = {}
    for n, per in refused_by_count.items():
        rows = table[table["n_gpus"] == n]
        fit = rows[rows["fits"].astype(bool)]
        if fit["iteration_s"].notna().any():
            continue
        if rows.empty:
            rules = [(k, per[k]) for k in reversed(RULES) if per.get(k)]
            why = [f"{k} {v:,} ({texts[k]})" for k, v in rules]
            out[n] = (f"no valid layout: {sum(v for _, v in rules):,} combinations refused, "
                      f"the last rule reached {why[0]}"
                      + (f"; earlier rules {', '.join(why[1:])}" if why[1:] else ""))  # fmt: skip
        elif fit.empty:
            out[n] = (f"none of the {len(rows):,} valid layouts fits in memory (the least: "
                      f"{rows['memory_gib'].min():.1f} GiB per rank)")  # fmt: skip
        else:
            out[n] = (f"the composition refused all {len(fit):,} fitting layouts, e.g. "
                      f"{fit['refusal'].iloc[0]}")  # fmt: skip
    return out


def uneven_split(num_layers: int, n_stages: int) -> tuple[int, ...]:
    """Layers per virtual stage when ``n_stages`` does not divide ``num_layers``.

    Each gets ``L // n``; the ``L % n`` extra layers go one each to the virtual stages after
    the first (which carries the embedding) and before the last (the output layer), from the
    second on; when fewer middle stages exist, the rest go to the last stages backwards.

    Raises:
        ValueError: more stages than layers.
    """
    if n_stages > num_layers:
        raise ValueError(f"{n_stages} virtual stages for {num_layers} layers")
    base, extra = divmod(num_layers, n_stages)
    split = [base] * n_stages
    order = list(range(1, n_stages - 1)) + [n_stages - 1, 0]
    for k in order[:extra]:
        split[k] += 1
    return tuple(split)


def _layouts(model: ModelShape, n: int, seq_len: int, global_batch: int, space: LlmSpace,
             domain: int, refused: Counter, unfused: bool = False,
             given: TrainingJob | None = None):  # fmt: skip
    """Yield the valid layouts of ``n`` GPUs as tuples; count refusals per rule.

    With ``given`` (a job composed as given, :func:`plan_llm`), the search's own choices are
    not applied (``tp_domain``, ``layers``, ``sharding``, ``hsdp_group``: the job names its
    split and shard group; the job's validation checked what a job must satisfy).
    """
    per_rest = len(space.shardings) * len(space.recomputes) * len(space.micro_batches)
    heads, kv, ffn, L = model.num_heads, model.num_kv_heads, model.ffn_size, model.num_layers
    for tp, pp, vp, cp in itertools.product(space.tp_sizes, space.pp_sizes, space.vp_sizes,
                                            space.cp_sizes):  # fmt: skip
        rule = None
        if n % (tp * pp * cp):
            rule = "gpus"
        elif heads % tp or ffn % tp or (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            rule = "tp_heads"
        elif tp > domain and given is None:
            rule = "tp_domain"
        elif vp > 1 and pp == 1:
            rule = "vp_needs_pp"
        elif given is None and (pp * vp > L or (L % (pp * vp) and not space.uneven)):
            rule = "layers"
        elif cp > 1 and seq_len % (2 * cp):
            rule = "cp_seq"
        elif cp > 1 and unfused:
            rule = "cp_attention"
        if rule:
            refused[rule] += per_rest
            continue
        dp = n // (tp * pp * cp)
        split = None if L % (pp * vp) == 0 else uneven_split(L, pp * vp)
        if given is not None:
            split = given.layers_per_stage
        for mb in space.micro_batches:
            if global_batch % (mb * dp):
                refused["batch"] += len(space.shardings) * len(space.recomputes)
                continue
            accum = global_batch // (mb * dp)
            if vp > 1 and accum % pp:
                refused["interleave"] += len(space.shardings) * len(space.recomputes)
                continue
            for sharding in space.shardings:
                group = None
                if given is not None:
                    group = given.shard_group_size
                elif sharding in ("fsdp", "hsdp") and dp * cp == 1:
                    refused["sharding"] += len(space.recomputes)
                    continue
                elif sharding == "hsdp":
                    group = domain // (tp * cp)
                    if not 1 < group < dp or dp % group:
                        refused["hsdp_group"] += len(space.recomputes)
                        continue
                for recompute in space.recomputes:
                    yield tp, pp, vp, cp, dp, mb, accum, sharding, group, recompute, split


def plan_llm(
    model: ModelShape,
    gpu: str,
    gpu_counts: Sequence[int],
    seq_len: int,
    global_batch: int,
    *,
    space: LlmSpace | None = None,
    precision: str = "bf16",
    task: str = "pretrain",
    attention_kernel: str = "cudnn",
    elementwise: str = "fused",
    gpus_per_node: int = 8,
    nvlink_domain_size: int | None = None,
    network_gbps: float | None = None,
    headroom: float = DEFAULT_HEADROOM,
    memory_gib: float | None = None,
    tokens: float | None = None,
    price_per_gpu_hour: float | None = None,
    compose: Callable = compose_step,
    kernels=None,
    network=None,
    correction: Correction | None = None,
    measured: Sequence[str | Path] | None = None,
    given: TrainingJob | None = None,
) -> LlmPlan:
    """Plan a job's layout for each GPU count (module docstring).

    Args:
        model: the transformer.
        gpu: a device-table name.
        gpu_counts: GPU counts to plan (each a multiple of ``gpus_per_node`` from one node up).
        seq_len: tokens per sample.
        global_batch: samples per optimizer step.
        space: the layouts searched (:class:`LlmSpace` defaults).
        precision: the job's precision.
        task: ``pretrain``, ``sft`` or ``lora``.
        attention_kernel: the framework's flash-attention kernel (``TrainingJob``'s field).
        elementwise: ``fused`` or ``eager`` norms, activation and rotary (``TrainingJob``).
        gpus_per_node: GPUs per node.
        nvlink_domain_size: GPUs per NVLink domain (``None``: the device table's, else the node).
        network_gbps: scale-out bandwidth per GPU, one direction, GB/s (``None``: the device
            table's; ``TrainingJob.network_gbps``).
        headroom: share of the device's memory kept free (:mod:`~scaledl.planning.llm_memory`).
        memory_gib: the device's memory in GiB (``None``: the device table's ``memory_gb``,
            the nominal binary capacity).
        tokens: tokens to train on (adds ``train_h`` and ``gpu_hours``).
        price_per_gpu_hour: price of one GPU-hour (adds ``cost``, per step or to train).
        compose: ``(job, kernels, network) -> StepBreakdown`` (default :func:`compose_step`).
        kernels: the kernel model composed with (default: the GPU's fitted one).
        network: the network model (default: the GPU's measured one).
        correction: corrected step seconds of the fitting jobs (module docstring).
        measured: CSV files of the team's measured steps in the published-runs columns
            (:func:`calibrate`, with this plan's GPU, models, composition and correction); the
            table then has ``calibrated_iteration_s``.
        given: a job whose own layout is composed (:func:`plan_job` with ``as_given``; the
            space and GPU counts must be pinned to its values): its ``layers_per_stage``,
            ``shard_group_size`` and ``sequence_parallel`` are kept, the search's own choices
            (rules ``tp_domain``, ``layers``, ``sharding``, ``hsdp_group``) are not applied,
            and it is composed even when it does not fit in memory (``fits`` False: never on
            the front nor the fastest per GPU count).

    Returns:
        The :class:`LlmPlan`.

    Raises:
        LlmPlanError: a bad GPU count, headroom or price, too large a search (named), a
            candidate the job validation refuses (a disagreement between the grid's rules and
            the job's, named), or measured files :func:`calibrate` refuses (before the search).
    """
    started = time.perf_counter()
    space = space or LlmSpace()
    counts = _positive_ints("gpu_counts", gpu_counts)
    for n in counts:
        if n >= gpus_per_node and n % gpus_per_node:
            raise LlmPlanError(
                f"gpu_counts: {n} is not a multiple of gpus_per_node={gpus_per_node}"
            )
    combinations = len(counts) * space.combinations()
    if combinations > MAX_COMBINATIONS:
        raise LlmPlanError(f"plan: {combinations:,} combinations (GPU counts x layouts) exceed "
                           f"{MAX_COMBINATIONS:,}: narrow the space")  # fmt: skip
    for name, value in (("tokens", tokens), ("price_per_gpu_hour", price_per_gpu_hour)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise LlmPlanError(f"plan: {name}={value!r} must be > 0")
    try:
        spec = device_spec(gpu)
    except UnknownDeviceError as exc:
        raise LlmPlanError(f"plan: gpu={gpu!r}: {exc}") from None
    gpu = spec.device_name
    memory_gib = float(memory_gib if memory_gib is not None else spec.memory_gb)
    try:
        usable = usable_bytes(memory_gib, headroom)
    except ValueError as exc:
        raise LlmPlanError(f"plan: {exc}") from None
    domain = nvlink_domain_size or spec.nvlink_domain or gpus_per_node
    kernels = kernels if kernels is not None else kernel_model(gpu)
    network = network if network is not None else network_model(gpu, domain, network_gbps)

    try:  # validated once; each candidate is a copy with the layout the grid's rules checked
        template = TrainingJob.from_mapping({
            "model": model.model_dump(), "seq_len": seq_len, "gpu": gpu, "n_gpus": 1,
            "gpus_per_node": gpus_per_node, "nvlink_domain_size": domain,
            "network_gbps": network_gbps, "precision": precision,
            "global_batch": global_batch, "task": task,
            "attention_kernel": attention_kernel, "elementwise": elementwise,
        }, "job")  # fmt: skip
    except ValueError as exc:
        raise LlmPlanError(f"plan: {exc}") from None
    calibration = None
    if measured is not None:
        calibration = calibrate(measured, template, kernels, network, compose=compose,
                                correction=correction)  # fmt: skip
    by_count: dict[int, Counter] = {n: Counter() for n in counts}
    rows: list[tuple] = []
    fit_jobs: list[TrainingJob] = []
    fit_rows: list[int] = []
    for n in counts:
        for tp, pp, vp, cp, dp, mb, accum, sharding, group, recompute, split in _layouts(
            model,
            n,
            seq_len,
            global_batch,
            space,
            domain,
            by_count[n],
            attention_kernel == "unfused",
            given,
        ):
            if given is None:
                group = group if sharding == "hsdp" else (1 if sharding == "none" else dp)
            sp = given.sequence_parallel if given is not None else tp > 1
            mem = rank_memory(
                model, seq_len=seq_len, micro_batch=mb, grad_accum=accum, tp_size=tp,
                pp_size=pp, vp_size=vp, cp_size=cp, dp_size=dp, sequence_parallel=sp,
                layers_per_stage=split, sharding=sharding, shard_group_size=group,
                recompute=recompute, precision=precision, task=task,
                attention=attention_memory(attention_kernel),
            )  # fmt: skip
            fits = mem.total_bytes <= usable
            refusal = "" if fits else (
                f"does not fit: {mem.describe()} > {usable / GIB:.1f} GiB usable")  # fmt: skip
            rows.append((n, dp, tp, pp, vp, cp, sharding, group, recompute, mb, accum, split,
                         mem.weights_bytes / GIB, mem.gradients_bytes / GIB,
                         mem.optimizer_bytes / GIB, mem.activations_bytes / GIB,
                         mem.total_bytes / GIB, mem.stage, fits, refusal))  # fmt: skip
            if not fits:
                by_count[n]["memory"] += 1
                if given is None:
                    continue
            job = template.model_copy(update={
                "n_gpus": n, "tp_size": tp, "pp_size": pp, "cp_size": cp, "vp_size": vp,
                "dp_size": dp, "sequence_parallel": sp, "layers_per_stage": split,
                "sharding": sharding, "shard_group_size": group,
                "activation_checkpointing": recompute, "micro_batch": mb, "grad_accum": accum,
            })  # fmt: skip
            fit_jobs.append(job)
            fit_rows.append(len(rows) - 1)

    compose_started = time.perf_counter()
    steps, timed_jobs, timed_rows = [], [], []
    for job, row in zip(fit_jobs, fit_rows, strict=True):
        try:
            step = compose(job, kernels, network)
        except ValueError as exc:  # a layout the composition does not model: counted, shown
            by_count[job.n_gpus]["compose"] += 1
            refusal = "; ".join(filter(None, (rows[row][-1], f"composition: {exc}")))
            rows[row] = (*rows[row][:-1], refusal)
            continue
        steps.append(step)
        timed_jobs.append(job)
        timed_rows.append(row)
    iteration = np.array([s.iteration_s for s in steps], dtype=float)
    if correction is not None and steps:
        iteration = np.asarray(correction(timed_jobs, steps), dtype=float).reshape(-1)
        if iteration.shape != (len(steps),) or not np.all(np.isfinite(iteration) & (iteration > 0)):
            raise LlmPlanError("plan: the correction must return one positive step time per job")
    compose_s = time.perf_counter() - compose_started

    table = pd.DataFrame.from_records(rows, columns=[
        *LAYOUT_COLUMNS, "weights_gib", "grads_gib", "optimizer_gib", "activations_gib",
        "memory_gib", "peak_stage", "fits", "refusal"])  # fmt: skip
    table["iteration_s"] = np.nan
    fit_index = np.asarray(timed_rows, dtype=np.int64)
    table.loc[fit_index, "iteration_s"] = iteration
    if calibration is not None:
        table["calibrated_iteration_s"] = table["iteration_s"] * calibration.factor
    components = pd.DataFrame.from_records([s.components_s for s in steps], index=fit_index)
    for name in components.columns:
        table[name] = components[name]
    tokens_per_step = float(global_batch) * seq_len
    table["tokens_per_s"] = tokens_per_step / table["iteration_s"]
    flops_per_token = 6.0 * model.n_params() + 12.0 * model.num_layers * seq_len * model.hidden_size
    peak = spec.peak_tflops.get("bf16", math.nan)
    peak = 1e12 * (peak if peak > 0 else spec.peak_tflops.get("fp16", math.nan))
    table["mfu"] = flops_per_token * table["tokens_per_s"] / (table["n_gpus"] * peak)
    table["gpu_hours_per_step"] = table["n_gpus"] * table["iteration_s"] / 3600.0
    if tokens is not None:
        steps_needed = tokens / tokens_per_step
        table["train_h"] = table["iteration_s"] * steps_needed / 3600.0
        table["gpu_hours"] = table["gpu_hours_per_step"] * steps_needed
    if price_per_gpu_hour is not None:
        basis = table["gpu_hours"] if tokens is not None else table["gpu_hours_per_step"]
        table["cost"] = basis * price_per_gpu_hour
    table["pareto"] = False
    front_index = fit_index[table.loc[fit_index, "fits"].to_numpy(dtype=bool)]
    if len(front_index):
        on = pareto_sweep(table.loc[front_index, "iteration_s"].to_numpy(),
                          table.loc[front_index, "gpu_hours_per_step"].to_numpy(),
                          front_index)  # fmt: skip
        table.loc[front_index[on], "pareto"] = True

    refused: Counter = Counter({rule: 0 for rule in (*RULES, "memory", "compose")})
    for per in by_count.values():
        refused.update(per)
    searched = LlmSearch(
        combinations=combinations,
        refused=dict(refused),
        refused_by_count={n: dict(per) for n, per in by_count.items()},
        candidates=len(rows),
        fitting=int(table["fits"].sum()),
        composed=len(timed_rows),
        seconds=time.perf_counter() - started,
        compose_seconds=compose_s,
    )
    description = (
        f"planned a {model.n_params() / 1e9:.1f}B-parameter transformer ({model.num_layers} "
        f"layers, width {model.hidden_size}) on {spec.device_name}, {precision}, {task}: "
        f"sequence {seq_len:,}, global batch {global_batch:,} ({tokens_per_step / 1e6:.2f}M "
        f"tokens per step), "
        + (f"the job's layout as given ({given.n_gpus} GPUs, {given.label()}"
           + (f", layers per stage {list(given.layers_per_stage)}" if given.layers_per_stage
              else "") + ")"
           if given is not None else f"GPU counts {list(counts)}")
        + f", NVLink domain {domain}, attention "
        f"{attention_kernel}, {elementwise} elementwise operators; step times "
        + ("composed and corrected" if correction is not None else "composed, uncorrected")
        + (f"; calibrated x{calibration.factor:.3f} on {calibration.k} measured steps"
           if calibration is not None else "")
    )  # fmt: skip
    unplanned = _unplanned(by_count, table, global_batch, seq_len, domain)
    published_dir = external_root() / "scale_runs"
    try:
        published = published_max_gpus(published_dir)
    except ValueError as exc:
        raise LlmPlanError(str(exc)) from None
    warnings = _coverage_warnings(counts, published, published_dir)
    table["beyond_published"] = published is not None and table["n_gpus"] > published[0]
    return LlmPlan(table, searched, description, memory_gib, headroom, calibration,
                   given is not None, unplanned, tuple(warnings))  # fmt: skip


def plan_job(
    job: TrainingJob,
    gpu_counts: Sequence[int] | None = None,
    *,
    as_given: bool = False,
    **options,
) -> LlmPlan:
    """:func:`plan_llm` of a job's model, GPU, sequence, batch, precision, task and network.

    Without ``as_given`` the job's own layout is not kept: every layout of the space is
    searched. With it, exactly the job's layout is planned: the space is pinned to its tp, pp,
    vp, cp, sharding, recompute and micro-batch on its ``n_gpus``, its ``layers_per_stage``,
    ``shard_group_size`` and ``sequence_parallel`` are kept (:func:`plan_llm`'s ``given``), so
    the memory check, the correction and the calibration apply as in a search; the one row is
    composed even when it does not fit (``fits`` False).

    Args:
        job: the job.
        gpu_counts: GPU counts to plan (default: the job's); not with ``as_given``.
        as_given: plan the job's own layout only.
        **options: :func:`plan_llm`'s keyword arguments (``measured``: CSV files of the team's
            measured steps, :func:`calibrate`); with ``as_given`` no ``space``.

    Raises:
        LlmPlanError: :func:`plan_llm`'s, or ``as_given`` with GPU counts or a space.
    """
    options.setdefault("nvlink_domain_size", job.nvlink_domain_size)
    options.setdefault("network_gbps", job.network_gbps)
    if as_given:
        if gpu_counts is not None or options.get("space") is not None:
            raise LlmPlanError("plan: the job's layout as given takes no GPU counts nor space "
                               f"(it is planned on the job's n_gpus={job.n_gpus})")  # fmt: skip
        gpu_counts = [job.n_gpus]
        options["space"] = LlmSpace(
            tp_sizes=(job.tp_size,), pp_sizes=(job.pp_size,), vp_sizes=(job.vp_size,),
            cp_sizes=(job.cp_size,), shardings=(job.sharding,),
            recomputes=(job.activation_checkpointing,), micro_batches=(job.micro_batch,),
        )  # fmt: skip
        options["given"] = job
    return plan_llm(
        job.model,
        job.gpu,
        gpu_counts if gpu_counts is not None else [job.n_gpus],
        job.seq_len,
        job.global_batch,
        precision=job.precision,
        task=job.task,
        attention_kernel=job.attention_kernel,
        elementwise=job.elementwise,
        gpus_per_node=job.gpus_per_node,
        **options,
    )


def _read_runs(paths):
    """The published-runs importer's result for ``paths`` (``None``: the published files)."""
    # Imported here: the importer loads great-expectations (about 4 s), which a plan without
    # the correction or measured steps never needs.
    from scaledl.external.published_runs import DEFAULT_PATHS, read_published_runs

    return read_published_runs(paths if paths is not None else DEFAULT_PATHS)


def calibrate(
    paths: Sequence[str | Path],
    template: TrainingJob,
    kernels,
    network,
    *,
    compose: Callable = compose_step,
    correction: Correction | None = None,
) -> Calibration:
    """One factor for a plan from a team's measured steps: measured / predicted, geometric mean.

    The files are read as published runs (the 46 columns of ``external/scale_runs/README.md``,
    :func:`~scaledl.external.published_runs.read_published_runs`: the same checks, a row that
    cannot be a job quarantined with its file, row, column, value and reason). Each accepted
    row with a measured step (``iteration_s``) on the plan's GPU is composed with the plan's
    ``compose`` and ``kernels`` (the network: the plan's where the row's NVLink domain and
    scale-out bandwidth are the plan's, else the GPU's measured model at the row's), corrected
    with the plan's ``correction`` if any; the factor is
    :func:`~scaledl.stats.metrics.scale_factor` of those. Rows on another GPU are not used
    (listed with the reason): the factor is a stack's efficiency, but the kernel models and the
    efficiency differ by GPU generation, so a factor measured on another GPU is not assumed to
    carry over. Precision, model and layout are not matched: one factor per stack, as in the
    few-shot evaluation.

    Args:
        paths: CSV files (distinct file stems), or one.
        template: a job of the plan (its GPU, NVLink domain and scale-out bandwidth).
        kernels: the plan's kernel model.
        network: the plan's network model.
        compose: the plan's composition.
        correction: the plan's correction.

    Returns:
        The :class:`Calibration`.

    Raises:
        LlmPlanError: no file, a file the importer refuses (named), or fewer than
            :data:`MIN_MEASURED` usable rows (naming the files and why rows are unused).
    """
    paths = [Path(paths)] if isinstance(paths, str | Path) else [Path(p) for p in paths]
    if not paths:
        raise LlmPlanError("measured steps: no file given")
    try:
        read = _read_runs(paths)
    except ValueError as exc:  # PublishedRunsError: unreadable, a column missing (named)
        raise LlmPlanError(f"measured steps: {exc}") from None
    files = {p.stem: str(p) for p in paths}
    records: list[dict] = []
    for q in read.quarantine.itertuples(index=False):
        reason = f"quarantined: field {q.field!r} (value {q.value}): {q.reason}"
        records.append({"file": files[q.source], "row": q.row, "used": False,
                        "unused_kind": "quarantined", "reason": reason})  # fmt: skip
    gpu = template.gpu
    same_network = (template.nvlink_domain_size, template.network_gbps)
    jobs, steps, composed = [], [], []
    for r in read.runs.itertuples(index=False):
        job = r.job
        record = {"file": files[r.source], "row": r.row, "gpu": job.gpu, "n_gpus": job.n_gpus,
                  "model": r.model_name, "measured_s": r.iteration_s, "used": False}  # fmt: skip
        records.append(record)
        if not math.isfinite(r.iteration_s):
            record.update(unused_kind="no measured step", reason="no measured step (iteration_s "
                          "blank)")  # fmt: skip
            continue
        if job.gpu != gpu:
            record.update(unused_kind="another GPU", reason=f"GPU {job.gpu}, not the plan's")
            continue
        try:
            net = network
            if (job.nvlink_domain_size, job.network_gbps) != same_network:
                net = network_model(job.gpu, job.nvlink_domain_size, job.network_gbps)
            step = compose(job, kernels, net)
        except (ValueError, UnknownDeviceError) as exc:
            record.update(unused_kind="composition", reason=f"composition: {exc}")
            continue
        jobs.append(job)
        steps.append(step)
        composed.append(record)
    if len(composed) < MIN_MEASURED:
        kinds = Counter(r["unused_kind"] for r in records if not r["used"] and "unused_kind" in r)
        why = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) or "none"
        first = next((f"{r['file']} row {r['row']}: {r['reason']}" for r in records
                      if r.get("unused_kind") == "quarantined"), "")  # fmt: skip
        raise LlmPlanError(
            f"measured steps ({', '.join(map(str, paths))}): {len(composed)} usable on {gpu}, "
            f"at least {MIN_MEASURED} needed (with 1 run a per-stack factor is no better than a "
            "fixed-MFU rule: 24.8% against 24.3% mean MRE, docs/llm_at_scale.md); unused rows: "
            + why
            + (f"; e.g. {first}" if first else "")
        )
    predicted = np.array([s.iteration_s for s in steps], dtype=float)
    if correction is not None:
        predicted = np.asarray(correction(jobs, steps), dtype=float).reshape(-1)
        if predicted.shape != (len(steps),) or not np.all(np.isfinite(predicted) & (predicted > 0)):
            raise LlmPlanError("plan: the correction must return one positive step time per job")
    for record, p in zip(composed, predicted, strict=True):
        record.update(predicted_s=float(p), ratio=record["measured_s"] / float(p), used=True,
                      unused_kind="", reason="")  # fmt: skip
    rows = pd.DataFrame.from_records(records, columns=list(CALIBRATION_COLUMNS))
    rows = rows.sort_values(["file", "row"], kind="stable", ignore_index=True)
    rows["unused_kind"] = rows["unused_kind"].fillna("")
    rows["reason"] = rows["reason"].fillna("")
    factor = scale_factor(predicted, [r["measured_s"] for r in composed])
    stack = (template.attention_kernel, template.elementwise)
    other = sum((j.attention_kernel, j.elementwise) != stack for j in jobs)
    return Calibration(factor, rows, gpu, other, stack)


#: Keys of a plan file's ``plan`` section besides :class:`LlmSpace`'s fields.
PLAN_OPTIONS = ("gpu_counts", "headroom", "memory_gib", "tokens", "price_per_gpu_hour")
_SPACE_FIELDS = ("tp_sizes", "pp_sizes", "vp_sizes", "cp_sizes", "shardings", "recomputes",
                 "micro_batches", "uneven")  # fmt: skip


@dataclass(frozen=True)
class PlanRequest:
    """A plan file read: the job, the GPU counts, the space and the plan's options.

    Attributes:
        job: the job whose model, GPU, sequence, batch, precision and task are planned.
        gpu_counts: GPU counts to plan.
        space: the layouts searched.
        options: :func:`plan_llm` keyword arguments (``headroom``, ``memory_gib``, ``tokens``,
            ``price_per_gpu_hour``) given in the file.
    """

    job: TrainingJob
    gpu_counts: tuple[int, ...]
    space: LlmSpace
    options: dict


def read_plan_file(path) -> PlanRequest:
    """Read a plan file: YAML with ``job`` (a training job's fields) and optional ``plan``.

    ``plan`` may give ``gpu_counts`` (a list, default the job's ``n_gpus``), the fields of
    :class:`LlmSpace` and ``headroom``, ``memory_gib``, ``tokens``, ``price_per_gpu_hour``. A
    file without ``job`` is read as a job alone (:meth:`TrainingJob.from_yaml`'s format). The
    job's own layout must be valid; a search does not keep it (:func:`plan_job` with
    ``as_given`` plans it alone).

    Raises:
        LlmPlanError: unreadable or not YAML, an unknown key, a bad value (naming the file, the
            field and the value), or an invalid job.
    """
    try:
        data = load_yaml(read_text(path))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise LlmPlanError(f"{path}: cannot read the plan file: {exc}") from None
    except Exception as exc:  # yaml.YAMLError: invalid YAML, a key given twice
        raise LlmPlanError(f"{path}: not a YAML plan file: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise LlmPlanError(f"{path}: a plan file is a mapping with 'job' (and 'plan')")
    if "job" not in data:
        data = {"job": data}
    unknown = sorted(set(data) - {"job", "plan"})
    if unknown:
        raise LlmPlanError(f"{path}: unknown top-level key {unknown[0]!r} (expected job, plan)")
    try:
        job = TrainingJob.from_mapping(data["job"], f"{path}: job")
    except ValueError as exc:
        raise LlmPlanError(str(exc)) from None
    plan = data.get("plan") or {}
    if not isinstance(plan, dict):
        raise LlmPlanError(f"{path}: field 'plan' (value {plan!r}): a mapping")
    unknown = sorted(set(plan) - set(PLAN_OPTIONS) - set(_SPACE_FIELDS))
    if unknown:
        raise LlmPlanError(f"{path}: field 'plan.{unknown[0]}' unknown (expected one of "
                           f"{[*PLAN_OPTIONS, *_SPACE_FIELDS]})")  # fmt: skip
    space_values = {}
    for name in _SPACE_FIELDS:
        if name not in plan:
            continue
        value = plan[name]
        if name == "uneven":
            if not isinstance(value, bool):
                raise LlmPlanError(f"{path}: field 'plan.uneven' (value {value!r}): true or false")
        elif not isinstance(value, list):
            raise LlmPlanError(f"{path}: field 'plan.{name}' (value {value!r}): a list")
        space_values[name] = tuple(value) if name != "uneven" else value
    options = {}
    for name in ("headroom", "memory_gib", "tokens", "price_per_gpu_hour"):
        if name in plan:
            value = plan[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise LlmPlanError(f"{path}: field 'plan.{name}' (value {value!r}): a number")
            options[name] = float(value)
    counts = plan.get("gpu_counts", [job.n_gpus])
    try:
        space = LlmSpace(**space_values)
        counts = _positive_ints("gpu_counts", counts if isinstance(counts, list) else [counts])
    except LlmPlanError as exc:
        raise LlmPlanError(f"{path}: {exc}") from None
    return PlanRequest(job, counts, space, options)


def job_correction_graph(job: TrainingJob, step) -> CorrectionGraph:
    """A composed step's input to the learned correction.

    The context is the one the evaluation trains the correction on
    (:func:`scaledl.evaluation.published_runs.compose_rows`): the components' shares, GPUs,
    precision, whether the job spans nodes, tokens per GPU per step.
    """
    context = context_features(step.components_s, step.iteration_s, job.n_gpus, job.precision,
                               job.n_gpus > job.gpus_per_node,
                               job.tokens_per_step / job.n_gpus)  # fmt: skip
    return correction_graph(step.graph, context, step.iteration_s)


def step_correction(model: StepCorrection) -> Correction:
    """A fitted :class:`~scaledl.models.step_correction.StepCorrection` as a plan's correction.

    Returns:
        ``(jobs, steps) -> corrected seconds`` (:func:`plan_llm`'s ``correction``).
    """

    def correct(jobs: Sequence[TrainingJob], steps: Sequence) -> np.ndarray:
        graphs = [job_correction_graph(j, s) for j, s in zip(jobs, steps, strict=True)]
        return model.predict(graphs)

    return correct


def published_correction(paths=None) -> StepCorrection:
    """The learned correction fitted on every published step time (about 30 s on 2 cores).

    Each accepted row with a measured step (:func:`~scaledl.external.published_runs.
    read_published_runs`) is composed with its GPU's fitted kernel and measured network models;
    rows weigh ``1 / rows of their source`` and architectures are counted as the evaluation
    does (:mod:`scaledl.evaluation.published_runs`), which judges this correction on held-out
    sources; here it sees them all, as a plan for a new job would use it.

    Args:
        paths: the published-runs CSV files (default: the copies in ``external/scale_runs``).

    Raises:
        LlmPlanError: no published row could be composed.
    """
    runs = _read_runs(paths).runs
    runs = runs[runs["iteration_s"].notna()]
    graphs, measured, sources, architectures = [], [], [], []
    for r in runs.itertuples(index=False):
        job = r.job
        try:
            network = network_model(job.gpu, job.nvlink_domain_size, job.network_gbps)
            step = compose_step(job, kernel_model(job.gpu), network)
            graphs.append(job_correction_graph(job, step))
        except (ValueError, UnknownDeviceError):
            continue  # the evaluation counts these refusals; the fit uses what composes
        m = job.model
        measured.append(float(r.iteration_s))
        sources.append(r.source)
        architectures.append((m.hidden_size, m.num_layers, m.num_heads, m.num_kv_heads,
                              m.ffn_size, m.vocab_size))  # fmt: skip
    if not graphs:
        raise LlmPlanError("correction: no published run could be composed")
    counts = Counter(sources)
    weights = np.array([1.0 / counts[s] for s in sources])
    return StepCorrection().fit(graphs, np.array(measured), weights, architectures)
