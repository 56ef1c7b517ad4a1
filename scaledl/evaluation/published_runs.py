"""Published LLM training step times, predicted: ScaleDL against its baselines, held out.

The rows are :func:`scaledl.external.published_runs.read_published_runs`'s (519 published step
times of Megatron-LM, Megatron-Bridge, NeMo, torchtitan, PyTorch FSDP/IBM and NeMo AutoModel;
``external/scale_runs/README.md``). Every accepted row is composed
(:func:`~scaledl.parallel.llm_step.compose_step`) twice and predicted by five methods:

* ``fixed_mfu``: ``step = (6 N + 12 L h s) * tokens / (n_gpus * peak * MFU)`` with ``N`` the
  exact parameter count (embeddings and an untied output layer included), ``L`` layers, ``h``
  hidden size, ``s`` sequence length, ``tokens = global_batch * s``, ``peak`` the GPU's dense
  **bf16** tensor peak from the device table (fp16 where the device has no bf16: V100), for every
  precision (fp8/fp4 rows too: the rule knows no precision), and one MFU fitted on the training
  rows only: the value minimising their weighted MRE (a weighted median, :func:`fit_mfu`);
* ``fixed_mfu_precision``: the same rule with ``peak`` the dense peak of the precision the
  job's GEMMs run in (``PEAK_PRECISION``: fp8 for the fp8 formats, fp4 for nvfp4), its own MFU
  fitted the same way. The ratio target is judged against the stronger of the two rules (the
  lower leave-one-source-out mean MRE; ``ratio_baseline`` names it), so the choice of peak
  cannot flatter ScaleDL;
* ``roofline``: the composition with peak-only kernels and datasheet network bandwidths
  (``roofline_kernel_model``, ``peak_network_model``); nothing fitted to step times;
* ``composed``: the composition with the kernel model fitted on real kernel data and the
  measured-where-possible network (``kernel_model``, ``network_model``); nothing fitted to step
  times;
* ``scaledl``: ``composed`` times the learned correction
  (:class:`~scaledl.models.step_correction.StepCorrection`) fitted on the training rows only;
* ``scaledl_no_edges``: the same correction without the graph's edges (the ablation).

**Protocols** (every method on the same held-out rows; a method is fitted on the rows with a
measured step outside the held-out set): ``leave_one_source_out`` (one fold per CSV file, the
headline), ``leave_one_generation_out`` (volta, ampere, hopper, blackwell) and
``largest_held_out`` (two folds: the rows whose model has at least the 80th percentile of the
scored rows' parameter counts, and those with at least the 80th percentile of their GPU counts).
``few_shot_source`` gives every method ``k`` rows of the held-out source on top of the
leave-one-source-out fold (:mod:`scaledl.evaluation.published_runs_few_shot`).

**Scores.** A row is answered when both compositions return a step; rows with no measured step
are predicted and counted as answered but not scored. MRE per held-out group and its unweighted
mean over groups; paired comparisons of ``scaledl`` with every other method on the same rows
(:func:`~scaledl.stats.significance.paired_comparison`, BCa, each row weighted by ``1 / rows
of its group`` so the compared MREs are the means over groups; a row in both largest folds counts
in each); Kendall's tau-b of the held-out
predictions of seconds per token against the measured ones within every group of at least
:data:`MIN_RANKING_LAYOUTS` distinct configurations of one (source, model, GPU count), and
with GPU, precision and sequence length also fixed (:func:`layout_ranking`; a predictor that
ties every configuration of a group scores 0 there); the noise floor (:func:`noise_floor`):
rows whose configuration was published again (same ``config_key``). Every figure is reported
met or not, none tuned on a held-out source: the correction's hyper-parameters are fixed in
:mod:`scaledl.models.step_correction`.

**Inputs checked before any fit** (:func:`check_sources`). A row of one source with the same
:class:`~scaledl.workloads.training_job.TrainingJob` and the same measured step as a row of
another source (e.g. a source's rows copied into a new file; the jobs compared without the
attention kernel and elementwise fields the importer infers from the file name) would be
scored, held out, against
a model fitted on its own copy: such duplicates are refused, naming both files and rows, not
dropped, because which copy is the source of record cannot be told from the rows and dropping
one silently would change the folds; re-publications within one source (the noise floor) are
kept. Leave-one-source-out needs at least two sources with scored rows; fewer is refused naming
the sources and their scored rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from scipy.stats import kendalltau

from scaledl.devices.specs import UnknownDeviceError, device_spec
from scaledl.evaluation.published_runs_few_shot import FewShotResult, few_shot_source
from scaledl.evaluation.targets import TargetResult, target
from scaledl.external.published_runs import default_paths, read_published_runs
from scaledl.io.atomic import write_atomic
from scaledl.io.safe import read_json
from scaledl.models.llm_kernels import kernel_model, roofline_kernel_model
from scaledl.models.step_correction import (
    DEFAULT_CONFIG,
    CorrectionConfig,
    CorrectionGraph,
    StepCorrection,
    context_features,
    correction_graph,
)
from scaledl.parallel.llm_collectives import network_model, peak_network_model
from scaledl.parallel.llm_step import compose_step
from scaledl.stats.metrics import relative_errors
from scaledl.stats.significance import Comparison, paired_comparison
from scaledl.workloads.training_job import PEAK_PRECISION

METHODS = (
    "fixed_mfu",
    "fixed_mfu_precision",
    "roofline",
    "composed",
    "scaledl",
    "scaledl_no_edges",
)
PROTOCOLS = ("leave_one_source_out", "leave_one_generation_out", "largest_held_out")
#: Quantile above which a row is "largest" (parameters, GPU count) in ``largest_held_out``.
LARGEST_QUANTILE = 0.8
#: Fewest distinct layouts of a ranking group.
MIN_RANKING_LAYOUTS = 3
RESULT_FILE = Path("docs/results/published_runs.json")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class GroupErrors(_Model):
    """One held-out group (a source, a generation, a largest fold).

    Attributes:
        answered: answered rows held out.
        scored: of those, rows with a measured step.
        mre: method -> MRE on the scored rows (``None`` when none).
        p90_re: method -> 90th percentile of the relative error.
        median_log_ratio: method -> median ``log(predicted / measured)`` (negative: predicts
            too fast).
        mfu: fixed-MFU method -> its MFU fitted on this fold's training rows.
        correction: the correction's kind (``gnn`` / ``constant``) and its training rows.
    """

    answered: int
    scored: int
    mre: dict[str, float | None]
    p90_re: dict[str, float | None]
    median_log_ratio: dict[str, float | None]
    mfu: dict[str, float]
    correction: str


class ProtocolResult(_Model):
    """One protocol: per group, the mean over groups, paired comparisons.

    Attributes:
        groups: group -> its errors.
        mean_mre: method -> unweighted mean over the groups with scored rows.
        max_mre: method -> the largest group MRE.
        comparisons: ``scaledl`` against every other method (and ``scaledl_no_edges`` against
            ``composed``), paired on the same rows, rows weighted ``1 / rows of their group``.
    """

    groups: dict[str, GroupErrors]
    mean_mre: dict[str, float]
    max_mre: dict[str, float]
    comparisons: list[Comparison]


class RankingGroup(_Model):
    """Kendall's tau-b of one group (``None``: undefined, every prediction tied).

    Attributes:
        group: its keys.
        layouts: distinct configurations in it.
        tau: method -> tau.
    """

    group: str
    layouts: int
    tau: dict[str, float | None]


class Ranking(_Model):
    """Layout ranking on the leave-one-source-out predictions.

    Attributes:
        groups: each (source, model, GPU count) group's tau per method.
        mean_tau: method -> mean over groups (an undefined tau counts 0).
        groups_same_hardware: groups that also share GPU, precision and sequence length.
        mean_tau_same_hardware: method -> mean over those.
    """

    groups: list[RankingGroup]
    mean_tau: dict[str, float | None]
    groups_same_hardware: int
    mean_tau_same_hardware: dict[str, float | None]


class NoiseSource(_Model):
    """Re-publications of one source: configurations published at least twice.

    Attributes:
        configs: configurations with two or more measured steps.
        rows: their rows.
        spread_min: smallest ``max / min - 1`` of a configuration's steps.
        spread_median: median spread.
        spread_max: largest spread.
        loo_mre: MRE of predicting each step by the mean of the same configuration's others.
    """

    configs: int
    rows: int
    spread_min: float
    spread_median: float
    spread_max: float
    loo_mre: float


class Coverage(_Model):
    """Answered and refused rows.

    Attributes:
        csv_rows: rows of the CSV files.
        with_architecture: rows with an architecture (the importer's count: all rows but the MoE
            ones and those with no architecture).
        answered: rows both compositions predicted (all have an architecture).
        answered_share: ``answered / with_architecture``.
        scored: answered rows with a measured step.
        refused: reason -> rows (the importer's quarantine reasons, ``composition``).
        refused_rows: ``source:row: reason`` per refused row.
    """

    csv_rows: int
    with_architecture: int
    answered: int
    answered_share: float
    scored: int
    refused: dict[str, int]
    refused_rows: list[str]


class RowPrediction(_Model):
    """One answered row with its leave-one-source-out predictions (seconds)."""

    source: str
    row: int
    model: str
    gpu: str
    n_gpus: int
    precision: str
    layout: str
    measured_s: float | None
    predicted_s: dict[str, float]


class PublishedRunsResult(_Model):
    """``docs/results/published_runs.json``: the evaluation's envelope and its sections.

    The file is an :class:`~scaledl.evaluation.envelope.EvaluationResult` (``evaluation``,
    ``schema_version``, ``targets``, ``seconds``; read by
    :func:`~scaledl.evaluation.envelope.read_result`) whose sections this model types. A file
    written before the envelope (no ``evaluation`` or ``schema_version``, its seconds in
    ``runtime_s``) reads as this shape.

    Attributes:
        evaluation: ``published_runs``.
        schema_version: the envelope's version
            (:data:`~scaledl.evaluation.envelope.RESULT_SCHEMA_VERSION`).
        command: the command that wrote it.
        inputs: the CSV files read (repository-relative where possible).
        decisions: the fixed choices (peak, MFU fit, correction hyper-parameters, ...).
        coverage: answered and refused rows.
        protocols: protocol -> its result.
        ratio_to_fixed_mfu: ``scaledl`` mean MRE over the stronger fixed-MFU rule's (leave one
            source out).
        ratio_baseline: that rule (``fixed_mfu`` or ``fixed_mfu_precision``).
        ranking: Kendall's tau of layouts.
        few_shot: the ``few_shot_source`` protocol (a few rows of the held-out source known).
        noise_floor: source -> re-publications' spread (sources with any).
        targets: the issue's targets, met or not.
        rows: every answered row.
        seconds: stage -> wall seconds, and ``total``.
    """

    evaluation: Literal["published_runs"] = "published_runs"
    schema_version: Literal[1] = 1
    command: str
    inputs: list[str]
    decisions: dict[str, str]
    coverage: Coverage
    protocols: dict[str, ProtocolResult]
    ratio_to_fixed_mfu: float
    ratio_baseline: str
    ranking: Ranking
    few_shot: FewShotResult
    noise_floor: dict[str, NoiseSource]
    targets: list[TargetResult]
    rows: list[RowPrediction]
    seconds: dict[str, float]

    @model_validator(mode="before")
    @classmethod
    def _before_the_envelope(cls, data: Any) -> Any:
        """A file of the shape before the envelope: ``runtime_s`` is its ``seconds``."""
        if isinstance(data, dict) and "evaluation" not in data and "runtime_s" in data:
            old = {k: v for k, v in data.items() if k != "runtime_s"}
            return {"evaluation": "published_runs", "schema_version": 1,
                    **old, "seconds": data["runtime_s"]}  # fmt: skip
        return data

    @classmethod
    def from_dict(cls, data: Any, source: str = "<published runs>") -> PublishedRunsResult:
        """Validate a results file's parsed JSON (either shape, see the class docstring).

        Raises:
            ValueError: not matching the schema (naming ``source``, the field and the value).
        """
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            lines = [
                f"{source}: field {'.'.join(str(p) for p in e['loc']) or '<top level>'!r}: "
                f"{e['msg']} (value {e.get('input')!r:.80})"
                for e in exc.errors()[:8]
            ]
            raise ValueError("\n".join(lines)) from None

    @classmethod
    def read(cls, path: Path | str) -> PublishedRunsResult:
        """Read (:func:`scaledl.io.safe.read_json`) and validate a results file.

        Raises:
            FileNotFoundError: no such file.
            ValueError: unsafe, not JSON or not matching the schema (naming the file).
        """
        return cls.from_dict(read_json(path), str(path))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the file."""
        return self.model_dump(mode="json")

    def write(self, path: Path) -> Path:
        """Write as indented JSON (atomically)."""
        return write_atomic(Path(path), self.model_dump_json(indent=2) + "\n")


