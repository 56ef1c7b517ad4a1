"""Evaluation on the reference dataset: fixed labels, so figures compare across commits.

The reference dataset (``datasets/reference-cpu/``, see its ``DATASHEET.md``) is a committed
set of CPU profiles of workloads drawn uniformly at random over 14 architecture families. Its
labels never change, so every run of this evaluation on the same code gives the same figures,
unlike the fresh profiles of ``make run``, which move with the host. Four questions:

* **In distribution**: ``folds``-fold cross-validation over all workloads, stratified by family
  (:class:`sklearn.model_selection.StratifiedKFold`), so each workload is tested once; MRE of
  each method, and ScaleDL paired against the additive baseline (bootstrap over workloads).
* **Out of distribution**: leave-one-family-out over every family; the MRE per family and its
  mean over families, and the coverage of the unseen-family prediction intervals per left-out
  family (:func:`~scaledl.evaluation.coverage.family_coverage`: each family's intervals
  calibrated on the other families only, one score per family) with its exact 95% interval.
* **D-optimal against random**: learning curves (:func:`~scaledl.evaluation.learning_curve.
  learning_curves`) from the unbiased pool: a fixed stratified test share, the rest the pool;
  the matched D-optimal, response-surface D-optimal and random samplers at a quarter and half
  of the pool and the whole pool, paired by seed; the halving comparison (D-optimal at half
  against random at the whole pool, which every sampler shares: so it is taken against the
  whole pool's fit of the same seed).
* **Sequential design**: for each left-out family and seed, a base design (a random share of
  the other families) is trained with several model seeds; ``k`` workloads are added either by
  :func:`~scaledl.design.matched.sequential_indices` (uncertainty: the relative standard
  deviation of the seeds' predictions) or at random, and the left-out family's MRE after
  refitting is compared, paired over (family, seed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import StratifiedKFold

from scaledl.design.matched import predictor_information, sequential_indices
from scaledl.design.samplers import random_indices
from scaledl.evaluation.coverage import family_coverage
from scaledl.evaluation.learning_curve import learning_curves
from scaledl.evaluation.split_fits import fit_predict_many, run_splits
from scaledl.evaluation.splits import Split, leave_one_family_out
from scaledl.evaluation.targets import Target, TargetResult, for_evaluation
from scaledl.io.atomic import write_atomic
from scaledl.models.data import ProfileData, relative_errors
from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.train import validation_ids
from scaledl.stats.metrics import error_summary
from scaledl.stats.significance import paired_comparison


@dataclass(frozen=True)
class ReferenceConfig:
    """Settings of :func:`evaluate_reference`.

    Attributes:
        folds: cross-validation folds of the in-distribution evaluation.
        seeds: model seeds of ScaleDL on the cross-validation and leave-one-family-out fits.
        methods: methods compared (``scaledl`` first).
        learning_curve_seeds: seeds per (sampler, size) of the learning curves.
        learning_curve_samplers: samplers of the learning curves.
        test_fraction: share of each family held out as the learning curves' test set.
        sequential_k: workloads added by one sequential step.
        sequential_seeds: seeds per left-out family of the sequential comparison.
        sequential_base_fraction: share of the other families' workloads in the base design.
        sequential_models: model seeds whose disagreement is the uncertainty.
        n_jobs: parallel processes (``joblib``).
        seed: seed of the folds, test set and base designs.
        interval_coverage: nominal coverage of the unseen-family intervals evaluated.
    """

    folds: int = 5
    seeds: int = 2
    methods: tuple[str, ...] = ("scaledl", "additive")
    learning_curve_seeds: int = 10
    # The response surface cannot code DINOv2 (no intermediate size): not compared here.
    learning_curve_samplers: tuple[str, ...] = ("doptimal", "random")
    test_fraction: float = 0.25
    sequential_k: int = 8
    sequential_seeds: int = 2
    sequential_base_fraction: float = 0.4
    sequential_models: int = 3
    n_jobs: int = -1
    seed: int = 0
    interval_coverage: float = 0.9


def cheap_scaledl_params() -> dict:
    """ScaleDL's settings for the many fits of learning curves and sequential design.

    The same as the main evaluation's learning curves: two layer-wise folds and at most 60 GNN
    epochs with patience 10.
    """
    return {"folds": 2, "gnn_config": GNNTrainConfig(max_epochs=60, patience=10)}


def kfold_splits(labels: pd.DataFrame, folds: int, seed: int, val_fraction: float = 0.15):
    """Stratified ``folds``-fold splits named ``kfold/<i>``, each workload tested once.

    Raises:
        ValueError: a family has fewer workloads than ``folds`` (scikit-learn's message).
    """
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    ids = labels["workload_id"].to_numpy()
    out = []
    for i, (train, test) in enumerate(splitter.split(ids, labels["family"].astype(str))):
        train_ids = tuple(ids[train])
        out.append(
            Split(f"kfold/{i}", train_ids, validation_ids(train_ids, val_fraction, seed + i),
                  tuple(ids[test]))
        )  # fmt: skip
    return out


def _method_summary(predictions: pd.DataFrame, methods: Sequence[str]) -> dict:
    """MRE / RMSE of iteration time per method (mean over seeds per workload first)."""
    out = {}
    for method in methods:
        rows = predictions[predictions["method"] == method]
        per = rows.groupby("workload_id")[["pred_iteration_s", "true_iteration_s"]].mean()
        out[method] = error_summary(per["pred_iteration_s"], per["true_iteration_s"])
    return out


def _paired(predictions: pd.DataFrame, a: str, b: str, weights=None) -> dict:
    """``a`` against ``b`` on the same workloads (relative errors per seed, pooled)."""

    def errors(method: str) -> np.ndarray:
        rows = predictions[predictions["method"] == method]
        table = rows.pivot_table(
            index="seed", columns="workload_id", values="pred_iteration_s", aggfunc="mean"
        )
        true = rows.groupby("workload_id")["true_iteration_s"].first()[table.columns]
        return np.vstack([relative_errors(r, true.to_numpy()) for r in table.to_numpy()])

    ea, eb = errors(a), errors(b)
    return paired_comparison(ea, eb, a, b, weights=weights).model_dump()


def in_distribution(data: ProfileData, config: ReferenceConfig) -> dict:
    """k-fold MRE per method and ScaleDL against the additive baseline (module docstring)."""
    splits = kfold_splits(data.labels, config.folds, config.seed)
    fits = run_splits(data, splits, config.methods, config.seeds, {}, config.n_jobs)
    methods = _method_summary(fits.predictions, config.methods)
    return {
        "folds": config.folds,
        "methods": methods,
        "comparison": _paired(fits.predictions, config.methods[0], config.methods[-1]),
    }


def out_of_distribution(data: ProfileData, config: ReferenceConfig) -> dict:
    """Leave-one-family-out fits of every method, summarised by :func:`ood_summary`."""
    splits = leave_one_family_out(data.labels, seed=config.seed)
    fits = run_splits(data, splits, config.methods, config.seeds, {}, config.n_jobs)
    return ood_summary(fits.predictions, config)


def ood_summary(pred: pd.DataFrame, config: ReferenceConfig) -> dict:
    """Leave-one-family-out MRE per family and method, its mean, and interval coverage.

    Args:
        pred: the leave-one-family-out predictions (:data:`~scaledl.evaluation.split_fits.
            PREDICTION_COLUMNS`).
        config: the settings (``methods``, ``interval_coverage``).

    Returns:
        ``{"families", "per_family", "mean_mre", "comparison", "intervals"}``
        (``intervals``: :func:`~scaledl.evaluation.coverage.family_coverage`).
    """
    per_family = {
        str(fam): _method_summary(group, config.methods) for fam, group in pred.groupby("family")
    }
    mean = {
        m: float(np.mean([per_family[f][m]["mre"] for f in per_family])) for m in config.methods
    }
    # Weight each workload by 1 / its family's size: the paired interval of the family mean.
    ids = pred.drop_duplicates("workload_id").set_index("workload_id")["family"]
    ids = ids.sort_index()
    weights = 1.0 / ids.map(ids.value_counts()).to_numpy(dtype=float)
    return {
        "families": len(per_family),
        "per_family": per_family,
        "mean_mre": mean,
        "comparison": _paired(pred, config.methods[0], config.methods[-1], weights=weights),
        "intervals": family_coverage(pred, config.interval_coverage),
    }


def _stratified_test(labels: pd.DataFrame, fraction: float, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    test = []
    for _, group in labels.groupby("family", sort=True):
        k = max(1, int(round(fraction * len(group))))
        test += list(rng.choice(group["workload_id"].to_numpy(), size=k, replace=False))
    return sorted(test)


def sampler_curves(data: ProfileData, config: ReferenceConfig) -> dict:
    """Learning curves of ScaleDL from the unbiased pool, paired by seed (module docstring)."""
    test_ids = _stratified_test(data.labels, config.test_fraction, config.seed)
    pool = len(data.ids) - len(test_ids)
    params = cheap_scaledl_params()

    def fit_many(tasks):
        return fit_predict_many(data, "scaledl", params, tasks, test_ids, config.n_jobs)

    curves = learning_curves(
        data,
        test_ids,
        fit_many,
        sizes=[pool // 4, pool // 2, pool],
        seeds=config.learning_curve_seeds,
        samplers=config.learning_curve_samplers,
    )
    curves["test_size"] = len(test_ids)
    return curves


def _cells(data: ProfileData, ids: Sequence[str]) -> list[str]:
    family = data.labels.set_index("workload_id")["family"]
    return [f"{family[w]}/{data.workloads[w].world_size}" for w in ids]


def sequential_design(data: ProfileData, config: ReferenceConfig) -> dict:
    """Sequential (uncertainty-weighted D-optimal) against random augmentation, per left-out family.

    Returns:
        ``{"k", "units", "per_unit": [...], "mre_sequential", "mre_random", "mre_base",
        "comparison"}`` (comparison of the left-out family's MRE after adding ``k`` workloads,
        sequential against random, paired over (family, seed)).
    """
    params = cheap_scaledl_params()
    labels = data.labels.set_index("workload_id")
    true_s = labels.loc[data.ids, "iteration_ms"].to_numpy() / 1000.0
    position = {w: i for i, w in enumerate(data.ids)}
    units = []
    for family in sorted(labels["family"].astype(str).unique()):
        others = [w for w in data.ids if labels.loc[w, "family"] != family]
        for s in range(config.sequential_seeds):
            seed = config.seed + 1000 * s
            n_base = int(round(config.sequential_base_fraction * len(others)))
            base = [others[i] for i in random_indices(len(others), n_base, seed=seed)]
            units.append({"family": family, "seed": seed, "others": others, "base": base})
    # 1. The base fits: model seeds' disagreement on every candidate.
    tasks = [
        (u["base"], list(validation_ids(u["base"], 0.15, u["seed"])), u["seed"] + m)
        for u in units
        for m in range(config.sequential_models)
    ]
    started = time.perf_counter()
    preds = fit_predict_many(data, "scaledl", params, tasks, data.ids, config.n_jobs)
    m = config.sequential_models
    for i, u in enumerate(units):
        stack = np.vstack([p["pred"]["iteration_s"].to_numpy() for p in preds[i * m : (i + 1) * m]])
        u["uncertainty"] = stack.std(axis=0, ddof=1) / stack.mean(axis=0)
        u["base_pred"] = stack[0]
    # 2. The two augmentations of each unit, then the refits.
    refits = []
    for u in units:
        pool = u["others"]
        info = predictor_information(
            data.graphs.select(np.array([position[w] for w in pool])).nodes, _cells(data, pool)
        )
        in_base = [i for i, w in enumerate(pool) if w in set(u["base"])]
        uncertainty = np.maximum(u["uncertainty"][[position[w] for w in pool]], 1e-6)
        added = sequential_indices(info, in_base, config.sequential_k, uncertainty)
        rest = [i for i in range(len(pool)) if i not in set(in_base)]
        rng = np.random.default_rng(u["seed"] + 1)
        random_added = rng.choice(rest, size=config.sequential_k, replace=False)
        for kind, idx in (("sequential", added), ("random", random_added)):
            train = u["base"] + [pool[i] for i in idx]
            refits.append((train, list(validation_ids(train, 0.15, u["seed"])), u["seed"]))
            u[f"{kind}_added"] = [pool[i] for i in idx]
    refit_preds = fit_predict_many(data, "scaledl", params, refits, data.ids, config.n_jobs)
    per_unit = []
    for i, u in enumerate(units):
        test = np.array([position[w] for w in data.ids if labels.loc[w, "family"] == u["family"]])
        row = {"family": u["family"], "seed": u["seed"], "base_size": len(u["base"])}
        row["mre_base"] = error_summary(u["base_pred"][test], true_s[test])["mre"]
        for j, kind in enumerate(("sequential", "random")):
            pred = refit_preds[2 * i + j]["pred"]["iteration_s"].to_numpy()
            row[f"mre_{kind}"] = error_summary(pred[test], true_s[test])["mre"]
        per_unit.append(row)
    frame = pd.DataFrame(per_unit)
    result = paired_comparison(
        frame["mre_sequential"].to_numpy(), frame["mre_random"].to_numpy(), "sequential", "random",
        unit="family-seed",
    )  # fmt: skip
    return {
        "k": config.sequential_k,
        "units": len(per_unit),
        "fit_seconds": time.perf_counter() - started,
        "per_unit": per_unit,
        "mre_sequential": float(frame["mre_sequential"].mean()),
        "mre_random": float(frame["mre_random"].mean()),
        "mre_base": float(frame["mre_base"].mean()),
        "comparison": result.model_dump(),
    }


#: Which of the random sampler's sizes each sampler target compares at (25% and 50% of the pool).
_SAMPLER_SIZE = {"reference_sampler_25": 0, "reference_sampler_50": 1}


def target_checks(result: dict) -> list[TargetResult]:
    """Each ``reference`` target of :data:`scaledl.evaluation.targets.TARGETS`, judged.

    Args:
        result: the output of :func:`evaluate_reference`.

    Returns:
        One entry per target: ``value`` the MRE, the lowest family's coverage, or the paired
        difference with its 95% interval (``ci_low``, ``ci_high``); ``met`` ``None`` when the
        evaluation did not produce the figure.
    """
    curves = result.get("learning_curves") or {}
    sizes = curves.get("samplers", {}).get("random", {}).get("sizes", [])
    rows = []
    for spec in for_evaluation("reference"):
        if spec.comparator == "within":
            rows.append(_coverage_check(result, spec))
            continue
        if spec.name in _SAMPLER_SIZE and len(sizes) <= _SAMPLER_SIZE[spec.name]:
            value, met = None, None
        else:
            fields = {"size": sizes[_SAMPLER_SIZE[spec.name]]} if spec.name in _SAMPLER_SIZE else {}
            value, met = spec.judge(result, **fields)
        if value is None:
            rows.append(spec.result("not evaluated", met))
        elif spec.comparator == "<=":
            rows.append(spec.result(f"{100 * value:.1f}%", met, value=value))
        else:
            measured = (
                f"{100 * value['mre_difference']:+.1f} points [{100 * value['ci_low']:+.1f}, "
                f"{100 * value['ci_high']:+.1f}]"
            )
            rows.append(spec.result(measured, met, value=value["mre_difference"],
                                    ci_low=value["ci_low"], ci_high=value["ci_high"]))  # fmt: skip
    return rows


def _coverage_check(result: dict, spec: Target) -> TargetResult:
    """The lowest per-family coverage of ScaleDL's intervals, met when every family is in band.

    An unbounded interval covers anything and says nothing: a family with one is not met.
    """
    intervals = (result.get("out_of_distribution") or {}).get("intervals") or {}
    summaries = [
        by["scaledl"]["iteration"]
        for by in intervals.get("per_family", {}).values()
        if "scaledl" in by
    ]
    if not summaries:
        return spec.result("not evaluated", None)
    met = all(spec.check(s["coverage"]) and not s["n_unbounded"] for s in summaries)
    lowest = min(s["coverage"] for s in summaries)
    low, high = spec.threshold
    return spec.result(f"{100 * lowest:.1f}% (band {100 * low:.0f}%-{100 * high:.0f}%)", met,
                       value=lowest)  # fmt: skip


def _halving_against_full(curves: dict) -> dict | None:
    """D-optimal at half the pool against the whole pool's fit of the same seed."""
    d = curves["samplers"].get("doptimal")
    r = curves["samplers"].get("random")
    if d is None or r is None or len(d["sizes"]) < 3:
        return None
    half = d["mre_per_seed"][d["sizes"].index(curves["pool_size"] // 2)]
    full = r["mre_per_seed"][r["sizes"].index(curves["pool_size"])]
    result = paired_comparison(half, full, f"doptimal@{curves['pool_size'] // 2}",
                               f"pool@{curves['pool_size']}", unit="seed")  # fmt: skip
    return result.model_dump()


def evaluate_reference(
    data: ProfileData, config: ReferenceConfig | None = None, checkpoint: Path | None = None
) -> dict:
    """Every reference evaluation (module docstring) on one dataset.

    Args:
        data: the reference dataset's validated profiles (:func:`scaledl.models.data.
            load_profile_data`).
        config: settings (defaults: :class:`ReferenceConfig`).
        checkpoint: a JSON file holding the stages finished so far (written after each stage;
            a rerun with the same settings resumes from it, so a failing late stage loses
            nothing already computed).

    Returns:
        ``{"dataset", "in_distribution", "out_of_distribution", "learning_curves",
        "sequential", "targets", "seconds"}``; errors are fractions, times seconds.

    Raises:
        Exception: a failing fit is raised, never turned into a metric.
    """
    config = config or ReferenceConfig()
    families = data.labels["family"].astype(str).value_counts().sort_index()
    result: dict = {
        "dataset": {
            "workloads": len(data.ids),
            "families": {str(k): int(v) for k, v in families.items()},
            "world_sizes": sorted({int(w.world_size) for w in data.workloads.values()}),
            "label_correction": data.label_correction,
        },
        "config": {k: v for k, v in config.__dict__.items()},
    }
    done = _read_checkpoint(checkpoint, result["config"])
    timings = done.pop("_seconds", {})
    for name, stage in (
        ("in_distribution", in_distribution),
        ("out_of_distribution", out_of_distribution),
        ("learning_curves", sampler_curves),
        ("sequential", sequential_design),
    ):
        if name in done:
            result[name] = done[name]
            continue
        t0 = time.perf_counter()
        result[name] = stage(data, config)
        timings[name] = time.perf_counter() - t0
        if checkpoint is not None:
            stages = {k: result[k] for k in result if k not in ("dataset", "config")}
            payload = {"config": result["config"], **stages, "_seconds": timings}
            write_atomic(checkpoint, json.dumps(payload, default=str))
    result["learning_curves"]["halving_full"] = _halving_against_full(result["learning_curves"])
    result["targets"] = [t.to_dict() for t in target_checks(result)]
    result["seconds"] = {**timings, "total": float(sum(timings.values()))}
    return result


def _read_checkpoint(checkpoint: Path | None, config: dict) -> dict:
    """The finished stages of an earlier run with the same settings (empty otherwise)."""
    if checkpoint is None or not checkpoint.is_file():
        return {}
    saved = json.loads(checkpoint.read_text())
    if saved.pop("config", None) != json.loads(json.dumps(config, default=str)):
        return {}
    return saved
