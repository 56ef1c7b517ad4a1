"""Error metrics of runtime predictions: MRE, RMSE and relative-error percentiles.

Definitions (as in the ScaleDL paper, arXiv 2511.04162, Sec. V, and the usual runtime-prediction
literature, e.g. NeuSight, ASPLOS 2025):

* relative error of one workload: ``|pred - true| / true``;
* MRE (mean relative error): the mean of the relative errors;
* RMSE: ``sqrt(mean((pred - true)^2))`` in the units of the inputs (seconds here);
* ``p50_re`` / ``p90_re``: the 50th / 90th percentile (linear interpolation,
  :func:`numpy.percentile`) of the relative errors.

The noise floor is the label reproducibility (:mod:`scaledl.evaluation.reproducibility`): how
far independent launches of the same workload disagree.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def relative_errors(pred, true) -> np.ndarray:
    """Elementwise ``|pred - true| / true``.

    Args:
        pred: predictions, shape ``(n,)``.
        true: measured values, shape ``(n,)``, all positive.

    Returns:
        The relative errors, shape ``(n,)``.

    Raises:
        ValueError: shapes differ, a measured value is not positive, or a value is not finite.
    """
    pred = np.asarray(pred, dtype=float)
    true = np.asarray(true, dtype=float)
    if pred.shape != true.shape:
        raise ValueError(f"pred and true have different shapes {pred.shape} and {true.shape}")
    if not np.all(np.isfinite(pred)):
        raise ValueError(f"{int(np.sum(~np.isfinite(pred)))} prediction(s) are not finite")
    if not np.all(np.isfinite(true)) or np.any(true <= 0):
        raise ValueError("measured values must be finite and positive")
    return np.abs(pred - true) / true


def scale_factor(predicted_s, measured_s) -> float:
    """One factor for a set of predictions: the geometric mean of ``measured / predicted``.

    The per-stack calibration of the few-shot protocol
    (:mod:`scaledl.evaluation.published_runs_few_shot`) and of ``scaledl plan-job --measured``
    (:mod:`scaledl.planning.llm_plan`).

    Args:
        predicted_s: shape (k,), positive.
        measured_s: shape (k,), positive.

    Raises:
        ValueError: no value, different shapes, or a value that is not positive and finite.
    """
    p, m = np.asarray(predicted_s, dtype=float), np.asarray(measured_s, dtype=float)
    if p.size == 0 or p.shape != m.shape:
        raise ValueError(f"scale factor: needs known rows of one shape, got {p.shape}, {m.shape}")
    if not (np.all(np.isfinite(p) & (p > 0)) and np.all(np.isfinite(m) & (m > 0))):
        raise ValueError("scale factor: predicted and measured steps must be positive and finite")
    return float(np.exp(np.mean(np.log(m) - np.log(p))))


def error_summary(pred, true) -> dict[str, float]:
    """MRE, RMSE and p50/p90 relative error of a set of predictions.

    Args:
        pred: predictions (seconds), shape ``(n,)``, ``n >= 1``.
        true: measured values (seconds), shape ``(n,)``.

    Returns:
        ``{"mre", "rmse_s", "p50_re", "p90_re", "n"}``.

    Raises:
        ValueError: empty input, or see :func:`relative_errors`.
    """
    re = relative_errors(pred, true)
    if re.size == 0:
        raise ValueError("no predictions to score")
    diff = np.asarray(pred, dtype=float) - np.asarray(true, dtype=float)
    return {
        "mre": float(np.mean(re)),
        "rmse_s": float(np.sqrt(np.mean(diff**2))),
        "p50_re": float(np.percentile(re, 50)),
        "p90_re": float(np.percentile(re, 90)),
        "n": int(re.size),
    }


def prediction_metrics(frame: pd.DataFrame) -> dict:
    """Iteration and epoch metrics of one method on one split, overall and per family.

    Args:
        frame: one row per test workload with ``family``, ``true_iteration_s``,
            ``pred_iteration_s``, ``true_epoch_s``, ``pred_epoch_s``.

    Returns:
        ``{"iteration": summary, "epoch": summary, "per_family": {family: {"iteration",
        "epoch"}}}`` (a :class:`~scaledl.evaluation.results.MethodErrors`).
    """
    out = _both(frame)
    out["per_family"] = {str(f): _both(g) for f, g in frame.groupby("family", sort=True)}
    return out


def _both(frame: pd.DataFrame) -> dict:
    return {
        "iteration": error_summary(frame["pred_iteration_s"], frame["true_iteration_s"]),
        "epoch": error_summary(frame["pred_epoch_s"], frame["true_epoch_s"]),
    }


def mean_metrics(per_group: list[dict]) -> dict:
    """Unweighted mean of several :func:`prediction_metrics` dicts (e.g. over OOD families).

    Args:
        per_group: metrics dicts with ``iteration`` and ``epoch`` summaries.

    Returns:
        ``{"iteration", "epoch", "n_groups"}``, each summary value the mean over the groups (a
        :class:`~scaledl.evaluation.results.MeanMethodErrors`).

    Raises:
        ValueError: ``per_group`` is empty.
    """
    if not per_group:
        raise ValueError("no groups to average")
    out: dict = {"n_groups": len(per_group)}
    for target in ("iteration", "epoch"):
        keys = ("mre", "rmse_s", "p50_re", "p90_re")
        out[target] = {k: float(np.mean([g[target][k] for g in per_group])) for k in keys}
    return out


def mean_over_seeds(per_seed: list[dict]) -> dict:
    """Mean of several :func:`prediction_metrics` dicts of one method (its model seeds).

    Every error (MRE, RMSE, percentiles) is averaged over the seeds, overall and per family;
    counts (``n``) are the workloads scored, the same for every seed.

    Args:
        per_seed: the metrics of each seed, on the same workloads.

    Returns:
        A dict of the same shape (a :class:`~scaledl.evaluation.results.MethodErrors`).

    Raises:
        ValueError: ``per_seed`` is empty, or the seeds scored different workload counts.
    """
    if not per_seed:
        raise ValueError("no seeds to average")

    def merge(values: list):
        first = values[0]
        if isinstance(first, dict):
            return {k: merge([v[k] for v in values]) for k in first}
        if isinstance(first, int):
            if len(set(values)) != 1:
                raise ValueError(f"seeds scored different workload counts {sorted(set(values))}")
            return first
        return float(np.mean(values))

    return merge(per_seed)
