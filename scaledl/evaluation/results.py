"""The typed content of ``metrics.json``: one reader and writer for every consumer.

:class:`Metrics` is the evaluation's result (:func:`scaledl.evaluation.evaluate` builds and
writes it); the CLI summary, the HTML report, the README results block and the Dagster assets
read it with :meth:`Metrics.read`, never by indexing nested dicts. Every model is strict: a key
the schema does not know, a missing key, a value of the wrong type or a non-finite number is a
:class:`MetricsError` naming the file and the key path (``splits.id.methods.scaledl.iteration``),
never a silent default.

A section an evaluation may skip (the label reproducibility without repeated launches, the
out-of-distribution split with a single family, the learning curves, the external GPU data,
the sweep) holds either its content or
``{"skipped": "<why>"}``; :meth:`Metrics.require` returns the content or raises, naming the
file, the section and the reason.

Adding a section (e.g. ``label_reproducibility``, per-split coverage, GPU data):

1. define a model for it below, subclassing :class:`Section` (strict, frozen);
2. add a field to :class:`Metrics` (or to the model that holds it, e.g. :class:`SplitErrors`),
   typed ``NewSection`` or ``Skippable[NewSection]`` when a run may not produce it; keep no
   default, so a file written before the section existed is an error that says which key is
   missing (re-run the evaluation) instead of a silent empty section;
3. fill it in :func:`scaledl.evaluation.evaluate.evaluate`, and read it through the model.

Schema (``schema_version`` 2)::

    {
      "schema_version": 2,
      "n_workloads": int, "families": [str],
      "label_reproducibility": {"mre", "median_re", "p90_re", "n_workloads", "epoch_mre",
                                "per_world_size": {"<ws>": {"mre", "n_workloads"}}}
                               | {"skipped": str},
      "splits": {
        "id":            {"methods": {method: MethodErrors}},
        "ood":           {"per_family": {family: {method: MethodErrors}},
                          "mean": {method: MeanMethodErrors}}   | {"skipped": str},
        "extrapolation": {"methods": {...}, "test_min_tokens_per_step": float} | {"skipped": str}
      },
      "significance": {"seeds", "confidence_level",
                       "splits": {"id" | "ood" | "ood/<family>" | "extrapolation":
                                  {"n_workloads", "seeds", "label_repeats", "mre_per_seed",
                                   "comparisons": [Comparison]}}},
      "ablations": {ablation: "what it removes"},
      "gnn_diagnosis": {"splits": {group: {method: {"train_rmse_log", "val_rmse_log",
                        "prior_test_mre", "correction_abs", "epochs", "best_epoch"}}}}
                                                               | {"skipped": str},
      "learning_curves": {"methods": {method: {"samplers": {sampler: {"sizes", "mre_mean",
                          "mre_std", "mre_per_seed", "prior_mre_mean",
                          "layerwise_d_efficiency", "family_world_coverage"}}, "n_fits",
                          "fit_seconds", "pool_size", "design_terms", "design_order", "seeds",
                          "comparisons": [Comparison], "halving": Comparison | null}}}
                                                               | {"skipped": str},
      "external": {"vidur": {...}}                             | {"skipped": str},
      "gpu": {"source", "n_workloads", "gpus", "models", "leave_one_model_out", ...}
                                                               | {"skipped": str},
      "sweep": {"family", "base_workload", "sweeps": {field: {...}}} | {"skipped": str},
      "intervals": {"coverage", "score", "library",
                    "id": {"methods": {method: TargetCoverage}},
                    "ood": {"per_family": {family: {method: TargetCoverage}},
                            "pooled": {method: TargetCoverage}}   | {"skipped": str},
                    "extrapolation": {"methods": {...}}             | {"skipped": str},
                    "calibration": {target: {stratum: int}} | null, "targets": [TargetResult]},
      "split_sizes": {split: {"train", "val", "test"}}, "fit_counts": {method: int},
      "notes": [str], "config": {...}, "runtime_s": {...}
    }

with ``MethodErrors = {"iteration": ErrorSummary, "epoch": ErrorSummary, "per_family":
{family: {"iteration", "epoch"}}}`` (a seeded method's: the mean over its model seeds),
``ErrorSummary = {"mre", "rmse_s", "p50_re", "p90_re", "n"}`` (definitions in
:mod:`scaledl.stats.metrics`), ``Comparison`` a paired comparison of two methods
(:class:`~scaledl.stats.significance.Comparison`: MREs, difference, 95% interval,
unit, verdict); ``TargetCoverage =
{"iteration": CoverageSummary, "epoch": CoverageSummary | null}`` with ``CoverageSummary =
{"coverage", "coverage_ci_low", "coverage_ci_high", "median_relative_width", "n", "n_covered",
"n_unbounded", "calibration_size"}`` (:mod:`scaledl.evaluation.coverage`). ``splits`` holds
ScaleDL's ablations beside the methods; ``ablations`` names them.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    PrivateAttr,
    Tag,
    TypeAdapter,
    ValidationError,
)

from scaledl.evaluation.targets import TargetResult
from scaledl.io.atomic import write_atomic
from scaledl.stats.significance import Comparison

#: Version of the layout written by this ScaleDL.
SCHEMA_VERSION = 2


class MetricsError(ValueError):
    """``metrics.json`` is missing, unreadable, or does not match the schema (file and key)."""


class Section(BaseModel):
    """Base of every part of :class:`Metrics`: unknown keys and non-finite numbers are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Skipped(Section):
    """A section the evaluation did not produce, and why.

    Attributes:
        skipped: the reason (e.g. ``"fewer than two families"``).
    """

    skipped: str


