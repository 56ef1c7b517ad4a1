"""Every comparison of two methods on a split, paired, over seeds and label repeats, with a verdict.

Two methods evaluated on one split are compared with
:func:`~scaledl.stats.significance.paired_comparison` (paired bootstrap, BCa, 95%): the unit
is the test workload, and each workload's relative error of a method is averaged over

* the method's **model seeds** (the GNN's initialisation; a deterministic method has the same
  prediction for every seed), and
* the workload's **label repeats**: the relative error against every independent launch's label
  (``ProfileData.run_labels``), not only against their median, so a workload whose launches
  disagree carries that disagreement into both methods' errors.

The compared MREs are therefore errors against single launches; they sit slightly above the split
tables' MREs (against the median label of the launches). For leave-one-family-out the test
workloads of all folds are pooled and weighted ``1 / (workloads of the family)``: the compared
MRE is the mean over families, as the leave-one-family-out tables report it.

Which pairs (:func:`comparison_pairs`): ScaleDL against every other method (the baselines and
its ablations), the critical path against the sum (is the overlap-aware prior better than the
plain sum?) and the sum-prior GNN against the sum (did the earlier GNN beat its own prior?).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scaledl.stats.significance import paired_comparison

#: Comparisons beyond "scaledl against every other method": (A, B) pairs, when both ran.
EXTRA_PAIRS = (("critical_path", "additive"), ("scaledl_sum_prior", "additive"))


#: Fewest test workloads a split needs for its paired comparisons.
MIN_WORKLOADS = 2


def comparison_pairs(methods: list[str]) -> list[tuple[str, str]]:
    """The (A, B) pairs compared among ``methods`` (see the module docstring).

    Args:
        methods: the methods evaluated.

    Returns:
        ``("scaledl", m)`` for every other method when ``scaledl`` ran, then the
        :data:`EXTRA_PAIRS` whose two methods ran.
    """
    pairs = [("scaledl", m) for m in methods if m != "scaledl"] if "scaledl" in methods else []
    return pairs + [(a, b) for a, b in EXTRA_PAIRS if a in methods and b in methods]


def repeat_errors(
    frame: pd.DataFrame, run_labels: pd.DataFrame, method: str, workload_ids: list[str]
) -> tuple[np.ndarray, float]:
    """Relative errors of one method per model seed and workload, averaged over label repeats.

    Args:
        frame: predictions of one split: ``method``, ``seed``, ``workload_id``,
            ``pred_iteration_s``.
        run_labels: one row per launch: ``workload_id``, ``iteration_ms``.
        method: the method.
        workload_ids: the workloads, in the column order wanted.

    Returns:
        ``(errors, label_repeats)``: errors of shape (n_seeds, n_workloads), each the mean over
        the workload's launches of ``|pred - label| / label``; and the mean number of launches
        per workload.

    Raises:
        ValueError: the method has no prediction of a workload for some seed, or a workload has
            no launch label.
    """
    rows = frame[frame["method"] == method]
    pred = rows.pivot(index="seed", columns="workload_id", values="pred_iteration_s")
    missing = [w for w in workload_ids if w not in pred.columns]
    if missing or pred[workload_ids].isna().to_numpy().any():
        raise ValueError(
            f"method {method!r}: no prediction of {missing[:3] or 'some workloads'} for every seed"
        )
    labels = run_labels[run_labels["workload_id"].isin(set(workload_ids))]
    per_workload = labels.groupby("workload_id")["iteration_ms"].apply(
        lambda v: v.to_numpy(dtype=float) / 1000.0
    )
    absent = [w for w in workload_ids if w not in per_workload.index]
    if absent:
        raise ValueError(f"no launch label (run_labels) for workload(s) {absent[:3]}")
    p = pred[workload_ids].to_numpy(dtype=float)  # (n_seeds, n_workloads)
    errors = np.empty_like(p)
    for j, w in enumerate(workload_ids):
        launches = per_workload[w]
        errors[:, j] = np.mean(np.abs(p[:, j, None] - launches) / launches, axis=1)
    counts = [len(per_workload[w]) for w in workload_ids]
    return errors, float(np.mean(counts))


def seed_mres(frame: pd.DataFrame) -> dict[str, list[float]]:
    """Iteration MRE against the (median) label per method and model seed.

    Args:
        frame: predictions: ``method``, ``seed``, ``pred_iteration_s``, ``true_iteration_s``.

    Returns:
        method -> MREs in seed order.
    """
    re = (frame["pred_iteration_s"] - frame["true_iteration_s"]).abs() / frame["true_iteration_s"]
    table = re.groupby([frame["method"], frame["seed"]], sort=False).mean()
    methods = dict.fromkeys(frame["method"])
    return {m: [float(v) for v in table.loc[m].sort_index()] for m in methods}


def compare_split(
    frame: pd.DataFrame,
    run_labels: pd.DataFrame,
    weights: pd.Series | None = None,
    seed: int = 0,
) -> dict:
    """Every comparison of :func:`comparison_pairs` on one split (or pooled folds).

    Args:
        frame: predictions of the split: ``method``, ``seed``, ``workload_id``,
            ``pred_iteration_s``, ``true_iteration_s``; every method predicted every workload
            for each of its seeds.
        run_labels: one row per launch (``workload_id``, ``iteration_ms``).
        weights: per-workload weight (indexed by ``workload_id``), ``None`` for equal weights.
        seed: seed of the bootstrap.

    Returns:
        ``{"n_workloads", "seeds", "label_repeats", "mre_per_seed", "comparisons"}`` (a
        ``SplitComparisons`` section of ``metrics.json``); ``comparisons`` is empty when the
        split has fewer than 2 test workloads (a paired interval needs 2; a small profile, or
        one whose other workloads were quarantined, can leave a family or the extrapolation
        split with one), and the report says so.
    """
    methods = list(dict.fromkeys(frame["method"]))
    workload_ids = sorted(set(frame["workload_id"]))
    w = None if weights is None else weights.loc[workload_ids].to_numpy(dtype=float)
    errors, repeats = {}, 1.0
    for method in methods:
        errors[method], repeats = repeat_errors(frame, run_labels, method, workload_ids)
    comparisons = [
        paired_comparison(
            errors[a], errors[b], a, b, seed=seed, weights=w, label_repeats=repeats
        ).model_dump()
        for a, b in comparison_pairs(methods)
        if len(workload_ids) >= MIN_WORKLOADS
    ]
    return {
        "n_workloads": len(workload_ids),
        "seeds": int(frame["seed"].nunique()),
        "label_repeats": repeats,
        "mre_per_seed": seed_mres(frame),
        "comparisons": comparisons,
    }
