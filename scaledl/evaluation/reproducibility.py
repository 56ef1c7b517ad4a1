"""How well a label reproduces in an independent launch: the noise floor of every accuracy figure.

A predictor's error against measured labels cannot be expected to fall below the error of one
measurement of a workload as a "prediction" of another, independent measurement of it. The
per-step coefficient of variation inside one launch is not that floor: two launches differ by
model initialisation, memory layout and the state of the machine, which no step of either shows.

For a workload measured ``n >= 2`` times with values ``x_1..x_n``, the *repeat relative error*
is the mean over ordered pairs ``i != j`` of ``|x_i - x_j| / x_j`` (each measurement scored as a
prediction of each other one, the MRE's own definition applied both ways). The *label
reproducibility MRE* is its mean over workloads, overall and per world size. It applies to the
launches of one profile (``repeat``) and to the labels of two whole profiles (``pass``) alike.
"""

from __future__ import annotations

from itertools import permutations

import numpy as np
import pandas as pd

from scaledl.evaluation.targets import target
from scaledl.stats.significance import paired_comparison


def repeat_relative_errors(
    frame: pd.DataFrame, value: str = "iteration_ms", group: str = "repeat"
) -> pd.Series:
    """Mean pairwise relative difference of each workload's repeated measurements.

    Args:
        frame: one row per measurement with ``workload_id``, ``value`` and ``group`` columns.
        value: the measured column (positive).
        group: the column telling repeated measurements apart (``repeat``, a profile pass).

    Returns:
        Per ``workload_id`` with at least two measurements, the mean over ordered pairs of
        ``|x_i - x_j| / x_j`` (a fraction).

    Raises:
        ValueError: a missing column, or a non-positive or non-finite value.
    """
    missing = [c for c in ("workload_id", value, group) if c not in frame.columns]
    if missing:
        raise ValueError(f"label reproducibility: missing column(s) {missing}")
    values = frame[value].to_numpy(dtype=float)
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError(f"label reproducibility: column {value!r} must be finite and > 0")
    result = {}
    for wid, g in frame.groupby("workload_id", sort=True):
        x = g[value].to_numpy(dtype=float)
        if len(x) >= 2:
            result[wid] = float(np.mean([abs(a - b) / b for a, b in permutations(x, 2)]))
    return pd.Series(result, name=f"{value}_repeat_re", dtype=float)


def label_reproducibility(
    frame: pd.DataFrame, world_sizes: dict[str, int], group: str = "repeat"
) -> dict:
    """Label reproducibility MRE of iteration and epoch labels, overall and per world size.

    Args:
        frame: one row per measurement: ``workload_id``, ``group``, ``iteration_ms`` and, when
            present, ``epoch_s``.
        world_sizes: workload id -> world size.
        group: the column telling repeated measurements apart.

    Returns:
        ``{"mre", "median_re", "p90_re", "n_workloads", "epoch_mre", "per_world_size":
        {"<ws>": {"mre", "n_workloads"}}}``; ``{"n_workloads": 0}`` when no workload was
        measured twice.
    """
    it = repeat_relative_errors(frame, "iteration_ms", group)
    if it.empty:
        return {"n_workloads": 0}
    out = {
        "mre": float(it.mean()),
        "median_re": float(it.median()),
        "p90_re": float(np.percentile(it, 90)),
        "n_workloads": int(len(it)),
    }
    if "epoch_s" in frame.columns:
        out["epoch_mre"] = float(repeat_relative_errors(frame, "epoch_s", group).mean())
    ws = it.index.map(lambda w: int(world_sizes[w]))
    out["per_world_size"] = {
        str(k): {"mre": float(v.mean()), "n_workloads": int(len(v))}
        for k, v in it.groupby(ws, sort=True)
    }
    return out


