"""Fits of every method and model seed on the evaluation's splits, sharing what does not change.

An evaluation fits many models: every method on every split (in-distribution, each
leave-one-family-out fold, extrapolation), the GNN methods (ScaleDL, its ablations, graph-only)
once per model seed. Most of the work is the same for all of them, so it is done once:

* the **layer-wise stage** of a split (layer-wise and all-reduce models on all training
  workloads, out-of-fold node predictions; :mod:`scaledl.models.layerwise_stage`) is fitted once
  per split and settings, and handed to every layer-wise method and seed of that split;
* methods whose fit does not depend on the seed (``additive``, ``critical_path``,
  ``analytical``, ``global_gbdt``: fixed ``random_state``) are fitted once per split; their
  predictions stand for every seed, so every method has one prediction per (seed, workload)
  and comparisons stay paired;
* independent fits (stages of different splits, (split, method) groups of seeded GNNs) run in
  parallel processes (``joblib``'s ``loky`` backend, ``n_jobs``; each fit single-threaded,
  :mod:`scaledl.models.threads`), so two cores train two GNNs at a time.

Every fit's wall time is recorded per method (``fit_seconds``, summed over processes: CPU
seconds, not wall time).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from joblib import Parallel, delayed

from scaledl.evaluation.progress import EvaluationProgress
from scaledl.evaluation.splits import Split
from scaledl.models.data import ProfileData
from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.layerwise_stage import LayerwiseStage, fit_layerwise_stage
from scaledl.models.methods import GraphMethod, make_method

#: Columns of the predictions frame (one row per split, method, seed and test workload).
PREDICTION_COLUMNS = (
    "split", "method", "seed", "workload_id", "family", "true_iteration_s", "pred_iteration_s",
    "true_epoch_s", "pred_epoch_s",
)  # fmt: skip


def is_seeded(method: str) -> bool:
    """Whether a method's fit depends on the model seed (the GNN methods)."""
    probe = make_method(method)
    return isinstance(probe, GraphMethod) and probe.uses_gnn


def with_seed(params: dict, seed: int) -> dict:
    """Method parameters with the GNN's seed set to ``seed``."""
    config = params.get("gnn_config") or GNNTrainConfig()
    return {**params, "gnn_config": dataclasses.replace(config, seed=seed)}


def _stage_settings(method: str, params: dict) -> tuple[int | None, dict] | None:
    """``(folds, layerwise_params)`` of a layer-wise method's stage, ``None`` without one.

    ``folds`` is ``None`` for a method without a GNN (it does not use out-of-fold predictions).
    """
    probe = make_method(method, **params)
    if not isinstance(probe, GraphMethod) or not probe.uses_layerwise:
        return None
    return (probe.folds if probe.uses_gnn else None), dict(probe.layerwise_params)


def stage_plan(methods: Sequence[str], params: dict[str, dict]) -> dict[str, tuple[int, dict]]:
    """Which stage each layer-wise method uses: ``(folds, layerwise_params)`` per method.

    Methods with equal settings share one stage; a method without a GNN takes the stage of a
    GNN method with the same layer-wise parameters (it reads only the full-data models), or a
    stage without out-of-fold predictions (``folds`` 1).
    """
    settings = {m: _stage_settings(m, params[m]) for m in methods}
    plan = {}
    for method, found in settings.items():
        if found is None:
            continue
        folds, layerwise = found
        if folds is None:
            folds = next(
                (f for f, p in filter(None, settings.values()) if f is not None and p == layerwise),
                1,
            )
        plan[method] = (folds, layerwise)
    return plan


def _fit_stage(train: ProfileData, folds: int, layerwise_params: dict) -> LayerwiseStage:
    return fit_layerwise_stage(train, folds, layerwise_params)


def _fit_predict(
    method: str,
    params: dict,
    seeds: Sequence[int],
    train: ProfileData,
    val_ids: Sequence[str],
    test: list,
    stage: LayerwiseStage | None,
) -> list[dict]:
    """Fit one method per seed on a split's training data and predict its test workloads.

    Returns:
        Per seed: ``seed``, ``pred`` (:meth:`~scaledl.models.methods.RuntimeMethod.predict` of
        ``test``), ``fit_s``, and for a GNN on a prior also ``prior_ms`` (the prior of
        ``test``) and ``history`` (the GNN's training record).
    """
    out = []
    for seed in seeds:
        kwargs = with_seed(params, seed) if is_seeded(method) else params
        model = make_method(method, **kwargs)
        fit_params = {"stage": stage} if stage is not None else {}
        model.fit(train, list(val_ids), **fit_params)
        result = {"seed": seed, "pred": model.predict(test), "fit_s": model.fit_seconds_}
        if isinstance(model, GraphMethod) and model.uses_gnn and model.uses_layerwise:
            result.update(prior_ms=model.predict_prior_ms(test), history=dict(model.history_))
        out.append(result)
    return out


