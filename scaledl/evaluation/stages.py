"""The stages of :func:`scaledl.evaluation.evaluate.evaluate`, each returning its typed section.

Every stage takes the :class:`EvaluationRun` (the data, the config, the notes and the fit
record shared by the stages) and returns the section of
:class:`~scaledl.evaluation.results.Metrics` it computes, validated by
:meth:`~scaledl.evaluation.results.Metrics.section` (a result that does not match the schema is
an error in the stage that made it):

* :func:`split_stage`: every method on the ID, leave-one-family-out and extrapolation splits
  (``splits``, ``split_sizes``; the predictions);
* :func:`interval_stage`: the calibrated intervals scored on those predictions (``intervals``);
* :func:`significance_stage` and :func:`diagnosis_stage`: paired comparisons per split
  (``significance``) and the GNN fits' record (``gnn_diagnosis``);
* :func:`~scaledl.evaluation.sweep.sweep_stage`: the epoch-time sweep (``sweep``);
* :func:`learning_curve_stage`: the samplers' learning curves (``learning_curves``);
* :func:`external_stage`: Vidur's all-reduce and the imported GPU profiles (``external``,
  ``gpu``);
* :func:`reproducibility_stage`: the label noise floor (``label_reproducibility``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from scaledl.evaluation.comparisons import compare_split
from scaledl.evaluation.coverage import evaluate_intervals
from scaledl.evaluation.gpu import GpuEvaluationConfig, evaluate_gpu
from scaledl.evaluation.learning_curve import learning_curves
from scaledl.evaluation.progress import EvaluationProgress
from scaledl.evaluation.reproducibility import label_reproducibility, repeat_relative_errors
from scaledl.evaluation.results import Metrics, RuntimeSeconds
from scaledl.evaluation.split_fits import SplitFits, fit_predict_many, run_splits
from scaledl.evaluation.splits import (
    Split,
    SplitError,
    extrapolation_split,
    leave_one_family_out,
    random_split,
)
from scaledl.evaluation.vidur import evaluate_vidur
from scaledl.layout import neusight_peer_root
from scaledl.models.data import ProfileData
from scaledl.models.intervals import IntervalCalibration
from scaledl.models.methods import make_method
from scaledl.stats.metrics import mean_metrics, mean_over_seeds, prediction_metrics


@dataclass
class FitLog:
    """Fits and fit seconds per method, over every stage (``fit_counts``, ``runtime_s``)."""

    fits: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def record(self, method: str, fit_seconds: float, fits: int = 1) -> None:
        """Count ``fits`` fits of ``method`` taking ``fit_seconds`` in all."""
        self.fits[method] = self.fits.get(method, 0) + fits
        self.seconds[method] = self.seconds.get(method, 0.0) + fit_seconds


@dataclass
class StageClock:
    """Wall seconds per stage (the ``runtime_s`` section), measured and reported by ``progress``.

    Attributes:
        progress: times each stage and reports its progress (:mod:`scaledl.evaluation.progress`).
    """

    progress: EvaluationProgress = field(default_factory=EvaluationProgress)

    @property
    def seconds(self) -> dict[str, float]:
        """Wall seconds per finished stage."""
        return self.progress.stage_seconds

    def stage(self, name: str) -> AbstractContextManager[EvaluationProgress]:
        """Time and report the block as stage ``name`` (added to what it already took)."""
        return self.progress.stage(name)

    def runtime(self, stage_seconds: float, fits: FitLog, total: float) -> RuntimeSeconds:
        """The ``runtime_s`` section (stages not run count 0 s)."""
        names = ("load", "splits", "significance", "sweep", "learning_curve", "external",
                 "intervals", "figures")  # fmt: skip
        return RuntimeSeconds(
            **{n: self.seconds.get(n, 0.0) for n in names},
            layerwise_stages=stage_seconds,
            fit_seconds=dict(fits.seconds),
            total=total,
        )


@dataclass
class EvaluationRun:
    """What the stages share: data, config, the file written, notes and the fit record.

    Attributes:
        data: the validated profile data.
        config: the :class:`~scaledl.evaluation.evaluate.EvaluationConfig`.
        source: the ``metrics.json`` the sections go to (named in schema errors).
        notes: what was skipped or adjusted, and why (the ``notes`` section), in stage order.
        fits: fits and fit seconds per method.
        progress: told of each fit (and GPU fold) of the stages as it finishes.
    """

    data: ProfileData
    config: Any
    source: str
    notes: list[str] = field(default_factory=list)
    fits: FitLog = field(default_factory=FitLog)
    progress: EvaluationProgress | None = None

    @property
    def evaluated(self) -> list[str]:
        """The methods, then ScaleDL's ablations not among them."""
        methods = list(self.config.methods)
        return [*methods, *(a for a in self.config.ablations if a not in methods)]

    def section(self, key: str, value: Any) -> Any:
        """``value`` validated as the ``metrics.json`` section ``key``."""
        return Metrics.section(key, value, self.source)

    def fit(self, method: str, train: ProfileData, val_ids) -> Any:
        """A fresh ``method`` with the main splits' parameters, fitted and recorded."""
        model = make_method(method, **self.config.method_params.get(method, {}))
        model.fit(train, list(val_ids))
        self.fits.record(method, model.fit_seconds_)
        return model