#: Label candidates compared across runs: the per-workload label of each, from its launches.
LABEL_CANDIDATES = {
    "raw": ("iteration_ms_raw", "median"),
    "corrected": ("iteration_ms", "median"),
    "raw_min_launch": ("iteration_ms_raw", "min"),
    "corrected_min_launch": ("iteration_ms", "min"),
    "raw_steps_p10": ("iteration_ms_p10_raw", "median"),
    "corrected_steps_p10": ("iteration_ms_p10", "median"),
}


def workload_label_candidates(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every label candidate of every usable workload of one profile.

    Args:
        tables: the six profile tables of one profile (one run).

    Returns:
        One row per workload: ``workload_id``, ``world_size``, ``launches`` and one column per
        :data:`LABEL_CANDIDATES` key (ms): the median or minimum over the workload's usable
        launches of the raw or host-drift-corrected launch label
        (:func:`scaledl.models.data.launch_labels`: the steps' 5% trimmed mean, or their 10th
        percentile for the ``*_steps_p10`` candidates).
    """
    # models.data loads torch (graph features); reading a profile's labels needs it only here.
    from scaledl.models.data import launch_labels

    runs = launch_labels(tables)
    world = tables["runs"].set_index("run_id")["world_size"]
    runs["world_size"] = runs["run_id"].map(world).astype(int)
    grouped = runs.groupby("workload_id")
    out = grouped.agg(world_size=("world_size", "first"), launches=("run_id", "size"))
    for name, (column, how) in LABEL_CANDIDATES.items():
        out[name] = grouped[column].agg(how)
    return out.reset_index()


def _symmetric_re(a: pd.Series, b: pd.Series) -> pd.Series:
    """``(|a - b| / b + |b - a| / a) / 2``: each run scored as a prediction of the other."""
    return ((a - b).abs() / b + (b - a).abs() / a) / 2.0


def cross_run_reproducibility(
    tables_a: dict[str, pd.DataFrame],
    tables_b: dict[str, pd.DataFrame],
    n_design: int | None = None,
) -> dict:
    """Label MRE between two independent profiles of the same design, per label candidate.

    The honest noise floor: two runs in separate processes, minutes apart, see different states
    of the host, which launches inside one run do not. Candidates are compared on the same
    workloads and the same raw step times, paired (:func:`~scaledl.stats.significance.
    paired_comparison`, BCa bootstrap over workloads), each against ``raw``.

    Args:
        tables_a: the profile tables of run A.
        tables_b: the profile tables of run B.
        n_design: workloads in the design (for the share compared); ``None``: the workloads
            of either run.

    Returns:
        ``{"n_workloads", "coverage", "candidates": {name: {"mre", "median_re", "p90_re",
        "per_world_size": {"<ws>": {"mre", "n_workloads"}}}}, "comparisons": {name:
        Comparison dict vs raw}, "best", "correction": {"a": ..., "b": ...}}``.

    Raises:
        ValueError: fewer than two workloads usable in both runs.
    """
    # models.data loads torch (graph features); reading a profile's labels needs it only here.
    from scaledl.models.data import launch_labels

    a, b = workload_label_candidates(tables_a), workload_label_candidates(tables_b)
    both = a.merge(b, on=["workload_id", "world_size"], suffixes=("_a", "_b"))
    if len(both) < 2:
        raise ValueError(
            f"label reproducibility between runs: {len(both)} workload(s) usable in both runs, "
            "need at least 2 (do the two profiles measure the same design?)"
        )
    union = len(set(a["workload_id"]) | set(b["workload_id"]))
    errors = {
        name: _symmetric_re(both[f"{name}_a"], both[f"{name}_b"]) for name in LABEL_CANDIDATES
    }
    candidates = {}
    for name, re in errors.items():
        candidates[name] = {
            "mre": float(re.mean()),
            "median_re": float(re.median()),
            "p90_re": float(np.percentile(re, 90)),
            "per_world_size": {
                str(int(ws)): {"mre": float(g.mean()), "n_workloads": int(len(g))}
                for ws, g in re.groupby(both["world_size"])
            },
        }
    comparisons = {
        name: paired_comparison(errors[name], errors["raw"], name, "raw").to_dict()
        for name in LABEL_CANDIDATES
        if name != "raw"
    }
    return {
        "n_workloads": int(len(both)),
        "coverage": float(len(both) / (n_design or union)),
        "candidates": candidates,
        "comparisons": comparisons,
        "best": min(candidates, key=lambda n: candidates[n]["mre"]),
        "correction": {
            "a": launch_labels(tables_a).attrs["label_correction"],
            "b": launch_labels(tables_b).attrs["label_correction"],
        },
    }


def _pct(x: float) -> str:
    """A launch MRE as a percentage; NaN (nothing to compare) says why."""
    return "n/a (no workload with two kept launches)" if x != x else f"{x:.1%}"


def label_quality(tables: dict[str, pd.DataFrame]) -> dict:
    """How much of one profile is usable, and whether its labels absorbed the host's drift.

    Args:
        tables: the profile tables of one run.

    Returns:
        ``{"parts", "kept", "kept_share", "not_kept": {"failed", "interference",
        "not_correctable"}, "launch_mre_raw", "launch_mre_corrected", "correction",
        "absorbed", "message"}``: parts are (workload, launch) runs; kept ones are ``ok``,
        not flagged by the guard and inside the correction's validated range; the launch MREs
        are :func:`label_reproducibility` between the launches of the run before and after the
        correction (``nan`` when no workload has two kept launches). ``absorbed`` is false when
        the ``label_quality`` targets of :data:`scaledl.evaluation.targets.TARGETS` are not met
        (too few parts kept, or the corrected launch MRE too high; ``nan`` counts as met);
        ``message`` then says so with the figures and what to do.
    """
    # models.data loads torch (graph features); reading a profile's labels needs it only here.
    from scaledl.models.data import launch_labels

    runs = tables["runs"]
    failed = int((runs["status"] != "ok").sum())
    flagged = runs["interference"].fillna(False).astype(bool) if "interference" in runs else None
    interference = int(((runs["status"] == "ok") & flagged).sum()) if flagged is not None else 0
    launches = launch_labels(tables)
    report = launches.attrs["label_correction"]
    kept = len(launches)

    def launch_mre(column: str) -> float:
        it = repeat_relative_errors(launches, column, "repeat") if kept else pd.Series()
        return float(it.mean()) if len(it) else float("nan")

    raw, corrected = launch_mre("iteration_ms_raw"), launch_mre("iteration_ms")
    n_workloads = launches["workload_id"].nunique()
    share = kept / len(runs) if len(runs) else 0.0
    kept_target, drift_target = target("label_kept_share"), target("label_launch_mre")
    absorbed = kept_target.check(share) and drift_target.check(
        None if np.isnan(corrected) else corrected
    ) in (True, None)
    not_kept = {
        "failed": failed,
        "interference": interference,
        "not_correctable": report["not_correctable"],
    }
    message = (
        f"{kept} of {len(runs)} parts kept ({share:.0%}; not kept: {failed} failed, "
        f"{interference} flagged by the interference guard, {report['not_correctable']} beyond "
        f"the drift correction's validated range); label MRE between launches "
        f"{_pct(corrected)} after the host-drift correction ({_pct(raw)} raw), over "
        f"{n_workloads} workloads"
    )
    if not absorbed:
        message = (
            "the host drifted more than the labels can absorb: " + message + f" (targets: >= "
            f"{kept_target.threshold:.0%} kept, <= {drift_target.threshold:.0%} between "
            "launches). "
            "Accuracy figures of this run sit on noisy labels. What to do: profile again when "
            "the host is quieter (flagged parts are re-measured on resume), stop other work on "
            "the host, or raise the preset's profiling `repeats`."
        )
    return {
        "parts": int(len(runs)),
        "kept": int(kept),
        "kept_share": float(share),
        "not_kept": not_kept,
        "launch_mre_raw": raw,
        "launch_mre_corrected": corrected,
        "correction": report,
        "absorbed": bool(absorbed),
        "message": message,
    }