# ----------------------------------------------------------------------------- fixed MFU


def ideal_flops_per_step(job) -> float:
    """``(6 N + 12 L h s) * global_batch * s``: the fixed-MFU rule's FLOPs of one step."""
    m, s = job.model, job.seq_len
    return (6.0 * m.n_params() + 12.0 * m.num_layers * m.hidden_size * s) * job.global_batch * s


@cache
def precision_peak_flops(gpu: str, precision: str) -> float:
    """The GPU's dense peak of the precision a job's GEMMs run in, FLOP/s (``PEAK_PRECISION``)."""
    return device_spec(gpu).peak_flops_per_s(PEAK_PRECISION[precision])


@cache
def dense_peak_flops(gpu: str) -> float:
    """The GPU's dense bf16 tensor peak, FLOP/s (fp16 where it has no bf16, e.g. V100)."""
    spec = device_spec(gpu)
    try:
        return spec.peak_flops_per_s("bf16")
    except ValueError:
        return spec.peak_flops_per_s("fp16")


def fit_mfu(implied_mfu: np.ndarray, weights: np.ndarray) -> float:
    """The MFU minimising the weighted MRE of ``ideal / MFU`` on training rows.

    With ``u_i`` a row's implied MFU (ideal time over measured), the relative error of ``MFU``
    is ``|u_i / MFU - 1|``; the weighted sum ``sum w_i u_i |1/MFU - 1/u_i|`` is least at the
    weighted median of ``1 / u_i`` with weights ``w_i u_i``.

    Args:
        implied_mfu: shape (n,), positive.
        weights: shape (n,), positive.

    Returns:
        The MFU.

    Raises:
        ValueError: no row, or a non-positive value.
    """
    u, w = np.asarray(implied_mfu, dtype=float), np.asarray(weights, dtype=float)
    if u.size == 0 or not np.all(u > 0) or not np.all(w > 0):
        raise ValueError("fixed MFU: needs at least one training row with positive MFU and weight")
    inverse, mass = 1.0 / u, w * u
    order = np.argsort(inverse)
    cumulative = np.cumsum(mass[order])
    k = int(np.searchsorted(cumulative, 0.5 * cumulative[-1]))
    return float(1.0 / inverse[order][k])


