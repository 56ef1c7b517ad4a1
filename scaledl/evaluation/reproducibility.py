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