S = TypeVar("S", bound=Section)


def _skipped_or_ran(value: Any) -> str:
    if isinstance(value, Skipped) or (isinstance(value, dict) and set(value) == {"skipped"}):
        return "skipped"
    return "ran"


#: ``Skippable[X]``: the content ``X`` or ``{"skipped": reason}``.
Skippable = Annotated[
    Annotated[S, Tag("ran")] | Annotated[Skipped, Tag("skipped")],
    Discriminator(_skipped_or_ran),
]


class ErrorSummary(Section):
    """Errors of one method's predictions of one target (iteration or epoch time).

    Attributes:
        mre: mean relative error ``mean(|pred - true| / true)``.
        rmse_s: root mean squared error, seconds.
        p50_re: median relative error.
        p90_re: 90th percentile of the relative error.
        n: workloads scored.
    """

    mre: float
    rmse_s: float
    p50_re: float
    p90_re: float
    n: int


class MeanErrorSummary(Section):
    """Unweighted means of :class:`ErrorSummary` values over groups (e.g. OOD families)."""

    mre: float
    rmse_s: float
    p50_re: float
    p90_re: float


class _IterationHeadline(Section):
    """The headline numbers of a section with an ``iteration`` error summary."""

    iteration: ErrorSummary | MeanErrorSummary

    @property
    def mre(self) -> float:
        """Iteration-time MRE (the headline number; over groups: their mean)."""
        return self.iteration.mre

    @property
    def rmse_s(self) -> float:
        """Iteration-time RMSE, seconds (over groups: their mean)."""
        return self.iteration.rmse_s


class TargetErrors(_IterationHeadline):
    """Iteration-time and epoch-time errors."""

    iteration: ErrorSummary
    epoch: ErrorSummary


class MethodErrors(TargetErrors):
    """One method on one split: overall and per family."""

    per_family: dict[str, TargetErrors]


class MeanMethodErrors(_IterationHeadline):
    """One method's errors averaged over groups (OOD: the held-out families)."""

    iteration: MeanErrorSummary
    epoch: MeanErrorSummary
    n_groups: int


class SplitErrors(Section):
    """Every method on one train/test split."""

    methods: dict[str, MethodErrors]


class ExtrapolationErrors(SplitErrors):
    """The extrapolation split: the largest workloads (tokens per step) held out.

    Attributes:
        test_min_tokens_per_step: smallest ``batch_size * seq_len`` of the test workloads.
    """

    test_min_tokens_per_step: float


class OODErrors(Section):
    """Leave-one-family-out: each family predicted by methods trained without it.

    Attributes:
        per_family: held-out family -> method -> errors.
        mean: method -> errors averaged over the families.
    """

    per_family: dict[str, dict[str, MethodErrors]]
    mean: dict[str, MeanMethodErrors]


class Splits(Section):
    """The evaluation splits (same training, validation and test ids for every method)."""

    id: SplitErrors
    ood: Skippable[OODErrors]
    extrapolation: Skippable[ExtrapolationErrors]