# ----------------------------------------------------------------------------- data


def _layout(job) -> str:
    parts = [f"tp{job.tp_size}", f"pp{job.pp_size}", f"cp{job.cp_size}", f"vp{job.vp_size}",
             f"dp{job.dp_size}", job.sharding]  # fmt: skip
    if job.sharding in ("hsdp", "fsdp") and job.shard_group_size:
        parts[-1] += f"{job.shard_group_size}"
    parts += [f"ac-{job.activation_checkpointing}", f"mb{job.micro_batch}", f"gb{job.global_batch}"]
    return "/".join(parts)


def _architecture(job) -> tuple:
    m = job.model
    return (m.hidden_size, m.num_layers, m.num_heads, m.num_kv_heads, m.ffn_size, m.vocab_size)


@cache
def _networks(gpu: str, domain: int | None, network_gbps: float | None):
    return (network_model(gpu, domain, network_gbps),
            peak_network_model(gpu, domain, network_gbps))  # fmt: skip


def compose_rows(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[CorrectionGraph], list[str]]:
    """Compose every accepted row twice (fitted and roofline inputs).

    Args:
        runs: the importer's ``runs`` frame.

    Returns:
        ``(answered, graphs, refused)``: one row per answered run with ``source``, ``row``,
        ``model``, ``gpu``, ``n_gpus``, ``precision``, ``layout``, ``architecture``,
        ``generation``, ``measured_s`` (NaN: none), ``is_latest``, ``config_key``, ``n_params``,
        ``ideal_s`` (ideal FLOPs over ``n_gpus * peak``), ``ideal_precision_s`` (over the
        precision's peak), ``tokens``, ``roofline``,
        ``composed``; the correction graphs of those rows; and ``source:row: reason`` of every
        row whose composition raised a ``ValueError``.
    """
    records, graphs, refused = [], [], []
    for r in runs.itertuples(index=False):
        job = r.job
        try:
            kernels = kernel_model(job.gpu)
            network, peak_network = _networks(job.gpu, job.nvlink_domain_size, job.network_gbps)
            step = compose_step(job, kernels, network)
            roof = compose_step(job, roofline_kernel_model(job.gpu), peak_network)
            tokens = job.global_batch * job.seq_len
            context = context_features(
                step.components_s, step.iteration_s, job.n_gpus, job.precision,
                job.n_gpus > job.gpus_per_node, tokens / job.n_gpus,
            )  # fmt: skip
            graph = correction_graph(step.graph, context, step.iteration_s)
        except (ValueError, UnknownDeviceError) as exc:
            refused.append(f"{r.source}:{r.row}: composition: {exc}")
            continue
        if not (step.iteration_s > 0 and roof.iteration_s > 0):
            refused.append(f"{r.source}:{r.row}: composition: non-positive step")
            continue
        measured = float(r.iteration_s) if pd.notna(r.iteration_s) else math.nan
        graphs.append(graph)
        records.append({
            "source": r.source, "row": int(r.row), "model": str(r.model_name),
            "gpu": job.gpu, "n_gpus": job.n_gpus, "precision": job.precision,
            "layout": _layout(job), "architecture": _architecture(job),
            "generation": r.gpu_generation, "measured_s": measured,
            "is_latest": bool(r.is_latest), "config_key": str(r.config_key),
            "n_params": job.model.n_params(), "seq_len": job.seq_len,
            "precision_raw": str(r.precision_raw), "tokens": float(tokens),
            "ideal_s": ideal_flops_per_step(job) / (job.n_gpus * dense_peak_flops(job.gpu)),
            "ideal_precision_s": ideal_flops_per_step(job)
            / (job.n_gpus * precision_peak_flops(job.gpu, job.precision)),
            "roofline": roof.iteration_s, "composed": step.iteration_s,
        })  # fmt: skip
    return pd.DataFrame(records), graphs, refused


