"""Alpha-beta (latency-bandwidth) model of a ring all-reduce.

A ring all-reduce of ``n`` bytes over ``p`` workers sends ``2(p-1)/p * n`` bytes per worker
(reduce-scatter then all-gather) after a start-up latency, so its time is

    t_ms = alpha_ms + 2(p-1)/p * n / bandwidth_bytes_per_ms

(Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH",
IJHPCA 2005; Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", JPDC 2009). ``alpha`` and ``1/bandwidth`` are fitted by non-negative least squares
on the regressors ``[1, 2(p-1)/p * n]``. By default every equation is divided by the measured
time (``weighting="relative"``), so the fit minimises the squared *relative* error: otherwise the
few largest messages (milliseconds) dominate and the latency-bound small ones (microseconds) are
predicted with errors of several hundred percent.

Two refinements, both optional and off by default:

* ``per_topology=True`` fits one (alpha, bandwidth) for single-node groups and one for groups
  spanning several nodes (``num_nodes > 1``): NVLink and the inter-node network differ by an
  order of magnitude.
* ``size_breakpoints_bytes=(b1, b2, ...)`` fits one (alpha, bandwidth) per message-size regime
  (``n < b1``, ``b1 <= n < b2``, ...): NCCL switches protocol (LL, LL128, Simple) and algorithm with
  the message size, so a single line cannot follow both the latency-bound and the
  bandwidth-bound end. :func:`select_size_breakpoints` picks them on training data.

The fitted state and the prediction are :class:`~scaledl.models.allreduce_time.AllReduceTime`
(NumPy only, what a loaded predictor holds); :class:`AlphaBetaAllReduce` adds the fit.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.optimize import nnls

from scaledl.models.allreduce_time import (
    AllReduceGroup,
    AllReduceParams,
    AllReduceTime,
    as_1d,
    ring_bytes_factor,
)

__all__ = [
    "AllReduceGroup",
    "AllReduceParams",
    "AllReduceTime",
    "AlphaBetaAllReduce",
    "mean_relative_error",
    "ring_bytes_factor",
    "select_size_breakpoints",
]


def _fit_line(x: np.ndarray, y: np.ndarray, weighting: str) -> tuple[float, float]:
    """NNLS of ``y ~ a + b x``; returns ``(a, b)``."""
    design = np.column_stack([np.ones_like(x), x])
    w = 1.0 / y if weighting == "relative" else np.ones_like(y)
    coef, _ = nnls(design * w[:, None], y * w)
    return float(coef[0]), float(coef[1])


class AlphaBetaAllReduce(AllReduceTime):
    """:class:`~scaledl.models.allreduce_time.AllReduceTime` with its fit.

    Args: as :class:`~scaledl.models.allreduce_time.AllReduceTime`.

    Example:
        >>> m = AlphaBetaAllReduce().fit([1e6, 2e6, 4e6], [8, 8, 8], [0.02, 0.03, 0.05])
        >>> float(m.predict_ms(1e6, 1)[0])
        0.0
    """

    # ----------------------------------------------------------------- fitting
    def fit(
        self,
        allreduce_bytes: Any,
        world_size: Any,
        allreduce_ms: Any,
        num_nodes: Any = None,
    ) -> AlphaBetaAllReduce:
        """Fit alpha and bandwidth by (weighted) non-negative least squares.

        Args:
            allreduce_bytes: message size per worker in bytes (> 0).
            world_size: number of workers (>= 2: a single worker does not communicate).
            allreduce_ms: measured time in milliseconds (> 0).
            num_nodes: number of nodes spanned by each group (>= 1); used by ``per_topology`` and
                ``per_configuration``. ``None`` means one node.

        Returns:
            ``self``.

        Raises:
            ValueError: arrays of different lengths, fewer than 2 points (overall or in a fitted
                group), or a non-positive / non-finite value (the message names the field).
        """
        nbytes = as_1d("allreduce_bytes", allreduce_bytes)
        p = as_1d("world_size", world_size)
        t = as_1d("allreduce_ms", allreduce_ms)
        nodes = np.ones_like(p) if num_nodes is None else as_1d("num_nodes", num_nodes)
        if not (len(nbytes) == len(p) == len(t) == len(nodes)):
            raise ValueError(
                "allreduce_bytes, world_size, allreduce_ms (and num_nodes) must have equal "
                f"lengths; got {len(nbytes)}, {len(p)}, {len(t)}, {len(nodes)}"
            )
        if len(t) < 2:
            raise ValueError(f"need at least 2 points to fit alpha and beta; got {len(t)}")
        if (p < 2).any():
            raise ValueError(
                f"world_size must be >= 2 to fit (got {p[p < 2][0]!r}); a single worker does "
                "not communicate"
            )
        groups = [self._group(w, n) for w, n in zip(p, nodes, strict=True)]
        regime = self._regime(nbytes)
        pairs = list(zip(groups, regime.tolist(), strict=True))
        ids = {key: i for i, key in enumerate(sorted(set(pairs)))}
        key_id = np.array([ids[key] for key in pairs])
        x = ring_bytes_factor(p) * nbytes
        params: dict[tuple[tuple[int, ...], int], tuple[float, float]] = {}
        for (g, r), i in ids.items():
            mask = key_id == i
            if mask.sum() < 2:
                raise ValueError(
                    f"group {g}, size regime {r} has {int(mask.sum())} point(s); need at least 2"
                )
            params[(g, int(r))] = _fit_line(x[mask], t[mask], self.weighting)
        self.params_ = params
        self._set_summary()
        return self


def mean_relative_error(pred: Any, true: Any) -> float:
    """Mean of ``|pred - true| / true``.

    Args:
        pred: predictions.
        true: measurements (> 0).

    Returns:
        The mean relative error (0.1 = 10 %).
    """
    pred = np.asarray(pred, dtype=float)
    true = np.asarray(true, dtype=float)
    return float(np.mean(np.abs(pred - true) / true))


def select_size_breakpoints(
    allreduce_bytes: Any,
    world_size: Any,
    allreduce_ms: Any,
    num_nodes: Any = None,
    *,
    per_topology: bool = False,
    per_configuration: bool = False,
    max_breakpoints: int = 2,
    candidates_bytes: Sequence[float] | None = None,
    min_points: int = 4,
) -> tuple[float, ...]:
    """Pick message-size breakpoints minimising the training mean relative error.

    Exhaustive search over combinations of up to ``max_breakpoints`` candidates (default: powers
    of 4 from 4 KiB to 64 MiB), keeping only splits that leave at least ``min_points`` points in
    every regime of every topology group. Uses only the data given, so pass the training split.

    Args:
        allreduce_bytes: message sizes (bytes).
        world_size: workers.
        allreduce_ms: measured times (ms).
        num_nodes: nodes spanned, or ``None``.
        per_topology: passed to :class:`AlphaBetaAllReduce`.
        per_configuration: passed to :class:`AlphaBetaAllReduce`.
        max_breakpoints: largest number of breakpoints tried.
        candidates_bytes: candidate breakpoints.
        min_points: smallest regime size allowed.

    Returns:
        The best breakpoints (possibly empty: no split beats the single line).
    """
    nbytes = as_1d("allreduce_bytes", allreduce_bytes)
    t = as_1d("allreduce_ms", allreduce_ms)
    nodes = None if num_nodes is None else np.asarray(num_nodes, dtype=float)
    cands = (
        [4096.0 * 4**k for k in range(8)] if candidates_bytes is None else list(candidates_bytes)
    )
    probe = AlphaBetaAllReduce(per_topology=per_topology, per_configuration=per_configuration)
    world = np.asarray(world_size, dtype=float)
    node_arr = np.ones_like(world) if nodes is None else nodes
    group_ids = [probe._group(w, n) for w, n in zip(world, node_arr, strict=True)]
    labels = {g: i for i, g in enumerate(sorted(set(group_ids)))}
    groups = np.array([labels[g] for g in group_ids])

    def score(bps: tuple[float, ...]) -> float:
        regime = np.searchsorted(np.asarray(bps), nbytes, side="right")
        for g in np.unique(groups):
            counts = np.bincount(regime[groups == g], minlength=len(bps) + 1)
            if (counts < min_points).any():
                return math.inf
        model = AlphaBetaAllReduce(
            per_topology=per_topology,
            per_configuration=per_configuration,
            size_breakpoints_bytes=bps,
        )
        model.fit(nbytes, world_size, t, nodes)
        return mean_relative_error(model.predict_ms(nbytes, world_size, nodes), t)

    best: tuple[float, ...] = ()
    best_score = score(best)
    for k in range(1, max_breakpoints + 1):
        for bps in itertools.combinations(sorted(cands), k):
            s = score(bps)
            if s < best_score - 1e-12:
                best, best_score = bps, s
    return best