class SplitComparisons(Section):
    """The paired comparisons on one split (:mod:`scaledl.evaluation.comparisons`).

    Attributes:
        n_workloads: test workloads compared.
        seeds: model seeds of the seeded methods.
        label_repeats: mean launch labels per test workload.
        mre_per_seed: method -> iteration MRE (against the median label) per model seed.
        comparisons: every pair compared.
    """

    n_workloads: int
    seeds: int
    label_repeats: float
    mre_per_seed: dict[str, list[float]]
    comparisons: list[Comparison]

    def find(self, method_a: str, method_b: str) -> Comparison | None:
        """The comparison of ``method_a`` against ``method_b``, ``None`` if not made."""
        return next(
            (c for c in self.comparisons if (c.method_a, c.method_b) == (method_a, method_b)),
            None,
        )


class Significance(Section):
    """Paired comparisons of the methods on every split.

    Attributes:
        seeds: model seeds per seeded method.
        confidence_level: the intervals' coverage.
        splits: ``id``, ``ood`` (all held-out families pooled, weighted to the mean over
            families), ``ood/<family>``, ``extrapolation`` -> its comparisons.
    """

    seeds: int
    confidence_level: float
    splits: dict[str, SplitComparisons]


class DiagnosisRow(Section):
    """One GNN method's fits on a group of splits, averaged over seeds (and folds).

    Attributes:
        train_rmse_log: weighted RMSE of log milliseconds on the training graphs.
        val_rmse_log: the same on the early-stopping graphs.
        prior_test_mre: the prior alone on the test workloads.
        correction_abs: mean ``|log(prediction / prior)|`` on the test workloads.
        epochs: epochs trained.
        best_epoch: epoch of the kept model.
    """

    train_rmse_log: float
    val_rmse_log: float
    prior_test_mre: float
    correction_abs: float
    epochs: float
    best_epoch: float


class GnnDiagnosis(Section):
    """What the GNNs on a prior did.

    Attributes:
        splits: split group (``id``, ``ood``, ``extrapolation``) -> method -> its row.
    """

    splits: dict[str, dict[str, DiagnosisRow]]


class SamplerCurve(Section):
    """Test MRE versus training workloads chosen by one sampler.

    Attributes:
        sizes: training-set sizes.
        mre_mean: mean MRE over seeds per size.
        mre_std: standard deviation over seeds per size.
        mre_per_seed: MRE per size and seed.
        prior_mre_mean: mean MRE of the method's prior (fitted on the same subsets) per size,
            ``None`` for a method without a prior.
        layerwise_d_efficiency: mean over seeds of the subsets' D-efficiency for the
            layer-wise models (:mod:`scaledl.evaluation.design_check`) per size.
        family_world_coverage: mean share of the pool's (family, world size) cells covered.
    """

    sizes: list[int]
    mre_mean: list[float]
    mre_std: list[float]
    mre_per_seed: list[list[float]]
    prior_mre_mean: list[float] | None
    layerwise_d_efficiency: list[float]
    family_world_coverage: list[float]


class LearningCurves(Section):
    """One method's learning curves (see :mod:`scaledl.evaluation.learning_curve`).

    Attributes:
        samplers: sampler -> its curve.
        n_fits: distinct fits.
        fit_seconds: wall time of the fits, seconds.
        pool_size: workloads the subsets are drawn from.
        design_terms: terms of the D-optimal sampler's model.
        design_order: its order (``main``, ...).
        seeds: seeds per (sampler, size).
        comparisons: every sampler against random at each proper size, paired by seed.
        halving: D-optimal at half the final size against random at the final size (``None``
            when not computable).
    """

    samplers: dict[str, SamplerCurve]
    n_fits: int
    fit_seconds: float
    pool_size: int
    design_terms: list[str]
    design_order: str
    seeds: int
    comparisons: list[Comparison]
    halving: Comparison | None


class LearningCurvesByMethod(Section):
    """Learning curves per method; the first method is the headline one."""

    methods: dict[str, LearningCurves]

    @property
    def headline(self) -> LearningCurves:
        """The curves of the first method evaluated."""
        return next(iter(self.methods.values()))


class VidurVariantError(Section):
    """All-reduce model error of one variant on one Vidur system."""

    mre: float
    rmse_ms: float
    n_test: int