# ----------------------------------------------------------------------------- folds


def protocol_folds(rows: pd.DataFrame, protocol: str) -> list[tuple[str, np.ndarray]]:
    """The held-out groups of a protocol: ``(name, held-out mask over rows)``.

    Raises:
        ValueError: an unknown protocol.
    """
    if protocol == "leave_one_source_out":
        return [(s, (rows["source"] == s).to_numpy()) for s in sorted(rows["source"].unique())]
    if protocol == "leave_one_generation_out":
        return [(g, (rows["generation"] == g).to_numpy())
                for g in sorted(rows["generation"].unique())]  # fmt: skip
    if protocol == "largest_held_out":
        scored = rows[rows["measured_s"].notna()]
        folds = []
        for name, column in (("largest_models", "n_params"), ("largest_gpu_counts", "n_gpus")):
            cut = float(np.quantile(scored[column], LARGEST_QUANTILE))
            folds.append((f"{name} (>= {cut:.4g})", (rows[column] >= cut).to_numpy()))
        return folds
    raise ValueError(f"unknown protocol {protocol!r}; known: {list(PROTOCOLS)}")


#: The stack fields a duplicate's job is compared without: the importer fills them from the
#: source's name where the file has no such column, so a copy under a new name differs there.
_NO_STACK = {"attention_kernel": "cudnn", "elementwise": "fused"}


def cross_source_duplicates(runs: pd.DataFrame) -> list[tuple[str, int, str, int, float]]:
    """Rows duplicating a row of another source: same training job, same measured step.

    The jobs are compared without ``attention_kernel`` and ``elementwise`` (:data:`_NO_STACK`):
    the same configuration measured at the same seconds is the same measurement whichever
    stack the importer infers from the file's name.

    Args:
        runs: the importer's ``runs`` (``source``, ``row``, ``job``, ``iteration_s``).

    Returns:
        ``(source, row, first source, first row, iteration_s)`` per duplicate, the first row
        being the earliest (in ``runs`` order) of another source with that job and step; rows
        without a measured step are never duplicates.
    """
    first: dict[tuple, tuple[str, int]] = {}
    out = []
    for r in runs.itertuples(index=False):
        if pd.isna(r.iteration_s):
            continue
        key = (r.job.model_copy(update=_NO_STACK), float(r.iteration_s))
        seen = first.setdefault(key, (str(r.source), int(r.row)))
        if seen[0] != r.source:
            out.append((str(r.source), int(r.row), *seen, float(r.iteration_s)))
    return out


