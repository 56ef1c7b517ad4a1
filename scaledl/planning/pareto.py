"""The Pareto front of time versus cost, computed over all candidates or chunk by chunk.

A candidate is dominated when another has time and cost no larger and one of them smaller; of
duplicates the first (lowest index) is kept. Times and costs compare at a relative resolution of
2**-30 (about 1e-9, :func:`resolved`): a grid predicted chunk by chunk batches its GEMMs
differently from the whole grid, so two candidates with the same prediction (one node or two,
where nothing between them differs) can differ by float noise, and without it which of them is
on the front (and first in the table, and chosen) would depend on the chunking.
:func:`pareto_sweep` sorts by (time, cost, index) and keeps a candidate when its cost is below
every cost before it (Kung, Luccio and Preparata, J. ACM 1975), vectorised as a running minimum.
:class:`ParetoFront` keeps the front of the candidates seen so far: the front of (front so far +
a new chunk) is the front of everything seen, since a candidate dominated in a subset stays
dominated, so a planner's grid is swept chunk by chunk, never whole.
"""

from __future__ import annotations

import numpy as np

#: Bits of mantissa kept when times and costs are compared (:func:`resolved`).
RESOLUTION_BITS = 30


def resolved(values) -> np.ndarray:
    """Values rounded to a relative resolution of ``2**-RESOLUTION_BITS`` (ties made exact).

    Args:
        values: any shape, finite or not.

    Returns:
        Float array of the same shape (zero, infinities and NaN unchanged).
    """
    mantissa, exponent = np.frexp(np.asarray(values, dtype=float))
    scale = 2.0**RESOLUTION_BITS
    return np.ldexp(np.round(mantissa * scale) / scale, exponent)


def pareto_sweep(time: np.ndarray, cost: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Which candidates are non-dominated (ties in time and cost: the lowest index wins).

    Args:
        time: shape (n,).
        cost: shape (n,).
        index: distinct candidate numbers, shape (n,).

    Returns:
        Bool array, shape (n,).
    """
    cost = resolved(cost)
    order = np.lexsort((index, cost, resolved(time)))
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