@dataclass
class SplitStage:
    """What :func:`split_stage` produced.

    Attributes:
        splits: the ``splits`` section.
        split_sizes: the ``split_sizes`` section.
        fits: the fits' predictions, counts and GNN diagnosis rows.
        id_split: the ID split (the learning curves test on its test set).
        ood_splits: the leave-one-family-out folds (empty with one family).
    """

    splits: Any
    split_sizes: Any
    fits: SplitFits
    id_split: Split
    ood_splits: list[Split]


def _per_method(frame: pd.DataFrame) -> dict:
    """Errors per method, each the mean over the method's model seeds."""
    return {
        m: mean_over_seeds([prediction_metrics(s) for _, s in g.groupby("seed")])
        for m, g in frame.groupby("method", sort=False)
    }


def split_params(config: Any) -> dict[str, dict]:
    """Method parameters of the main splits: an ablation takes ScaleDL's unless it has its own."""
    params = dict(config.method_params)
    for ablation in config.ablations:
        params.setdefault(ablation, dict(params.get("scaledl", {})))
    return params


def split_stage(run: EvaluationRun) -> SplitStage:
    """Fit every method and ablation on the ID, leave-one-family-out and extrapolation splits.

    Returns:
        The :class:`SplitStage`: the ``splits`` and ``split_sizes`` sections and the fits.

    Raises:
        scaledl.evaluation.results.MetricsError: a section does not match the schema.
        Exception: any method fit failing.
    """
    config, labels = run.config, run.data.labels
    seed, vf = config.seed, config.val_fraction
    id_split = random_split(labels, config.test_fraction, vf, seed)
    ood_splits = leave_one_family_out(labels, vf, seed)
    if not ood_splits:
        run.notes.append("OOD skipped: fewer than two families")
    try:
        ext_split = extrapolation_split(labels, config.extrapolation_quantile, vf, seed)
    except SplitError as exc:
        run.notes.append(f"extrapolation skipped: {exc}")
        ext_split, ext_skipped = None, str(exc)
    all_splits = [id_split, *ood_splits, *([ext_split] if ext_split else [])]
    fits = run_splits(
        run.data, all_splits, run.evaluated, config.seeds, split_params(config), config.n_jobs,
        run.progress,
    )  # fmt: skip
    by_split = dict(tuple(fits.predictions.groupby("split", sort=False)))
    splits: dict = {"id": {"methods": _per_method(by_split["id"])}}
    if ood_splits:
        per_family = {s.name.split("/", 1)[1]: _per_method(by_split[s.name]) for s in ood_splits}
        mean = {m: mean_metrics([per_family[f][m] for f in per_family]) for m in run.evaluated}
        splits["ood"] = {"per_family": per_family, "mean": mean}
    else:
        splits["ood"] = {"skipped": "fewer than two families"}
    if ext_split is None:
        splits["extrapolation"] = {"skipped": ext_skipped}
    else:
        tokens = labels.set_index("workload_id").loc[list(ext_split.test_ids)]
        splits["extrapolation"] = {
            "methods": _per_method(by_split["extrapolation"]),
            "test_min_tokens_per_step": float(tokens.eval("batch_size * seq_len").min()),
        }
    for method, count in fits.fit_counts.items():
        run.fits.record(method, fits.fit_seconds.get(method, 0.0), count)
    sizes = {"id": {"train": len(id_split.train_ids), "val": len(id_split.val_ids),
                    "test": len(id_split.test_ids)}}  # fmt: skip
    return SplitStage(
        run.section("splits", splits), run.section("split_sizes", sizes), fits, id_split,
        ood_splits,
    )  # fmt: skip