@dataclass
class SplitFits:
    """Predictions of every method, seed and split, and what the fits cost.

    Attributes:
        predictions: one row per split, method, seed and test workload
            (:data:`PREDICTION_COLUMNS`).
        fit_counts: fits per method (a seed-independent method counts once per split).
        fit_seconds: summed fit wall time per method, seconds (CPU seconds over processes).
        stage_seconds: wall time of fitting the layer-wise stages, seconds.
        diagnosis: one row per GNN-on-a-prior fit: ``split``, ``method``, ``seed``,
            ``train_rmse_log`` / ``val_rmse_log`` (the GNN's weighted RMSE of log milliseconds
            on its training / early-stopping graphs), ``prior_test_mre`` (the prior alone on
            the test set),
            ``correction_abs`` (mean ``|log(prediction / prior)|`` on the test set),
            ``epochs`` and ``best_epoch`` of training.
    """

    predictions: pd.DataFrame
    fit_counts: dict[str, int] = field(default_factory=dict)
    fit_seconds: dict[str, float] = field(default_factory=dict)
    stage_seconds: float = 0.0
    diagnosis: pd.DataFrame = field(default_factory=pd.DataFrame)


def run_splits(
    data: ProfileData,
    splits: Sequence[Split],
    methods: Sequence[str],
    seeds: int,
    method_params: dict[str, dict],
    n_jobs: int = 1,
    progress: EvaluationProgress | None = None,
) -> SplitFits:
    """Fit every method (every seed of the seeded ones) on every split and predict its test set.

    Args:
        data: all profile data.
        splits: the splits (training, validation and test ids; the same for every method).
        methods: method names (:func:`~scaledl.models.methods.make_method`).
        seeds: model seeds ``0 .. seeds - 1`` of the seeded methods (:func:`is_seeded`).
        method_params: keyword arguments of ``make_method`` per method.
        n_jobs: parallel processes (``joblib`` semantics: ``-1`` all cores, 1 in-process).
        progress: told of every layer-wise stage and every (split, method) fit with its seeds
            as it finishes.

    Returns:
        The :class:`SplitFits`.

    Raises:
        ValueError: fewer than one seed.
        Exception: a failing fit is raised, never turned into a metric.
    """
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    # A generator: each result is handed back (and reported) as soon as it and those before it
    # are done.
    parallel = Parallel(n_jobs=n_jobs, backend="loky", return_as="generator")
    subsets = [(data.subset(s.train_ids), data.subset(s.test_ids)) for s in splits]
    params = {m: dict(method_params.get(m, {})) for m in methods}
    plan = stage_plan(methods, params)
    n_stages = len(splits) * len({repr(v) for v in plan.values()})
    if progress is not None:
        progress.add_units(n_stages + len(splits) * len(methods))
    started = time.perf_counter()
    names = [s.name for s in splits]
    stages = _fit_stages(parallel, [train for train, _ in subsets], plan, names, progress)
    stage_seconds = time.perf_counter() - started
    jobs, job_info = [], []
    for i, split in enumerate(splits):
        train, test = subsets[i]
        workloads = [test.workloads[w] for w in test.ids]
        for method in methods:
            stage = stages[(i, repr(plan[method]))] if method in plan else None
            method_seeds = list(range(seeds)) if is_seeded(method) else [0]
            jobs.append(
                delayed(_fit_predict)(
                    method, params[method], method_seeds, train, split.val_ids, workloads, stage
                )
            )
            job_info.append((i, method))
    # The seeded (GNN) groups first: the long tasks start early, the short ones fill in.
    order = sorted(range(len(jobs)), key=lambda k: not is_seeded(job_info[k][1]))
    results = [None] * len(jobs)
    for k, result in zip(order, parallel(jobs[k] for k in order), strict=True):
        results[k] = result
        if progress is not None:
            i, method = job_info[k]
            seeds_done = [r["seed"] for r in result]
            progress.unit_done(f"{splits[i].name}, {method}, seed(s) {_span(seeds_done)}")
    frames, counts, seconds, diagnosis = [], {}, {}, []
    for (i, method), per_seed in zip(job_info, results, strict=True):
        true = subsets[i][1].labels.set_index("workload_id")
        for r in per_seed:
            counts[method] = counts.get(method, 0) + 1
            seconds[method] = seconds.get(method, 0.0) + r["fit_s"]
            if "history" in r:
                diagnosis.append(_diagnosis_row(splits[i].name, method, r, true))
        replicated = [dict(per_seed[0], seed=s) for s in range(seeds)]
        for r in per_seed if len(per_seed) == seeds else replicated:
            frames.append(_prediction_frame(splits[i].name, method, r, true))
    return SplitFits(
        predictions=pd.concat(frames, ignore_index=True)[list(PREDICTION_COLUMNS)],
        fit_counts=counts,
        fit_seconds=seconds,
        stage_seconds=stage_seconds,
        diagnosis=pd.DataFrame(diagnosis),
    )