class VidurResults(Section):
    """Alpha-beta all-reduce model on Vidur's NCCL measurements."""

    source: str
    per_system: dict[str, dict[str, VidurVariantError]]
    mean: dict[str, float]


class ExternalResults(Section):
    """Evaluations on measurements of others shipped in ``external/`` (Vidur all-reduce)."""

    vidur: VidurResults


class GpuMethodError(Section):
    """MRE of one method on one GPU's workloads and how many they are."""

    mre: float
    n: int


class GpuProtocol(Section):
    """One protocol (leave one model out or one GPU out) of the GPU evaluation.

    Attributes:
        per_gpu: GPU -> method -> error.
        mean_over_gpus: method -> MRE averaged over GPUs.
        max_over_gpus: method -> worst GPU's MRE.
        per_model: model -> method -> MRE.
        per_mode: mode -> method -> MRE.
        folds: held-out model or GPU -> what each fold fitted and chose (timings, correction).
    """

    per_gpu: dict[str, dict[str, GpuMethodError]]
    mean_over_gpus: dict[str, float]
    max_over_gpus: dict[str, float]
    per_model: dict[str, dict[str, float]]
    per_mode: dict[str, dict[str, float]]
    folds: dict[str, dict[str, Any]]


class GpuResults(Section):
    """Imported real-GPU profiles evaluated through the product's models.

    Written by :func:`scaledl.evaluation.gpu.evaluate_gpu` (which documents the protocols);
    rendered by :mod:`scaledl.report.gpu_report`.

    Attributes:
        source: where the data comes from (licence).
        n_workloads: imported workloads evaluated.
        gpus: their GPUs.
        models: their models.
        methods: methods evaluated.
        notes: what was adjusted or not evaluated, and why.
        leave_one_model_out: the leave-one-model-out protocol.
        operators: operator-level errors of the held-out models (``{}`` without operators).
        leave_one_gpu_out: the leave-one-GPU-out protocol, ``null`` when not run.
        not_modelled: what the product does not model (parallelism, ...), and why.
        targets: the GPU targets, measured.
        runtime_s: wall time of the GPU evaluation, seconds.
        peer: NeuSight's own predictions compared with ScaleDL on the same rows
            (:mod:`scaledl.evaluation.gpu_peer`: ``source``, ``method``, ``paired_rows`` per
            protocol, ``unmatched`` rows and the paired ``comparisons``), ``null`` when not
            evaluated.
        parallel_layouts: NeuSight's 4-GPU rows composed by ScaleDL and paired with NeuSight's
            own predictions (:func:`scaledl.evaluation.gpu_layouts.evaluate_layout_rows`),
            ``null`` when not evaluated.
        cache: where the result came from when the evaluation is cached
            (:mod:`scaledl.evaluation.gpu_cache`): ``key`` (SHA-256 of inputs, settings and
            code), ``hit`` (read back, not computed) and ``computed_s`` (the seconds computing
            it took); ``null`` when not cached.
    """

    source: str
    n_workloads: int
    gpus: list[str]
    models: list[str]
    methods: list[str]
    notes: list[str]
    leave_one_model_out: GpuProtocol
    operators: dict[str, Any]
    leave_one_gpu_out: GpuProtocol | None
    not_modelled: dict[str, str]
    targets: list[TargetResult]
    runtime_s: float
    peer: dict[str, Any] | None = None
    parallel_layouts: dict[str, Any] | None = None
    cache: dict[str, Any] | None = None


class SweepCurve(Section):
    """Predicted epoch time of each method while one field varies, and measured points."""

    values: list[int]
    pred_epoch_s: dict[str, list[float]]
    measured_values: list[int]
    measured_epoch_s: list[float]


class Sweep(Section):
    """Epoch time of a representative workload versus batch size and sequence length."""

    family: str
    base_workload: str
    sweeps: dict[str, SweepCurve]


