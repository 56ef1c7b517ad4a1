"""The Pareto front of time versus cost, computed over all candidates or chunk by chunk.

A candidate is dominated when another has time and cost no larger and one of them smaller; of
duplicates the first (lowest index) is kept. Times and costs compare as ranks of tie groups
(:func:`tie_ranks`): values within a relative ``TIE_RTOL`` = 1e-6 of their neighbour in sorted
order are one value. A grid predicted chunk by chunk batches the predictor's float32 GEMMs
differently from the whole grid, so two candidates with the same prediction (one node or two,
where nothing between them differs) differ by float noise, measured at up to 2.2e-7 relative on
this project's CI host; without ties which of them is on the front (and first in the table, and
chosen) would depend on the chunking. Rounding to a fixed resolution (the previous rule, 2**-30)
does not do it: two noisy copies of one value straddle a rounding boundary whatever its width.
:func:`pareto_sweep` sorts by (time, cost, index) and keeps a candidate when its cost is below
every cost before it (Kung, Luccio and Preparata, J. ACM 1975), vectorised as a running minimum.
:class:`ParetoFront` keeps the front of the candidates seen so far: the front of (front so far +
a new chunk) is the front of everything seen, since a candidate dominated in a subset stays
dominated, so a planner's grid is swept chunk by chunk, never whole.
"""

from __future__ import annotations

import numpy as np

#: Relative gap below which two neighbouring times (or costs) are one value (:func:`tie_ranks`);
#: float32 noise is about 1.2e-7 per operation (module docstring).
TIE_RTOL = 1e-6


def tie_ranks(values) -> np.ndarray:
    """Dense ranks of values, neighbours within ``TIE_RTOL`` of each other sharing a rank.

    Sorted ascending, a value starts a new rank when it exceeds the one before it by more than
    ``TIE_RTOL`` times the larger magnitude (chained: a run of values each within the tolerance
    of the next is one rank). Equal infinities tie; NaNs share the last rank.

    Args:
        values: shape (n,), finite or not.

    Returns:
        Int64 array, shape (n,): 0 for the smallest group, increasing with the value.
    """
    values = np.asarray(values, dtype=float).reshape(-1)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    with np.errstate(invalid="ignore"):
        gap = np.diff(ordered)
        scale = np.maximum(np.abs(ordered[1:]), np.abs(ordered[:-1]))
        same = (ordered[1:] == ordered[:-1]) | (np.isfinite(gap) & (gap <= TIE_RTOL * scale))
    same |= np.isnan(ordered[1:]) & np.isnan(ordered[:-1])
    ranks = np.empty(len(values), dtype=np.int64)
    ranks[order] = np.r_[0, np.cumsum(~same)] if len(values) else []
    return ranks


def pareto_sweep(time: np.ndarray, cost: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Which candidates are non-dominated (ties in time and cost: the lowest index wins).

    Args:
        time: shape (n,).
        cost: shape (n,).
        index: distinct candidate numbers, shape (n,).

    Returns:
        Bool array, shape (n,).
    """
    cost = tie_ranks(cost)
    order = np.lexsort((index, cost, tie_ranks(time)))
    sorted_cost = cost[order]
    before = np.minimum.accumulate(np.r_[np.inf, sorted_cost[:-1]]) if len(order) else sorted_cost
    mask = np.zeros(len(order), dtype=bool)
    mask[order] = sorted_cost < before
    return mask


class ParetoFront:
    """The front of the eligible candidates added so far (module docstring)."""

    def __init__(self) -> None:
        self._time = np.zeros(0)
        self._cost = np.zeros(0)
        self._index = np.zeros(0, dtype=np.int64)

    def add(self, time: np.ndarray, cost: np.ndarray, eligible: np.ndarray, offset: int) -> None:
        """Add a chunk of candidates numbered ``offset, offset + 1, ...``.

        Args:
            time: shape (n,).
            cost: shape (n,).
            eligible: shape (n,) bool; ineligible candidates are never on the front.
            offset: the number of the chunk's first candidate.
        """
        keep = np.flatnonzero(np.asarray(eligible, dtype=bool))
        t = np.r_[self._time, np.asarray(time, dtype=float)[keep]]
        c = np.r_[self._cost, np.asarray(cost, dtype=float)[keep]]
        i = np.r_[self._index, keep + offset]
        on = pareto_sweep(t, c, i)
        self._time, self._cost, self._index = t[on], c[on], i[on]

    def mask(self, n: int) -> np.ndarray:
        """Bool array of shape (n,): which of the ``n`` candidates are on the front."""
        out = np.zeros(n, dtype=bool)
        out[self._index] = True
        return out
