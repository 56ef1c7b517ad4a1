"""Evaluation of the layout recipe on profiled layouts: leave one layout out, ranking.

On a profile dataset with data-parallel and layout workloads (the layout profiler's validated
tables, with ``collective_timings``), each **layout kind** (:func:`layout_kind`: ``fsdp`` for
any sharding, ``tp``, ``pp``) and the data-parallel workloads (``ddp``, ranked but without a
target) are held out in turn; the product's layout recipe :data:`RECIPE`
(``plain_layers_overlap``, :mod:`scaledl.parallel.recipe`, the recipe the layout calibration
fits) is fitted on the other kinds' workloads only: its layer-wise models on every training
workload's layer timings less those that hold the layout's own communication, its collective
model, its per-lane overlap factors and the **learned correction** (a ridge regression,
``alpha = 1``, fixed a priori, of ``log(measured / composed)`` on the composition's parts).
Each fold reports the composed and corrected MRE on the held-out kind and their paired
comparison (:func:`~scaledl.stats.significance.paired_comparison`, bootstrap 95% intervals).

The **targets** (the ``layouts_*`` rows of :data:`scaledl.evaluation.targets.TARGETS`) are
judged on the recipe: the corrected MRE of each held-out layout kind, and the worst model's
Kendall tau (``scipy.stats.kendalltau``) between predicted and measured iteration time over
the layouts profiled for each model (same architecture and batch), each layout's prediction
taken from the fold that held its kind out.

How the recipe was chosen among other variants (the uncalibrated method, fold-trained layer
models with and without overlap factors, a nested selection, a GNN correction): their
figures are kept in ``docs/results/layouts.json`` and reproduced by
``benchmarks/history/layout_variants.py``; the story in ``docs/history/``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

from scaledl.evaluation.targets import TargetResult, target
from scaledl.models.data import (
    ProfileDataError,
)
from scaledl.parallel.ranking import kendall_by_model, model_label
from scaledl.parallel.recipe import RECIPE
from scaledl.parallel.training import load_layout_context
from scaledl.stats.significance import paired_comparison
from scaledl.workloads.parallelism import layout_label

KINDS = ("fsdp", "tp", "pp")
#: The variant judged against the targets: the product's recipe.
HEADLINE = RECIPE


def evaluate_layouts(directory: Path, seed: int = 0) -> dict[str, Any]:
    """Leave-one-layout-out MRE of the recipe, its paired comparisons and the ranking tau.

    Args:
        directory: a validated profile dataset with data-parallel and layout workloads.
        seed: seed of the bootstrap.

    Returns:
        The JSON-safe result: ``dataset``, ``measured_utc`` (:func:`measured_window`),
        ``n_workloads``, ``n_by_kind``, ``headline`` (:data:`HEADLINE`), ``folds`` (per
        held-out kind: workloads, the fitted parts' sources, MREs and
        ``corrected_vs_composed``), ``ranking`` (Kendall tau per model), ``targets`` (met or
        not) and ``workloads`` (per workload its label and the recipe's composed and corrected
        predictions, ``<recipe>_composed_ms`` / ``<recipe>_corrected_ms``).

    Raises:
        scaledl.models.data.ProfileDataError: unreadable tables or no usable workload.
        ValueError: no data-parallel workload to fit the layer-wise models on, or no layout.
    """
    ctx = load_layout_context(directory)
    n = len(ctx.ids)
    scope = np.arange(n)
    pred = {"composed": np.full(n, np.nan), "corrected": np.full(n, np.nan)}
    folds = {}
    for kind in [k for k in ("ddp", *KINDS) if k in ctx.kind]:
        held = ctx.kind == kind
        composed, corrected, info, _ = ctx.candidates(scope, held, kind, names=(RECIPE,))[RECIPE]
        pred["composed"][held], pred["corrected"][held] = composed[held], corrected[held]
        m = ctx.measured[held]
        err = {name: np.abs(v[held] - m) / m for name, v in pred.items()}
        folds[kind] = {"n_workloads": int(held.sum()), **info,
                       "mre_composed": float(err["composed"].mean()),
                       "mre_corrected": float(err["corrected"].mean())}  # fmt: skip
        if held.sum() >= 2:
            folds[kind]["corrected_vs_composed"] = paired(err["corrected"], err["composed"], seed)
    ranking = {"models": kendall_by_model(ctx.wlist, ctx.measured, pred)}
    rows = [{"workload_id": wid, "layout": layout_label(w), "model": model_label(w),
             "kind": str(kind), "measured_ms": float(t),
             **{f"{HEADLINE}_{name}_ms": float(v[i]) for name, v in pred.items()}}
            for i, (wid, w, kind, t) in enumerate(zip(ctx.ids, ctx.wlist, ctx.kind, ctx.measured,
                                                      strict=True))]  # fmt: skip
    return {
        "dataset": str(directory),
        "measured_utc": measured_window(ctx.tables, str(directory)),
        "n_workloads": n,
        "n_by_kind": {k: int((ctx.kind == k).sum()) for k in ("ddp", *KINDS)},
        "headline": HEADLINE,
        "folds": folds,
        "ranking": ranking,
        "targets": [t.to_dict() for t in layout_targets({"folds": folds, "ranking": ranking})],
        "workloads": rows,
    }


def evaluate_headline(directory: Path, main: dict[str, Any] | None = None) -> dict[str, Any]:
    """A further profile's targets: :func:`evaluate_layouts` on it, summarised.

    What ``scaledl evaluate-layouts --repeat/--across`` stores for every further profile of
    the same workloads, so that a target is judged on several profiles, not one (the host
    drifts between them).

    Args:
        directory: a validated profile dataset with data-parallel and layout workloads.
        main: the main profile's :func:`evaluate_layouts` result: with it, ``measured_tau``
            is added (:func:`measured_agreement`).

    Returns:
        ``{"dataset", "measured_utc", "n_workloads", "headline", "targets"}`` and
        ``measured_tau``.

    Raises:
        scaledl.models.data.ProfileDataError: unreadable tables or no usable workload.
        ValueError: no data-parallel workload to fit the layer-wise models on, or no layout.
    """
    return profile_summary(evaluate_layouts(directory), main)


def profile_summary(result: dict[str, Any], main: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a further profile's evaluation adds to the main one: its dataset and targets.

    Args:
        result: an :func:`evaluate_layouts` result of another profile of the same workloads.
        main: the main profile's result: with it, ``measured_tau`` is added
            (:func:`measured_agreement`).

    Returns:
        ``{"dataset", "measured_utc", "n_workloads", "headline", "targets"}`` and
        ``measured_tau``.
    """
    keys = ("dataset", "measured_utc", "n_workloads", "headline", "targets")
    out = {k: result[k] for k in keys}
    if main is not None:
        out["measured_tau"] = measured_agreement(main, result)
    return out