def check_sources(runs: pd.DataFrame, files: dict[str, str] | None = None) -> None:
    """Refuse inputs leave-one-source-out cannot score honestly (module docstring).

    Args:
        runs: the importer's ``runs``.
        files: source -> its file as shown in messages (default: the source name).

    Raises:
        ValueError: a row duplicating a row of another source (naming both files and rows,
            the first three of them), or fewer than two sources with a measured step (naming
            the sources and their scored rows).
    """
    files = files or {}
    duplicates = cross_source_duplicates(runs)
    if duplicates:
        shown = "; ".join(f"row {row} of {files.get(src, src)} duplicates row {first_row} of "
                          f"{files.get(first, first)} (iteration_s {step:g})"
                          for src, row, first, first_row, step in duplicates[:3])  # fmt: skip
        more = f" (and {len(duplicates) - 3} more)" if len(duplicates) > 3 else ""
        raise ValueError(
            f"published runs: {len(duplicates)} rows duplicate a row of another source (the "
            f"same training job and measured iteration_s), which leave-one-source-out would "
            f"score against a model fitted on their copy: {shown}{more}; remove one of each pair"
        )
    scored = runs.loc[runs["iteration_s"].notna(), "source"].value_counts()
    if len(scored) < 2:
        sources = sorted(runs["source"].unique())
        listed = ", ".join(f"{files.get(s, s)} ({int(scored.get(s, 0))} scored)" for s in sources)
        raise ValueError(
            "published runs: leave-one-source-out needs at least two sources with scored rows "
            f"(a measured iteration_s); got {len(scored)} of {len(sources)}: {listed or 'none'}"
        )


def _source_weights(sources: pd.Series) -> np.ndarray:
    """``1 / rows of the row's source``: every source weighs the same in a fit."""
    counts = sources.map(sources.value_counts())
    return (1.0 / counts).to_numpy(dtype=float)


#: Fixed-MFU rule -> the column of its ideal step (MFU 1) in :func:`compose_rows`' frame.
FIXED_MFU_COLUMNS = {"fixed_mfu": "ideal_s", "fixed_mfu_precision": "ideal_precision_s"}


def pooled_fixed_mfu(rows: pd.DataFrame) -> Callable[[str, np.ndarray], dict[str, np.ndarray]]:
    """The fixed-MFU rules fitted on the other sources' scored rows plus known rows of one.

    Args:
        rows: the answered rows (:func:`compose_rows`).

    Returns:
        ``pooled(source, known)``: ``fixed_mfu_pooled`` and ``fixed_mfu_precision_pooled`` ->
        seconds of every row, each MFU fitted by :func:`fit_mfu` on the scored rows outside
        ``source`` plus the positions ``known`` (of ``source``), every source weighted equally
        (the known rows as one source).
    """
    scored = rows["measured_s"].notna().to_numpy()
    source = rows["source"].to_numpy()

    def pooled(held_out: str, known: np.ndarray) -> dict[str, np.ndarray]:
        train = scored & (source != held_out)
        train[known] = True
        fit_rows = rows[train]
        weights = _source_weights(fit_rows["source"])
        out = {}
        for method, column in FIXED_MFU_COLUMNS.items():
            implied = fit_rows[column].to_numpy() / fit_rows["measured_s"].to_numpy()
            out[f"{method}_pooled"] = rows[column].to_numpy() / fit_mfu(implied, weights)
        return out

    return pooled


def predict_fold(
    rows: pd.DataFrame,
    graphs: Sequence[CorrectionGraph],
    held_out: np.ndarray,
    config: CorrectionConfig,
    corrections: Sequence[str] = ("scaledl", "scaledl_no_edges"),
) -> tuple[dict[str, np.ndarray], dict[str, float], str]:
    """Fit the fitted methods on the scored rows outside ``held_out``; predict the held-out.

    Args:
        rows: the answered rows (:func:`compose_rows`).
        graphs: their correction graphs.
        held_out: bool mask over ``rows``.
        config: the correction's hyper-parameters.
        corrections: which of ``scaledl`` / ``scaledl_no_edges`` to fit (tests fit fewer).

    Returns:
        ``(predictions, mfu, correction)``: method -> seconds of the held-out rows (in order),
        fixed-MFU method -> its fitted MFU, and the correction's kind with its training rows.

    Raises:
        ValueError: no scored training row.
    """
    train = ~held_out & rows["measured_s"].notna().to_numpy()
    if not train.any():
        raise ValueError("published runs: a fold without a scored training row")
    fit_rows = rows[train]
    weights = _source_weights(fit_rows["source"])
    test = np.flatnonzero(held_out)
    mfu, out = {}, {}
    for method, column in FIXED_MFU_COLUMNS.items():
        implied = fit_rows[column].to_numpy() / fit_rows["measured_s"].to_numpy()
        mfu[method] = fit_mfu(implied, weights)
        out[method] = rows[column].to_numpy()[test] / mfu[method]
    out |= {
        "roofline": rows["roofline"].to_numpy()[test],
        "composed": rows["composed"].to_numpy()[test],
    }
    train_graphs = [graphs[i] for i in np.flatnonzero(train)]
    test_graphs = [graphs[i] for i in test]
    kind = ""
    for method, edges in (("scaledl", True), ("scaledl_no_edges", False)):
        if method not in corrections:
            continue
        correction = StepCorrection(edges=edges, config=config).fit(
            train_graphs, fit_rows["measured_s"].to_numpy(), weights,
            list(fit_rows["architecture"]),
        )  # fmt: skip
        out[method] = correction.predict(test_graphs)
        kind = f"{correction.kind} on {correction.n_training_rows} rows"
    return out, mfu, kind


# ----------------------------------------------------------------------------- scores