def interval_stage(
    run: EvaluationRun, predictions: pd.DataFrame, tables_sha256: str, predictions_path: Path
) -> tuple[Any, pd.DataFrame, IntervalCalibration | None]:
    """Score the calibrated intervals on the splits' out-of-sample predictions (no fit).

    The intervals calibrate the registered predictor, one model of the first seed: they are
    scored on that seed's predictions (the other seeds' rows get no bounds).

    Args:
        run: the evaluation.
        predictions: every split's predictions.
        tables_sha256: SHA-256 of the evaluated tables (recorded in the calibration).
        predictions_path: where the predictions are written (recorded in the calibration).

    Returns:
        ``(intervals, predictions, calibration)``: the ``intervals`` section, the predictions
        with interval bounds, and ScaleDL's calibration (``None`` without ScaleDL).
    """
    intervals, bounded, calibration = evaluate_intervals(
        predictions[predictions["seed"] == 0],
        run.config.interval_coverage,
        tables_sha256,
        str(predictions_path),
    )
    keys = ["split", "method", "seed", "workload_id"]
    bounds = [c for c in bounded.columns if c not in predictions.columns]
    merged = predictions.merge(bounded[keys + bounds], on=keys, how="left")
    return run.section("intervals", intervals), merged, calibration


def significance_stage(run: EvaluationRun, predictions: pd.DataFrame, ood_splits) -> Any:
    """Paired comparisons per split (:mod:`scaledl.evaluation.comparisons`).

    Keys: ``id``, ``ood`` (the folds' test workloads pooled, each weighted by one over its
    family's count: the mean over families), ``ood/<family>`` and ``extrapolation``.

    Returns:
        The ``significance`` section.
    """
    seed, run_labels = run.config.seed, run.data.run_labels
    by_split = dict(tuple(predictions.groupby("split", sort=False)))
    out = {"id": compare_split(by_split["id"], run_labels, seed=seed)}
    if ood_splits:
        pooled = pd.concat([by_split[s.name] for s in ood_splits], ignore_index=True)
        first = pooled.drop_duplicates("workload_id").set_index("workload_id")["family"]
        weights = 1.0 / first.map(first.value_counts())
        out["ood"] = compare_split(pooled, run_labels, weights=weights, seed=seed)
        for split in ood_splits:
            out[split.name] = compare_split(by_split[split.name], run_labels, seed=seed)
    if "extrapolation" in by_split:
        out["extrapolation"] = compare_split(by_split["extrapolation"], run_labels, seed=seed)
    section = {"seeds": run.config.seeds, "confidence_level": 0.95, "splits": out}
    return run.section("significance", section)


def diagnosis_stage(run: EvaluationRun, rows: pd.DataFrame) -> Any:
    """Why the GNN does (not) beat its prior: its fits' record per split group and method.

    Groups: ``id``, ``ood`` (every leave-one-family-out fold), ``extrapolation``. Per GNN
    method on a prior: mean over seeds (and folds) of the training and early-stopping RMSE of
    log milliseconds, the prior's test MRE, the mean absolute log correction the GNN applies
    on the test set, the epochs trained and the best epoch.

    Returns:
        The ``gnn_diagnosis`` section (skipped without a GNN on a prior).
    """
    if rows.empty:
        return run.section("gnn_diagnosis", {"skipped": "no GNN on a prior was evaluated"})
    rows = rows.assign(group=rows["split"].str.split("/").str[0])
    columns = ["train_rmse_log", "val_rmse_log", "prior_test_mre", "correction_abs", "epochs",
               "best_epoch"]  # fmt: skip
    table = rows.groupby(["group", "method"], sort=False)[columns].mean()
    out: dict = {}
    for (group, method), values in table.iterrows():
        out.setdefault(group, {})[method] = {c: float(values[c]) for c in columns}
    return run.section("gnn_diagnosis", {"splits": out})