class CoverageSummary(Section):
    """Empirical coverage of one method's conformal intervals on one split and target.

    Written by :func:`scaledl.evaluation.coverage.interval_coverage` (which documents the
    calibration protocol of each split).

    Attributes:
        coverage: share of test workloads whose measured time lies in its interval.
        coverage_ci_low: lower end of its exact 95% Clopper-Pearson interval.
        coverage_ci_high: upper end.
        median_relative_width: median of ``(high - low) / predicted`` (``null`` when the
            median interval is unbounded: too few calibration residuals).
        n: test workloads scored.
        n_covered: of which covered.
        n_unbounded: intervals unbounded for lack of calibration residuals.
        calibration_size: calibration residuals each interval came from.
        calibration_families: for a left-out family, the other families it was calibrated on
            (each family one score); ``null`` on the other splits.
        family_calibration: for a left-out family, how its half-width was obtained
            (``conformal``, ``normal_prediction_bound`` or ``unbounded``:
            :func:`scaledl.models.intervals.family_half_width`); for the pooled left-out
            families, the methods used, comma-separated; ``null`` on the other splits and in
            results written before the normal bound.
    """

    coverage: float
    coverage_ci_low: float
    coverage_ci_high: float
    median_relative_width: float | None
    n: int
    n_covered: int
    n_unbounded: int
    calibration_size: int
    calibration_families: int | None = None
    family_calibration: str | None = None


class TargetCoverage(Section):
    """Interval coverage of iteration and epoch time (epoch ``null`` without epoch labels)."""

    iteration: CoverageSummary
    epoch: CoverageSummary | None


class MethodCoverage(Section):
    """Interval coverage of every method on one split."""

    methods: dict[str, TargetCoverage]


class OODCoverage(Section):
    """Interval coverage on each left-out family (calibrated on the other families).

    Attributes:
        per_family: family -> method -> coverage.
        pooled: method -> coverage over every left-out family's workloads together.
    """

    per_family: dict[str, dict[str, TargetCoverage]]
    pooled: dict[str, TargetCoverage]


class IntervalResults(Section):
    """Calibrated prediction intervals: coverage and width per split, the bundle's calibration.

    Attributes:
        coverage: the nominal coverage evaluated (e.g. 0.9).
        score: the non-conformity score.
        library: the conformal library and version.
        id: the random held-out split (leave-one-out calibration over its test workloads).
        ood: each left-out family, or skipped.
        extrapolation: the extrapolation split, or skipped.
        calibration: residuals per target and stratum of the calibration written for the
            predictor bundle (``calibration.json``), ``null`` when ScaleDL was not evaluated.
        targets: the interval targets, measured.
        calibration_methods: target -> stratum -> how that calibration's half-width at the
            nominal coverage is obtained (``conformal``, ``normal_prediction_bound``,
            ``unbounded``), ``null`` when ScaleDL was not evaluated or in results written
            before the normal bound.
    """

    coverage: float
    score: str
    library: str
    id: MethodCoverage
    ood: Skippable[OODCoverage]
    extrapolation: Skippable[MethodCoverage]
    calibration: dict[str, dict[str, int]] | None
    targets: list[TargetResult]
    calibration_methods: dict[str, dict[str, str]] | None = None


class SplitSize(Section):
    """Workloads in the training, validation and test part of a split."""

    train: int
    val: int
    test: int


class RuntimeSeconds(Section):
    """Wall time of the evaluation's stages, seconds."""

    load: float
    splits: float
    layerwise_stages: float
    significance: float
    sweep: float
    learning_curve: float
    external: float
    intervals: float
    figures: float
    fit_seconds: dict[str, float]
    total: float


class WorldSizeReproducibility(Section):
    """Label reproducibility of the workloads of one world size.

    Attributes:
        mre: mean repeat relative error of their iteration labels.
        n_workloads: workloads launched at least twice.
    """

    mre: float
    n_workloads: int


class LabelReproducibility(Section):
    """The noise floor: how far independent launches of the same workload disagree.

    Computed by :func:`scaledl.evaluation.reproducibility.label_reproducibility` (mean over
    ordered pairs of launches of ``|x_i - x_j| / x_j``, then over workloads).

    Attributes:
        mre: label reproducibility MRE of the iteration time.
        median_re: median over workloads.
        p90_re: 90th percentile over workloads.
        n_workloads: workloads launched at least twice.
        epoch_mre: the same MRE for the epoch time.
        per_world_size: world size (a string key, as in JSON) -> its reproducibility.
        raw_mre: the same MRE of the raw launch labels, before the host-drift correction
            (:mod:`scaledl.profiling.drift`); ``None`` in files written before it.
        corrected_launches: launches whose label the correction changed.
        slowdown_models: world size -> the fitted slowdown model
            (:meth:`~scaledl.profiling.drift.SlowdownModel.to_dict`).
    """

    mre: float
    median_re: float
    p90_re: float
    n_workloads: int
    epoch_mre: float
    per_world_size: dict[str, WorldSizeReproducibility]
    raw_mre: float | None = None
    corrected_launches: int | None = None
    slowdown_models: dict[str, dict[str, Any]] | None = None