def _errors(pred: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return relative_errors(pred, measured) if len(measured) else np.zeros(0)


def protocol_result(
    rows: pd.DataFrame, folds: list[tuple[str, np.ndarray, dict, dict, str]]
) -> ProtocolResult:
    """Errors per group, their means and the paired comparisons of one protocol.

    Args:
        rows: the answered rows.
        folds: ``(name, held-out mask, predictions, fitted MFUs, correction)`` per group.
    """
    groups: dict[str, GroupErrors] = {}
    units: dict[str, list[np.ndarray]] = {m: [] for m in METHODS}
    weights: list[np.ndarray] = []
    for name, held_out, pred, mfu, kind in folds:
        measured = rows["measured_s"].to_numpy()[held_out]
        scored = np.isfinite(measured)
        mre, p90, bias = {}, {}, {}
        for method in METHODS:
            re = _errors(pred[method][scored], measured[scored])
            mre[method] = float(re.mean()) if re.size else None
            p90[method] = float(np.percentile(re, 90)) if re.size else None
            log_ratio = np.log(pred[method][scored] / measured[scored])
            bias[method] = float(np.median(log_ratio)) if re.size else None
            units[method].append(re)
        weights.append(np.full(int(scored.sum()), 1.0 / max(int(scored.sum()), 1)))
        groups[name] = GroupErrors(answered=int(held_out.sum()), scored=int(scored.sum()),
                                   mre=mre, p90_re=p90, median_log_ratio=bias, mfu=mfu,
                                   correction=kind)  # fmt: skip
    scored_groups = [g for g in groups.values() if g.scored]
    mean = {m: float(np.mean([g.mre[m] for g in scored_groups])) for m in METHODS}
    worst = {m: float(np.max([g.mre[m] for g in scored_groups])) for m in METHODS}
    errors = {m: np.concatenate(units[m]) for m in METHODS}
    w = np.concatenate(weights)
    pairs = [("scaledl", other) for other in METHODS if other != "scaledl"]
    pairs.append(("scaledl_no_edges", "composed"))
    comparisons = [
        paired_comparison(errors[a], errors[b], a, b, weights=w, n_resamples=9999) for a, b in pairs
    ]
    return ProtocolResult(groups=groups, mean_mre=mean, max_mre=worst, comparisons=comparisons)


#: Keys of a ranking group (issue 51's); the stricter view adds the hardware and the sequence.
RANKING_KEYS = ("source", "model", "n_gpus")
RANKING_KEYS_SAME_HARDWARE = (*RANKING_KEYS, "gpu", "precision_raw", "seq_len")


def _ranking_groups(frame: pd.DataFrame, keys: Sequence[str]) -> list[RankingGroup]:
    """Kendall's tau-b per group of ``keys`` with >= :data:`MIN_RANKING_LAYOUTS` configurations."""
    cols = ["measured_s", *(f"pred_{m}" for m in METHODS)]
    groups = []
    for key, group in frame.groupby(list(keys), sort=True):
        per_token = group[cols].div(group["tokens"], axis=0)
        per_config = per_token.groupby(group["config_key"]).mean()
        if len(per_config) < MIN_RANKING_LAYOUTS:
            continue
        tau = {}
        for m in METHODS:
            value = kendalltau(per_config["measured_s"], per_config[f"pred_{m}"]).statistic
            tau[m] = None if not np.isfinite(value) else float(value)
        name = " ".join(f"{k}={v}" for k, v in zip(keys, key, strict=True))
        groups.append(RankingGroup(group=name, layouts=len(per_config), tau=tau))
    return groups


def _mean_tau(groups: list[RankingGroup]) -> dict[str, float | None]:
    if not groups:
        return {m: None for m in METHODS}
    return {m: float(np.mean([g.tau[m] or 0.0 for g in groups])) for m in METHODS}


def layout_ranking(rows: pd.DataFrame, predictions: dict[str, np.ndarray]) -> Ranking:
    """Kendall's tau-b of seconds per token within groups of configurations (module docstring).

    A group is one (source, model, GPU count) (:data:`RANKING_KEYS`) with at least
    :data:`MIN_RANKING_LAYOUTS` distinct configurations (``config_key``; a re-published one
    counts once, its steps averaged); seconds per token make configurations with different
    global batches comparable. The stricter view also holds the GPU, precision and sequence
    length fixed (:data:`RANKING_KEYS_SAME_HARDWARE`).

    Args:
        rows: the answered rows (``config_key``, ``tokens``, the keys, ``measured_s``).
        predictions: method -> held-out (leave-one-source-out) seconds per row.
    """
    frame = rows.assign(**{f"pred_{m}": predictions[m] for m in METHODS})
    frame = frame[frame["measured_s"].notna()]
    groups = _ranking_groups(frame, RANKING_KEYS)
    strict = _ranking_groups(frame, RANKING_KEYS_SAME_HARDWARE)
    return Ranking(groups=groups, mean_tau=_mean_tau(groups),
                   groups_same_hardware=len(strict),
                   mean_tau_same_hardware=_mean_tau(strict))  # fmt: skip


def noise_floor(runs: pd.DataFrame) -> dict[str, NoiseSource]:
    """Re-publications of one configuration, per source (sources with any).

    Args:
        runs: the importer's ``runs`` (``source``, ``config_key``, ``iteration_s``).

    Returns:
        source -> :class:`NoiseSource`.
    """
    measured = runs[runs["iteration_s"].notna()]
    out = {}
    for source, frame in measured.groupby("source", sort=True):
        spreads, loo = [], []
        n_rows = 0
        for _, group in frame.groupby("config_key"):
            t = group["iteration_s"].to_numpy(dtype=float)
            if len(t) < 2:
                continue
            n_rows += len(t)
            spreads.append(t.max() / t.min() - 1.0)
            others = (t.sum() - t) / (len(t) - 1)
            loo.extend(np.abs(others - t) / t)
        if spreads:
            out[str(source)] = NoiseSource(
                configs=len(spreads), rows=n_rows, spread_min=float(np.min(spreads)),
                spread_median=float(np.median(spreads)), spread_max=float(np.max(spreads)),
                loo_mre=float(np.mean(loo)),
            )  # fmt: skip
    return out


def few_shot_line(few_shot: FewShotResult, seconds: float) -> str:
    """The progress line of the few-shot protocol: its time and the sources skipped per ``k``.

    A source with at most ``k`` scored rows has none left to score at that ``k``
    (``FewShotK.skipped``).
    """
    skipped = [f"k={r.k}: {', '.join(r.skipped)}" for r in few_shot.results if r.skipped]
    why = (f"; skipped (at most k scored rows, nothing left to score): {'; '.join(skipped)}"
           if skipped else "")  # fmt: skip
    return f"few_shot_source: {seconds:.1f} s{why}"


def stronger_fixed_mfu(loso: ProtocolResult) -> str:
    """The fixed-MFU rule with the lower leave-one-source-out mean MRE (the ratio's baseline)."""
    return min(("fixed_mfu", "fixed_mfu_precision"), key=lambda m: loso.mean_mre[m])


def targets(
    coverage: Coverage, loso: ProtocolResult, ratio: float, ranking: Ranking
) -> list[TargetResult]:
    """Issue 51's targets on the leave-one-source-out result, met or not.

    The ``published_runs`` rows of :data:`scaledl.evaluation.targets.TARGETS`; the ratio's
    entry joins two (the ratio, ``value``, and its paired interval, ``extra``
    ``difference``/``difference_ci_low``/``difference_ci_high``).
    """
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    root = {"coverage": coverage, "protocols": {"leave_one_source_out": loso},
            "ratio_to_fixed_mfu": ratio, "ranking": ranking}  # fmt: skip
    baseline = stronger_fixed_mfu(loso)
    answered, mean, most, share, paired, tau_target = (
        target(f"published_{name}")
        for name in ("answered", "mean_mre", "max_mre", "ratio", "ratio_interval", "tau")
    )
    vs, below = paired.judge(root, baseline=baseline)
    _, ratio_met = share.judge(root)
    tau, tau_met = tau_target.judge(root)
    worst = max(loso.groups, key=lambda g: loso.groups[g].mre["scaledl"] or 0.0)
    mean_mre, max_mre = loso.mean_mre["scaledl"], loso.max_mre["scaledl"]
    return [
        answered.result(f"{pct(coverage.answered_share)} ({coverage.answered} of "
                        f"{coverage.with_architecture})", answered.judge(root)[1],
                        value=coverage.answered_share,
                        extra={"answered": coverage.answered,
                               "with_architecture": coverage.with_architecture}),
        mean.result(pct(mean_mre), mean.judge(root)[1], value=mean_mre),
        most.result(f"{pct(max_mre)} ({worst})", most.judge(root)[1], value=max_mre),
        share.result(f"{ratio:.2f}x; difference {100 * vs.mre_difference:+.1f} points "
                     f"[{100 * vs.ci_low:+.1f}, {100 * vs.ci_high:+.1f}]",
                     ratio_met and below, value=ratio,
                     extra={"difference": vs.mre_difference, "difference_ci_low": vs.ci_low,
                            "difference_ci_high": vs.ci_high},
                     text=f"{share.wording(baseline=baseline)}, {paired.wording()}"),
        tau_target.result("no group" if tau is None else
                          f"{tau:.2f} (mean of {len(ranking.groups)} groups)",
                          tau_met, value=tau, extra={"groups": len(ranking.groups)}),
    ]  # fmt: skip


# ----------------------------------------------------------------------------- the whole


def _shown(path: Path) -> str:
    root = Path(__file__).resolve().parents[2]
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)