def learning_curve_stage(run: EvaluationRun, id_split: Split) -> Any:
    """Learning curves of each configured method on the ID test set (D-optimal vs random ...).

    Returns:
        The ``learning_curves`` section (skipped without seeds or methods, with a note).
    """
    config = run.config
    if config.learning_curve_seeds <= 0 or not config.learning_curve_methods:
        run.notes.append("learning curves skipped (no seeds or no method)")
        return run.section("learning_curves", {"skipped": "no learning-curve seeds or methods"})
    curves = {}
    for method in config.learning_curve_methods:
        params = config.learning_curve_method_params.get(method, {})

        def fit_many(tasks, method=method, params=params):
            results = fit_predict_many(
                run.data, method, params, tasks, id_split.test_ids, config.n_jobs, run.progress
            )
            for r in results:
                run.fits.record(method, r["fit_s"])
            return results

        curves[method] = learning_curves(
            run.data,
            id_split.test_ids,
            fit_many,
            config.learning_curve_sizes,
            config.learning_curve_seeds,
            config.learning_curve_samplers,
            config.val_fraction,
            config.learning_curve_order,
        )
    return run.section("learning_curves", {"methods": curves})


def external_stage(run: EvaluationRun) -> tuple[Any, Any, pd.DataFrame | None]:
    """Real GPU data: Vidur's all-reduce times and the imported GPU profiles.

    Returns:
        ``(external, gpu, gpu_predictions)``: the two sections (skipped when
        ``include_external`` is false; ``gpu`` also without ``gpu_profiles``, with a note) and
        the GPU evaluation's predictions (``None`` when it did not run).

    Raises:
        FileNotFoundError: external data requested but missing.
    """
    config = run.config
    if not config.include_external:
        skipped = {"skipped": "include_external is false"}
        return run.section("external", skipped), run.section("gpu", skipped), None
    external = run.section("external", {"vidur": evaluate_vidur(config.vidur_root)})
    if config.gpu_profiles is None:
        reason = "no imported GPU profiles (gpu_profiles)"
        run.notes.append(f"GPU evaluation skipped: {reason}")
        return external, run.section("gpu", {"skipped": reason}), None
    gpu_config = GpuEvaluationConfig(
        parallel_labels=config.gpu_parallel_labels,
        vidur_root=config.vidur_root,
        peer_root=neusight_peer_root(),
        n_jobs=config.n_jobs,
    )
    gpu, gpu_pred = evaluate_gpu(
        Path(config.gpu_profiles), gpu_config, run.progress, config.gpu_cache_dir
    )
    # A protocol the GPU evaluation did not run is written as null, never left out.
    gpu = {"leave_one_gpu_out": None, **gpu}
    return external, run.section("gpu", gpu), gpu_pred


def reproducibility_stage(run: EvaluationRun) -> Any:
    """The label noise floor: MRE between launches of the same workloads, per world size.

    Returns:
        The ``label_reproducibility`` section (skipped when no workload was launched twice);
        with raw step times also the MRE before the host-drift correction and what it
        corrected.
    """
    data = run.data
    section = label_reproducibility(
        data.run_labels, {w: data.workloads[w].world_size for w in data.workloads}
    )
    if not section["n_workloads"]:
        section = {"skipped": "no workload was launched twice"}
    elif "iteration_ms_raw" in data.run_labels:
        raw = repeat_relative_errors(data.run_labels, "iteration_ms_raw", "repeat")
        correction = data.label_correction or {}
        section.update(
            raw_mre=float(raw.mean()),
            corrected_launches=int(correction.get("corrected", 0)),
            slowdown_models=correction.get("models", {}),
        )
    return run.section("label_reproducibility", section)