Split = Literal["id", "ood", "extrapolation"]


class Metrics(Section):
    """The content of ``metrics.json``; read with :meth:`read`, write with :meth:`write`.

    Attributes:
        schema_version: :data:`SCHEMA_VERSION`.
        n_workloads: validated workloads evaluated.
        families: their model families.
        label_reproducibility: the noise floor (MRE between independent launches of the same
            workloads), or skipped when no workload was launched twice.
        splits: errors per split and method (ablations of ScaleDL included; a seeded method's
            errors are the mean over its model seeds).
        significance: paired comparisons of the methods per split.
        ablations: ablation name -> what it removes from ScaleDL (the ablations' errors are in
            ``splits``).
        gnn_diagnosis: what the GNNs on a prior did (training/validation error, the prior's
            error, the size of the correction), or skipped.
        learning_curves: learning curves per method, or skipped.
        external: Vidur all-reduce results, or skipped.
        gpu: imported real-GPU profiles evaluated through the product's models, or skipped.
        sweep: the epoch-time sweep, or skipped.
        intervals: coverage and width of the calibrated prediction intervals per split.
        split_sizes: training / validation / test workloads per split.
        fit_counts: fits per method.
        notes: what was skipped or adjusted, and why.
        config: the :class:`~scaledl.evaluation.evaluate.EvaluationConfig` used.
        runtime_s: wall time of the stages.
    """

    schema_version: Literal[2]
    n_workloads: int
    families: list[str]
    label_reproducibility: Skippable[LabelReproducibility]
    splits: Splits
    significance: Significance
    ablations: dict[str, str]
    gnn_diagnosis: Skippable[GnnDiagnosis]
    learning_curves: Skippable[LearningCurvesByMethod]
    external: Skippable[ExternalResults]
    gpu: Skippable[GpuResults]
    sweep: Skippable[Sweep]
    intervals: IntervalResults
    split_sizes: dict[str, SplitSize]
    fit_counts: dict[str, int]
    notes: list[str]
    config: dict[str, Any]
    runtime_s: RuntimeSeconds

    _source: str = PrivateAttr(default="<metrics>")

    @property
    def source(self) -> str:
        """The file this was read from (``"<metrics>"`` when built in memory)."""
        return self._source

    @classmethod
    def from_dict(cls, data: Any, source: str = "<metrics>") -> Metrics:
        """Validate a mapping (the parsed JSON).

        Args:
            data: the mapping.
            source: where it came from, named in errors.

        Returns:
            The metrics.

        Raises:
            MetricsError: naming ``source`` and every key that is missing, unknown or invalid.
        """
        if isinstance(data, dict) and data.get("schema_version") != SCHEMA_VERSION:
            raise MetricsError(
                f"{source}: key 'schema_version' is {data.get('schema_version')!r}; this ScaleDL "
                f"reads {SCHEMA_VERSION} (re-run the evaluation: `scaledl evaluate` or `make run`)"
            )
        try:
            metrics = cls.model_validate(data)
        except ValidationError as exc:
            raise MetricsError(_describe(exc, source)) from None
        metrics._source = source
        return metrics

    @classmethod
    def section(cls, key: str, value: Any, source: str = "<metrics>") -> Any:
        """Validate one top-level section by its field's type.

        How an evaluation stage types its result before the whole file is assembled.

        Args:
            key: the field (``"splits"``, ``"gnn_diagnosis"``, ...).
            value: the section as a mapping (``{"skipped": reason}`` for a skipped one).
            source: the file the section will be written to, named in errors.

        Returns:
            The section's model (:class:`Skipped` for a skipped section).

        Raises:
            MetricsError: an unknown section, or a value that does not match its schema (naming
                ``source`` and the key path).
        """
        if key not in cls.model_fields:
            raise MetricsError(f"{source}: no section {key!r} in the metrics schema")
        try:
            return _section_adapter(key).validate_python(value)
        except ValidationError as exc:
            raise MetricsError(_describe(exc, source, prefix=(key,))) from None

    @classmethod
    def read(cls, path: Path | str) -> Metrics:
        """Read and validate a ``metrics.json``.

        Raises:
            MetricsError: the file is missing, not JSON, or does not match the schema (naming
                the file and the key).
        """
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise MetricsError(f"{path}: cannot read metrics: {exc.strerror or exc}") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise MetricsError(f"{path}: not valid JSON: {exc}") from None
        return cls.from_dict(data, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        """The JSON-serialisable mapping written to ``metrics.json``."""
        return self.model_dump(mode="json")

    def write(self, path: Path | str) -> Path:
        """Write ``metrics.json`` atomically and durably (:mod:`scaledl.io.atomic`).

        Returns:
            ``path``.
        """
        return write_atomic(Path(path), self.model_dump_json(indent=2) + "\n")

    def require(self, section: str) -> Any:
        """A skippable top-level section's content.

        Args:
            section: ``"label_reproducibility"``, ``"learning_curves"``, ``"external"``,
                ``"gpu"`` or ``"sweep"`` (or another :data:`Skippable` field).

        Returns:
            The section's model.

        Raises:
            MetricsError: the section does not exist or was skipped (naming the file and why).
        """
        if section not in type(self).model_fields:
            raise MetricsError(f"{self.source}: no section {section!r} in the metrics schema")
        value = getattr(self, section)
        if isinstance(value, Skipped):
            raise MetricsError(f"{self.source}: section {section!r} was skipped: {value.skipped}")
        return value

    def split(self, name: Split) -> Any:
        """A split's errors (``id``, ``ood`` or ``extrapolation``).

        Raises:
            MetricsError: the split was skipped (naming the file and why).
        """
        value = getattr(self.splits, name)
        if isinstance(value, Skipped):
            raise MetricsError(f"{self.source}: split 'splits.{name}' was skipped: {value.skipped}")
        return value

    def method_errors(self, split: Split, method: str = "scaledl") -> TargetErrors:
        """Iteration/epoch errors of ``method`` on ``split`` (OOD: the mean over families).

        Raises:
            MetricsError: the split was skipped or the method was not evaluated on it.
        """
        body = self.split(split)
        table = body.mean if isinstance(body, OODErrors) else body.methods
        if method not in table:
            key = f"splits.{split}.{'mean' if split == 'ood' else 'methods'}.{method}"
            raise MetricsError(
                f"{self.source}: no key {key!r}: method {method!r} was not evaluated "
                f"(methods: {sorted(table)})"
            )
        return table[method]

    def mre(self, split: Split, method: str = "scaledl") -> float:
        """Iteration-time MRE of ``method`` on ``split`` (OOD: mean over families)."""
        return self.method_errors(split, method).mre

    @property
    def methods(self) -> list[str]:
        """The methods evaluated (ablations included), in evaluation order."""
        return list(self.splits.id.methods)

    @property
    def main_methods(self) -> list[str]:
        """The methods evaluated, without ScaleDL's ablations."""
        return [m for m in self.methods if m not in self.ablations]


@cache
def _section_adapter(key: str) -> TypeAdapter:
    """The validator of the :class:`Metrics` field ``key`` (its type and discriminator)."""
    info = Metrics.model_fields[key]
    if not info.metadata:
        return TypeAdapter(info.annotation)
    return TypeAdapter(Annotated[(info.annotation, *info.metadata)])


def _describe(exc: ValidationError, source: str, prefix: tuple[str, ...] = ()) -> str:
    """One line per schema error: the file, the key path (after ``prefix``) and what is wrong."""
    lines = []
    for error in exc.errors():
        loc = [*prefix, *(str(p) for p in error["loc"] if p not in ("ran", "skipped"))]
        key = ".".join(loc) or "<top level>"
        if error["type"] == "missing":
            what = "missing"
        elif error["type"] == "extra_forbidden":
            what = "unknown key (not in the metrics schema)"
        else:
            what = f"{error['msg']} (value {error.get('input')!r:.80})"
        lines.append(f"{source}: key {key!r}: {what}")
    shown = lines[:12]
    if len(lines) > len(shown):
        shown.append(f"... and {len(lines) - len(shown)} more")
    return "\n".join(shown)
