"""Orchestration of the evaluation: splits, fits, metrics, learning curves, external data, report.

:func:`evaluate` reads a directory of validated profile tables, fits every method and ablation of
the config on every split (the same training, validation and test ids for all methods; the GNN
methods once per model seed; :mod:`scaledl.evaluation.split_fits` shares the layer-wise stage
and runs independent fits in parallel), scores iteration and epoch time
(:mod:`scaledl.stats.metrics`; a seeded method's errors are the mean over its seeds),
compares the methods paired (:mod:`scaledl.evaluation.comparisons`), runs the learning curves
(:mod:`scaledl.evaluation.learning_curve`) and the external evaluations on real GPU data
(:mod:`scaledl.evaluation.gpu`: imported NeuSight GPU profiles through the product's models;
:mod:`scaledl.evaluation.vidur`: Vidur all-reduce), scores the calibrated prediction
intervals on the splits' out-of-sample predictions (:mod:`scaledl.evaluation.coverage`, no
extra fit), then writes ``metrics.json``, ``predictions.parquet`` (with interval bounds),
``calibration.json`` (the ScaleDL interval calibration a predictor bundle stores) and, through
a :class:`Presenter` (:class:`scaledl.report.presenter.HtmlReport`), ``figures/*.png``
and ``report.html`` under the output folder (each file written to a temporary name first and
renamed into place). Presentation is passed in, so this package imports nothing of
:mod:`scaledl.report`. Each step is a stage of
:mod:`scaledl.evaluation.stages` returning its typed section of the metrics.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Protocol

import pandas as pd

from scaledl.evaluation.gpu_calibration import GPU_CALIBRATION_FILE, write_gpu_calibration
from scaledl.evaluation.learning_curve import SAMPLERS
from scaledl.evaluation.progress import EvaluationProgress
from scaledl.evaluation.results import SCHEMA_VERSION, Metrics
from scaledl.evaluation.stages import (
    EvaluationRun,
    StageClock,
    diagnosis_stage,
    external_stage,
    interval_stage,
    learning_curve_stage,
    reproducibility_stage,
    significance_stage,
    split_stage,
)
from scaledl.evaluation.sweep import sweep_stage
from scaledl.io.atomic import atomic_file
from scaledl.layout import vidur_network_root
from scaledl.models.data import load_profile_data
from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.intervals import IntervalCalibration
from scaledl.models.methods import ABLATION_NAMES, ABLATION_TEXT, METHOD_NAMES
from scaledl.profiles.fingerprint import tables_sha256


def _cheap_learning_curve_params() -> dict[str, dict]:
    return {
        "scaledl": {"folds": 2, "gnn_config": GNNTrainConfig(max_epochs=60, patience=10)},
        "graph_only": {"gnn_config": GNNTrainConfig(max_epochs=60, patience=10)},
    }


@dataclass
class EvaluationConfig:
    """Settings of :func:`evaluate`.

    Attributes:
        seed: seed of the splits, validation subsets and learning-curve seeds' offset.
        test_fraction: share of each family held out in the ID split.
        val_fraction: share of every training set passed as ``val_ids``.
        methods: methods of :data:`~scaledl.models.methods.METHOD_NAMES` to evaluate.
        ablations: ScaleDL's ablations (:data:`~scaledl.models.methods.ABLATION_NAMES`)
            evaluated beside them (same splits and seeds).
        seeds: model seeds of the GNN methods on every split (0 .. seeds - 1); the errors of a
            seeded method are the mean over its seeds and the comparisons pool them.
        n_jobs: parallel processes of the fits (``joblib``: -1 every core, 1 in-process).
        learning_curve_sizes: training-set sizes of the learning curves (``None``: automatic,
            :func:`~scaledl.evaluation.learning_curve.auto_sizes`).
        learning_curve_seeds: seeds per (sampler, size), paired across samplers; 0 skips the
            learning curves.
        learning_curve_methods: methods fitted for the learning curves.
        learning_curve_samplers: samplers compared.
        learning_curve_order: model order of the learning curves' D-optimal sampler
            (:data:`~scaledl.design.features.ORDERS`).
        include_external: evaluate on real GPU data: the imported GPU profiles
            (``gpu_profiles``, :mod:`scaledl.evaluation.gpu`) and Vidur's all-reduce times.
        gpu_profiles: validated imported GPU profile tables (``scaledl import neusight`` then
            ``scaledl validate``; the ``imported_profiles`` asset); ``None`` skips the GPU
            evaluation with a note.
        gpu_parallel_labels: the import's ``parallel_labels.parquet`` (multi-GPU labels).
        gpu_cache_dir: cache of the GPU evaluation, computed once per content of its inputs,
            settings and code (:mod:`scaledl.evaluation.gpu_cache`); ``None`` computes it on
            every run.
        vidur_root: Vidur ``network`` folder.
        figures: draw the PNG figures (and embed them in the report).
        extrapolation_quantile: tokens-per-step quantile from which workloads are tested in
            the extrapolation split.
        method_params: keyword arguments of :func:`~scaledl.models.methods.make_method` per
            method for the main splits (default: the methods' defaults).
        learning_curve_method_params: the same for the learning-curve fits (default: cheaper
            GNN training, 2 out-of-fold folds, to bound the number of expensive fits).
        sweep_family: family of the epoch-time-vs-batch/sequence figure.
        interval_coverage: nominal coverage of the calibrated prediction intervals evaluated
            (:mod:`scaledl.evaluation.coverage`).
    """

    seed: int = 0
    test_fraction: float = 0.2
    val_fraction: float = 0.15
    methods: tuple[str, ...] = METHOD_NAMES
    ablations: tuple[str, ...] = ABLATION_NAMES
    seeds: int = 5
    n_jobs: int = -1
    learning_curve_sizes: tuple[int, ...] | None = None
    learning_curve_seeds: int = 10
    learning_curve_methods: tuple[str, ...] = ("scaledl",)
    learning_curve_samplers: tuple[str, ...] = SAMPLERS
    learning_curve_order: str = "main"
    include_external: bool = True
    gpu_profiles: Path | None = None
    gpu_parallel_labels: Path | None = None
    gpu_cache_dir: Path | None = None
    vidur_root: Path = field(default_factory=vidur_network_root)
    figures: bool = True
    extrapolation_quantile: float = 0.8
    method_params: dict[str, dict] = field(default_factory=dict)
    learning_curve_method_params: dict[str, dict] = field(
        default_factory=_cheap_learning_curve_params
    )
    sweep_family: str = "bert"
    interval_coverage: float = 0.9

    def __post_init__(self) -> None:
        unknown = [
            m for m in (*self.methods, *self.learning_curve_methods) if m not in METHOD_NAMES
        ]
        if unknown:
            raise ValueError(f"EvaluationConfig: unknown method(s) {unknown}; see {METHOD_NAMES}")
        if not self.methods:
            raise ValueError("EvaluationConfig: field 'methods' is empty")
        bad = [a for a in self.ablations if a not in ABLATION_NAMES]
        if bad:
            raise ValueError(f"EvaluationConfig: unknown ablation(s) {bad}; see {ABLATION_NAMES}")
        if self.seeds < 1:
            raise ValueError(f"EvaluationConfig: field 'seeds' must be >= 1, got {self.seeds}")
        bad = [s for s in self.learning_curve_samplers if s not in SAMPLERS]
        if bad:
            raise ValueError(f"EvaluationConfig: unknown sampler(s) {bad}; see {SAMPLERS}")

    @classmethod
    def from_preset(cls, section: dict | None) -> EvaluationConfig:
        """Config from a preset's ``evaluation:`` mapping (lists become tuples).

        Keys are this class's fields; ``gnn_<field>`` (a field of
        :class:`~scaledl.models.gnn_training.GNNTrainConfig`, e.g. ``gnn_max_epochs``) and
        ``folds`` set the training of the GNN methods (ScaleDL, its ablations, graph-only) on
        the main splits.

        Raises:
            ValueError: an unknown key (named).
        """
        section = dict(section or {})
        gnn_fields = {f.name for f in fields(GNNTrainConfig)} - {"seed"}
        gnn = {
            k[4:]: section.pop(k)
            for k in list(section)
            if k.startswith("gnn_") and k[4:] in gnn_fields
        }
        folds = section.pop("folds", None)
        unknown = sorted(set(section) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"preset evaluation: unknown field(s) {unknown}")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in section.items()}
        if gnn or folds:
            params = {"gnn_config": GNNTrainConfig(**gnn)} if gnn else {}
            layerwise = {**params, **({"folds": folds} if folds else {})}
            values["method_params"] = {
                **{m: dict(layerwise) for m in ("scaledl", *ABLATION_NAMES)},
                "graph_only": params,
            }
        return cls(**values)

    def to_dict(self) -> dict:
        """JSON-serialisable view (GNN configs as dicts, paths as strings)."""
        return json.loads(json.dumps(asdict(self), default=str))


class Presenter(Protocol):
    """Draws the evaluation's figures and writes its HTML report (:mod:`scaledl.report`)."""

    def figures(self, metrics: Metrics, predictions: pd.DataFrame, folder: Path) -> dict[str, Path]:
        """Draw the figures into ``folder``; figure key -> PNG path."""
        ...

    def write(self, metrics: Metrics, figure_paths: dict[str, Path], path: Path) -> Path:
        """Write the report to ``path``; returns ``path``."""
        ...