def paired(a: np.ndarray, b: np.ndarray, seed: int) -> dict[str, Any]:
    """Paired comparison of two per-workload relative errors, JSON-safe.

    Args:
        a: relative errors, shape (n,).
        b: the other method's on the same workloads, shape (n,).
        seed: seed of the bootstrap.

    Returns:
        ``mre_difference`` (``a - b``), the bootstrap 95% ``ci_low`` / ``ci_high`` and the
        ``verdict`` (:func:`~scaledl.stats.significance.paired_comparison`).
    """
    c = paired_comparison(a, b, "a", "b", seed=seed)
    return {"mre_difference": float(c.mre_difference), "ci_low": float(c.ci_low),
            "ci_high": float(c.ci_high), "verdict": str(c.verdict)}  # fmt: skip


def measured_window(tables: dict[str, pd.DataFrame], source: str) -> list[str]:
    """When a profile was measured: the first launch's start and the last one's end.

    Args:
        tables: the validated tables; ``runs`` with ``started_at`` / ``finished_at`` (ISO 8601,
            UTC, as the profiler writes them).
        source: the dataset, named in the error.

    Returns:
        ``[first started_at, last finished_at]``.

    Raises:
        scaledl.models.data.ProfileDataError: no ``runs`` table or no timestamp in it.
    """
    runs = tables.get("runs")
    if runs is None or not {"started_at", "finished_at"} <= set(runs) or runs.empty:
        raise ProfileDataError(f"{source}/runs: no started_at / finished_at to date the profile by")
    return [str(runs["started_at"].min()), str(runs["finished_at"].max())]


def measured_agreement(main: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Kendall's tau of the layout ranking between two profiles' *measured* iteration times.

    The ranking target compares a prediction with one profile's labels; two profiles of the
    same workloads, minutes apart, do not rank them alike either where layouts lie within the
    launch-to-launch noise (on the committed profiles GPipe with 4 micro-batches, 1F1B and
    DDP within 5-15% of each other). The worst model's tau between the two measurements is
    the resolution of the target on these labels: a prediction cannot be expected to agree
    with one profile better than another profile does.

    Args:
        main: an :func:`evaluate_layouts` result.
        other: the result of another profile of the same workloads.

    Returns:
        ``{"models": [{"model", "tau"}], "worst": float | None}`` over the models both
        profiles rank (the same workload ids; ``None``: no model with three layouts).

    Raises:
        ValueError: a workload whose ``model`` differs between the two results.
    """
    theirs = {r["workload_id"]: r for r in other["workloads"]}
    groups: dict[str, list[tuple[float, float]]] = {}
    for row in main["workloads"]:
        twin = theirs.get(row["workload_id"])
        if twin is None:
            continue
        if twin["model"] != row["model"]:
            raise ValueError(f"workload_id {row['workload_id']!r}: model {row['model']!r} in "
                             f"one profile, {twin['model']!r} in the other")  # fmt: skip
        groups.setdefault(row["model"], []).append((row["measured_ms"], twin["measured_ms"]))
    models = []
    for model, pairs in groups.items():
        if len(pairs) < 3:
            continue
        a, b = np.array(pairs).T
        tau = kendalltau(a, b).statistic
        models.append({"model": model, "tau": None if math.isnan(tau) else float(tau)})
    taus = [m["tau"] for m in models if m["tau"] is not None]
    return {"models": models, "worst": min(taus) if taus else None}


def layout_targets(head: dict[str, Any]) -> list[TargetResult]:
    """The targets judged on a recipe's leave-one-layout-out folds and ranking.

    Args:
        head: ``{"folds": {kind: {"mre_composed", "mre_corrected", ...}}, "ranking":
            {"models": [{"tau_corrected", ...}]}}`` (:func:`evaluate_layouts`).

    Returns:
        One entry per held-out layout kind (``value`` the corrected MRE, ``extra``
        ``composed``: the uncorrected MRE) and the worst model's Kendall tau.
    """
    mre, tau = target("layouts_mre"), target("layouts_tau")
    targets = [
        mre.result(f"{f['mre_corrected']:.1%} (composed {f['mre_composed']:.1%})",
                   mre.judge(head, kind=k)[1], value=f["mre_corrected"],
                   extra={"composed": f["mre_composed"]}, kind=k)
        for k, f in head["folds"].items() if k in KINDS
    ]  # fmt: skip
    worst, met = tau.judge(head)
    if worst is not None:
        targets.append(tau.result(f"{worst:.2f}", met, value=worst))
    return targets