def decisions(config: CorrectionConfig) -> dict[str, str]:
    """The fixed choices, written into the result."""
    t = config.train
    return {
        "peak": "fixed_mfu divides by the GPU's dense bf16 tensor peak (device table; fp16 where "
        "the device has no bf16: V100), for every precision; fixed_mfu_precision by the dense "
        "peak of the precision the GEMMs run in (fp8 formats: fp8, nvfp4: fp4), its own MFU; "
        "the ratio target is judged against the stronger of the two",
        "fixed_mfu": "step = (6N + 12 L h s) * global_batch * s / (n_gpus * peak * MFU), N exact "
        "with embeddings; one MFU per fold minimising the training rows' MRE, each source "
        "weighted equally",
        "correction": f"GNN (RuntimeGNN, use_prior) on log(measured/composed): hidden "
        f"{t.hidden_channels}, {t.num_layers} TransformerConv layers, {t.heads} heads, Adam lr "
        f"{t.lr}, weight decay {t.weight_decay}, <= {t.max_epochs} epochs, patience {t.patience}; "
        f"seeds {list(config.seeds)} (geometric mean); early stopping on a random "
        f"{config.validation_share:.0%} of the training rows per seed; loss weights equal per "
        "source; fixed before the first leave-one-source-out run",
        "largest_held_out": f"rows at or above the {LARGEST_QUANTILE:.0%} quantile of the scored "
        "rows' parameter counts, and of their GPU counts (two folds)",
        "ranking": f"Kendall tau-b of seconds per token within (source, model, n_gpus) groups of "
        f">= {MIN_RANKING_LAYOUTS} distinct configurations (config_key; re-publications "
        "averaged), held-out (leave-one-source-out) predictions; undefined tau counts 0; also "
        "with GPU, precision and seq_len fixed",
        "scored": "rows with a measured (reported or derived) iteration_s; rows without one are "
        "predicted and counted as answered",
    }