def evaluate(
    validated_dir: Path,
    out_dir: Path,
    config: EvaluationConfig | None = None,
    on_progress: Callable[[str], None] | None = None,
    presenter: Presenter | None = None,
) -> Metrics:
    """Evaluate ScaleDL and the baselines on a directory of validated profile tables.

    The stages of :mod:`scaledl.evaluation.stages` run in order, each returning its typed
    section; the assembled :class:`~scaledl.evaluation.results.Metrics` is validated before
    anything is written, the figures are drawn from it and their time completes ``runtime_s``.
    Each stage, each fit (split, method, seeds) and each GPU fold is reported to
    ``on_progress`` as it finishes, with the elapsed time and the stage's time left, and while
    one runs a line at least every minute (:mod:`scaledl.evaluation.progress`).

    Args:
        validated_dir: directory of the six profile tables (see
            :func:`scaledl.models.data.load_profile_data`).
        out_dir: output folder (created); receives ``metrics.json``, ``predictions.parquet``,
            ``gpu_predictions.parquet`` (with GPU profiles) and, with a ``presenter``,
            ``figures/`` and ``report.html``.
        config: settings; ``None`` gives the defaults.
        on_progress: called with each progress line (e.g. a Dagster ``context.log.info``).
        presenter: draws the figures (when ``config.figures``) and writes ``report.html``;
            ``None``: neither (an older ``report.html`` is removed, so none describes other
            metrics).

    Returns:
        The :class:`~scaledl.evaluation.results.Metrics` written to ``metrics.json`` (schema in
        :mod:`scaledl.evaluation.results`); its ``label_reproducibility`` is the noise floor:
        the MRE between independent launches of the same workloads, overall and per world size
        (:mod:`scaledl.evaluation.reproducibility`); ``external`` holds Vidur's all-reduce
        results and ``gpu`` the imported GPU profiles'
        (:func:`scaledl.evaluation.gpu.evaluate_gpu`).

    Raises:
        scaledl.models.data.ProfileDataError: a table is missing or unreadable (names the file).
        FileNotFoundError: external data requested but missing.
        scaledl.evaluation.results.MetricsError: a result does not match the metrics schema.
        Exception: any method fit failing is raised, never turned into a metric.
    """
    started = time.perf_counter()
    config = config or EvaluationConfig()
    validated_dir, out_dir = Path(validated_dir), Path(out_dir)
    progress = EvaluationProgress(on_progress)
    clock = StageClock(progress)
    with clock.stage("load"):
        data = load_profile_data(validated_dir)
    run = EvaluationRun(data, config, str(out_dir / "metrics.json"), progress=progress)
    body = _description(run)
    with clock.stage("splits"):
        main = split_stage(run)
    body.update(splits=main.splits, split_sizes=main.split_sizes)
    with clock.stage("intervals"):
        body["intervals"], predictions, calibration = interval_stage(
            run, main.fits.predictions, tables_sha256(validated_dir),
            out_dir / "predictions.parquet",
        )  # fmt: skip
    with clock.stage("significance"):
        body["significance"] = significance_stage(run, predictions, main.ood_splits)
        body["gnn_diagnosis"] = diagnosis_stage(run, main.fits.diagnosis)
    with clock.stage("sweep"):
        body["sweep"] = sweep_stage(run)
    with clock.stage("learning_curve"):
        body["learning_curves"] = learning_curve_stage(run, main.id_split)
    with clock.stage("external"):
        body["external"], body["gpu"], gpu_pred = external_stage(run)
    body.update(
        label_reproducibility=reproducibility_stage(run),
        fit_counts=dict(run.fits.fits),
        notes=run.notes,
    )

    def metrics_now() -> Metrics:
        runtime = clock.runtime(main.fits.stage_seconds, run.fits, time.perf_counter() - started)
        return Metrics.from_dict({**body, "runtime_s": runtime}, source=run.source)

    metrics = metrics_now()
    _write_tables(out_dir, predictions, calibration, gpu_pred, config.gpu_profiles)
    with clock.stage("figures"):
        figure_paths = (
            presenter.figures(metrics, predictions, out_dir / "figures")
            if presenter is not None and config.figures
            else {}
        )
    metrics = metrics_now()
    metrics.write(out_dir / "metrics.json")
    if presenter is not None:
        _atomic_write(out_dir / "report.html", lambda p: presenter.write(metrics, figure_paths, p))
    else:
        (out_dir / "report.html").unlink(missing_ok=True)
    return metrics