def _span(seeds: Sequence[int]) -> str:
    """``0-4`` for consecutive seeds, else the list."""
    seeds = list(seeds)
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(str(s) for s in seeds)


def _fit_stages(
    parallel: Parallel,
    trains: list[ProfileData],
    plan: dict,
    names: Sequence[str],
    progress: EvaluationProgress | None,
) -> dict[tuple[int, str], LayerwiseStage]:
    """Each distinct layer-wise stage of the plan, fitted once per split's training data.

    Returns:
        ``(split index, repr(stage settings)) -> stage``.
    """
    distinct = list(dict.fromkeys(repr(v) for v in plan.values()))
    settings = {repr(v): v for v in plan.values()}
    stage_jobs = [((i, key), settings[key]) for i in range(len(trains)) for key in distinct]
    fitted = parallel(
        delayed(_fit_stage)(trains[i], folds, layerwise)
        for (i, _), (folds, layerwise) in stage_jobs
    )
    out = {}
    for ((i, key), (folds, _)), stage in zip(stage_jobs, fitted, strict=True):
        out[(i, key)] = stage
        if progress is not None:
            progress.unit_done(f"{names[i]}, layer-wise stage ({folds} fold(s))")
    return out


def _diagnosis_row(split: str, method: str, result: dict, true: pd.DataFrame) -> dict:
    """The :attr:`SplitFits.diagnosis` row of one GNN-on-a-prior fit (see there)."""
    history, pred, prior_ms = result["history"], result["pred"], result["prior_ms"]
    truth = true.loc[pred["workload_id"], "iteration_ms"].to_numpy()
    return {
        "split": split,
        "method": method,
        "seed": result["seed"],
        "train_rmse_log": float(np.sqrt(history["train_mse"])),
        "val_rmse_log": float(np.sqrt(history["best_val_mse"])),
        "prior_test_mre": float(np.mean(np.abs(prior_ms - truth) / truth)),
        "correction_abs": float(np.mean(np.abs(np.log(pred["iteration_s"] * 1000 / prior_ms)))),
        "epochs": history.get("epochs", 0),
        "best_epoch": history.get("best_epoch", 0),
    }


def _prediction_frame(split: str, method: str, result: dict, true: pd.DataFrame) -> pd.DataFrame:
    """The prediction rows (:data:`PREDICTION_COLUMNS`) of one fit's test workloads."""
    pred = result["pred"]
    ids = pred["workload_id"]
    return pd.DataFrame(
        {
            "split": split,
            "method": method,
            "seed": result["seed"],
            "workload_id": ids,
            "family": true.loc[ids, "family"].to_numpy(),
            "true_iteration_s": true.loc[ids, "iteration_ms"].to_numpy() / 1000.0,
            "pred_iteration_s": pred["iteration_s"].to_numpy(),
            "true_epoch_s": true.loc[ids, "epoch_s"].to_numpy(),
            "pred_epoch_s": pred["epoch_s"].to_numpy(),
        }
    )


def fit_predict_many(
    data: ProfileData,
    method: str,
    params: dict,
    tasks: Sequence[tuple[Sequence[str], Sequence[str], int]],
    test_ids: Sequence[str],
    n_jobs: int = 1,
    progress: EvaluationProgress | None = None,
) -> list[dict]:
    """Fit one method on many training subsets (learning curves) and predict a fixed test set.

    Args:
        data: all profile data.
        method: the method.
        params: its ``make_method`` keyword arguments.
        tasks: ``(train_ids, val_ids, seed)`` per fit; the seed is the model seed of a seeded
            method.
        test_ids: the test workloads.
        n_jobs: parallel processes (``joblib`` semantics).
        progress: told of every fit as it finishes.

    Returns:
        Per task, the result of its fit (``pred``: ``workload_id``, ``iteration_s``,
        ``epoch_s`` of ``test_ids``; ``fit_s``; ``prior_ms`` for a GNN on a prior; see
        :func:`_fit_predict`).
    """
    test = [data.workloads[w] for w in test_ids]

    def job(train_ids, val_ids, seed) -> Callable:
        return delayed(_fit_predict)(
            method, params, [seed], data.subset(train_ids), val_ids, test, None
        )

    tasks = list(tasks)
    if progress is not None:
        progress.add_units(len(tasks))
    parallel = Parallel(n_jobs=n_jobs, backend="loky", return_as="generator")
    out = []
    for (train_ids, _, seed), per_seed in zip(tasks, parallel(job(*t) for t in tasks), strict=True):
        out.append(per_seed[0])
        if progress is not None:
            progress.unit_done(f"{method}, {len(train_ids)} training workloads, seed {seed}")
    return out
