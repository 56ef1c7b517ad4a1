"""Ranking of layouts: Kendall's tau per model between measured and predicted times."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import kendalltau

from scaledl.workloads.identity import architecture_key
from scaledl.workloads.parallelism import layout_label
from scaledl.workloads.spec import Workload


def model_label(w: Workload) -> str:
    """The model a ranking groups layouts by, in words: family, width, depth and batch."""
    return f"{w.family} h{w.hidden_size} L{w.num_layers} b{w.batch_size}"


def kendall_by_model(
    wlist: list[Workload], measured: np.ndarray, predictions: dict[str, np.ndarray]
) -> list[dict[str, Any]]:
    """Kendall's tau per model (architecture and batch) over its profiled layouts.

    Args:
        wlist: the workloads.
        measured: their measured iteration times, shape (len(wlist),).
        predictions: ``{name: predicted times}`` (NaN: not predicted), each (len(wlist),); a
            model is ranked over the workloads the first of them predicts.

    Returns:
        One row per model with at least three predicted layouts: ``model``, ``layouts`` and
        ``tau_<name>`` (``None`` where undefined).
    """
    groups: dict[str, list[int]] = {}
    for i, w in enumerate(wlist):
        groups.setdefault(f"{architecture_key(w)}|{w.batch_size}", []).append(i)
    first = next(iter(predictions.values()))
    out = []
    for members in groups.values():
        members = [i for i in members if np.isfinite(first[i])]
        if len(members) < 3:
            continue
        row = {"model": model_label(wlist[members[0]]),
               "layouts": [layout_label(wlist[i]) for i in members]}  # fmt: skip
        for name, pred in predictions.items():
            tau = kendalltau(pred[members], measured[members]).statistic
            row[f"tau_{name}"] = None if math.isnan(tau) else float(tau)
        out.append(row)
    return out