def _description(run: EvaluationRun) -> dict:
    """The sections that describe the run: schema, data, ablations and config."""
    labels = run.data.labels
    return {
        "schema_version": SCHEMA_VERSION,
        "n_workloads": len(labels),
        "families": sorted(labels["family"].unique().tolist()),
        "ablations": {a: ABLATION_TEXT[a] for a in run.evaluated if a in ABLATION_TEXT},
        "config": run.config.to_dict(),
    }


def _write_tables(
    out_dir: Path,
    predictions: pd.DataFrame,
    calibration: IntervalCalibration | None,
    gpu_pred: pd.DataFrame | None,
    gpu_profiles: Path | None = None,
) -> None:
    """Write the predictions, the calibrations (or remove older ones) and the GPU predictions.

    The GPU calibration is built from the GPU predictions and the imported tables
    ``gpu_profiles`` (:func:`scaledl.evaluation.gpu_calibration.write_gpu_calibration`).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    _atomic_write(out_dir / "predictions.parquet", lambda p: predictions.to_parquet(p, index=False))
    if calibration is not None:
        calibration.write(out_dir / "calibration.json")
    else:  # never leave an older run's calibration for the registration to pick up
        (out_dir / "calibration.json").unlink(missing_ok=True)
    if gpu_pred is not None:
        _atomic_write(
            out_dir / "gpu_predictions.parquet", lambda p: gpu_pred.to_parquet(p, index=False)
        )
        write_gpu_calibration(gpu_pred, gpu_profiles, out_dir / GPU_CALIBRATION_FILE)
    else:  # as for calibration.json: no stale GPU calibration for the registration
        (out_dir / GPU_CALIBRATION_FILE).unlink(missing_ok=True)


def _atomic_write(path: Path, write) -> None:
    """Write ``path`` with ``write(tmp)`` atomically and durably (:mod:`scaledl.io.atomic`)."""
    with atomic_file(path) as tmp:
        write(tmp)