def evaluate_published_runs(
    paths: Sequence[Path] | None = None,
    config: CorrectionConfig = DEFAULT_CONFIG,
    progress: Callable[[str], None] | None = None,
    runs: Any = None,
    protocols: Sequence[str] = PROTOCOLS,
) -> PublishedRunsResult:
    """Predict every published row under every protocol and score it.

    Args:
        paths: the CSV files (default ``default_paths()``: ``<external>/scale_runs``).
        config: the correction's hyper-parameters.
        progress: called with a line per stage (e.g. to stderr).
        runs: an already read ``PublishedRuns`` (default: read ``paths``); a subset for tests.
        protocols: the protocols to run (``leave_one_source_out`` always runs).

    Returns:
        The :class:`PublishedRunsResult`.

    Raises:
        ValueError: unreadable CSVs (from the importer, naming file, row and field), rows
            duplicated across sources or fewer than two sources with scored rows
            (:func:`check_sources`), a fold of a protocol without a scored training row
            (naming the protocol and the fold), or no answered row.
    """
    say = progress or (lambda _line: None)
    paths = [Path(p) for p in (paths or default_paths())]
    clock, runtime = time.perf_counter(), {}
    published = runs if runs is not None else read_published_runs(paths)
    check_sources(published.runs, {p.stem: str(p) for p in paths})
    counts = published.counts()
    csv_rows, with_arch = counts["rows"], counts["rows_with_architecture"]
    runtime["import"] = time.perf_counter() - clock
    rows, graphs, composition_refused = compose_rows(published.runs)
    if rows.empty:
        raise ValueError("published runs: no row could be composed")
    runtime["compose"] = time.perf_counter() - clock - runtime["import"]
    say(f"composed {len(rows)} rows in {runtime['compose']:.1f} s")
    protocols = ["leave_one_source_out", *(p for p in protocols if p != "leave_one_source_out")]
    results, loso_pred = {}, {m: np.full(len(rows), np.nan) for m in METHODS}
    for protocol in protocols:
        start, folds = time.perf_counter(), []
        for name, held_out in protocol_folds(rows, protocol):
            if not (~held_out & rows["measured_s"].notna().to_numpy()).any():
                raise ValueError(
                    f"published runs: {protocol}: holding out {name} leaves no scored training "
                    "row (every answered row with a measured step is in it); this protocol "
                    "needs scored rows in at least two of its groups"
                )
            pred, mfu, kind = predict_fold(rows, graphs, held_out, config)
            folds.append((name, held_out, pred, mfu, kind))
            if protocol == "leave_one_source_out":
                for m in METHODS:
                    loso_pred[m][held_out] = pred[m]
            say(f"{protocol}: {name} ({int(held_out.sum())} rows) done")
        results[protocol] = protocol_result(rows, folds)
        runtime[protocol] = time.perf_counter() - start
    quarantine = published.quarantine
    reasons = [f"{q.source}:{q.row}: {q.reason}" for q in quarantine.itertuples(index=False)]
    refused = {**counts["quarantined_by_reason"]}
    if composition_refused:
        refused["composition"] = len(composition_refused)
    coverage = Coverage(
        csv_rows=csv_rows, with_architecture=with_arch, answered=len(rows),
        answered_share=len(rows) / with_arch if with_arch else 0.0,
        scored=int(rows["measured_s"].notna().sum()),
        refused={str(k): int(v) for k, v in sorted(refused.items())},
        refused_rows=[*reasons, *composition_refused],
    )  # fmt: skip
    loso = results["leave_one_source_out"]
    baseline = stronger_fixed_mfu(loso)
    ratio = loso.mean_mre["scaledl"] / loso.mean_mre[baseline]
    ranking = layout_ranking(rows, loso_pred)
    start = time.perf_counter()
    base = {m: rows[c].to_numpy() for m, c in FIXED_MFU_COLUMNS.items()}
    base |= {m: loso_pred[m] for m in ("roofline", "composed", "scaledl", "scaledl_no_edges")}
    few_shot = few_shot_source(rows, base, pooled_fixed_mfu(rows))
    runtime["few_shot_source"] = time.perf_counter() - start
    say(few_shot_line(few_shot, runtime["few_shot_source"]))
    runtime["total"] = time.perf_counter() - clock
    row_models = [
        RowPrediction(
            source=r.source, row=r.row, model=r.model, gpu=r.gpu, n_gpus=r.n_gpus,
            precision=r.precision, layout=r.layout,
            measured_s=None if math.isnan(r.measured_s) else r.measured_s,
            predicted_s={m: float(loso_pred[m][i]) for m in METHODS},
        )
        for i, r in enumerate(rows.itertuples(index=False))
    ]  # fmt: skip
    return PublishedRunsResult(
        command="scaledl evaluate published-runs",
        inputs=[_shown(p) for p in paths],
        decisions=decisions(config),
        coverage=coverage,
        protocols=results,
        ratio_to_fixed_mfu=ratio,
        ratio_baseline=baseline,
        ranking=ranking,
        few_shot=few_shot,
        noise_floor=noise_floor(published.runs),
        targets=targets(coverage, loso, ratio, ranking),
        rows=row_models,
        seconds={k: round(v, 1) for k, v in runtime.items()},
    )
