"""Fitting the collective cost model on measured collective timings (SciPy's NNLS).

The model, :class:`~scaledl.parallel.collectives.CollectiveModel`, predicts with NumPy only; its
fit lives here so that predicting a layout does not import SciPy.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from scaledl.models.allreduce_time import AllReduceTime
from scaledl.parallel.collectives import (
    COLLECTIVES,
    RELATED,
    TIMING_COLUMNS,
    CollectiveModel,
    bytes_factor,
    timed_blocking,
)


def fit_collective_model(
    timings: pd.DataFrame | None,
    allreduce: AllReduceTime | None,
    related: bool = False,
) -> CollectiveModel:
    """Fit each collective on its measured rows; derive the others from ``allreduce``.

    All-reduce rows timed blocking (:func:`~scaledl.parallel.collectives.timed_blocking`) fit
    ``blocking_all_reduce``, the others ``all_reduce``; without blocking rows
    ``blocking_all_reduce`` takes ``all_reduce``'s parameters
    (:mod:`scaledl.parallel.collectives`).

    Args:
        timings: ``collective_timings`` rows
            (:data:`~scaledl.parallel.collectives.TIMING_COLUMNS`), or ``None``; rows with
            ``group_size`` 1 are skipped (nothing is sent).
        allreduce: the fitted all-reduce model (or ``None``) for collectives without data.
        related: a collective without rows first takes the (alpha, beta) of a measured
            collective of the same message pattern
            (:data:`~scaledl.parallel.collectives.RELATED`: one message of ``B`` bytes for
            send, recv and broadcast; the half ring for all-gather and reduce-scatter),
            ``source`` ``"from <collective>"``; only then the
            all-reduce's. A gloo all-reduce of DDP's buckets carries a fixed cost of
            milliseconds that a point-to-point transfer of the same host does not.

    Returns:
        The model.

    Raises:
        ValueError: a missing column, an unknown collective, or a non-positive size or
            time (naming the field and the value).
    """
    model = CollectiveModel.from_allreduce(allreduce)
    if timings is None or timings.empty:
        return model
    missing = [c for c in TIMING_COLUMNS if c not in timings]
    if missing:
        raise ValueError(f"collective_timings: missing column(s) {missing}")
    rows = timings[timings["group_size"] > 1]
    rows = rows.assign(collective=np.where(timed_blocking(rows), "blocking_all_reduce",
                                           rows["collective"].to_numpy()))  # fmt: skip
    for name in ("collective_bytes", "collective_ms"):
        bad = rows[~(rows[name] > 0)]
        if len(bad):
            raise ValueError(f"collective_timings: field {name!r} value {bad[name].iloc[0]!r}")
    for collective, group in rows.groupby("collective"):
        if collective not in COLLECTIVES:
            raise ValueError(f"collective_timings: field 'collective' value {collective!r}")
        if len(group) < 2:
            continue
        x = bytes_factor(collective, group["group_size"]) * group["collective_bytes"]
        y = group["collective_ms"].to_numpy(dtype=float)
        design = np.column_stack([np.ones(len(y)), np.asarray(x, dtype=float)]) / y[:, None]
        coef, _ = nnls(design, np.ones(len(y)))  # relative-error weighting, as all-reduce
        model.params[collective] = (float(coef[0]), float(coef[1]))
        model.source[collective] = "measured"
    if model.source["blocking_all_reduce"] != "measured":
        model.params["blocking_all_reduce"] = model.params["all_reduce"]
        if model.source["all_reduce"] == "measured":
            model.source["blocking_all_reduce"] = "from all_reduce"
    if related:
        for collective, others in RELATED.items():
            if model.source[collective] == "measured":
                continue
            donor = next((o for o in others if model.source[o] == "measured"), None)
            if donor is not None:
                model.params[collective] = model.params[donor]
                model.source[collective] = f"from {donor}"
    return model
