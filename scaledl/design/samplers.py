"""Baseline samplers over the same candidate set: uniform random and Latin hypercube.

They are the comparisons for the D-optimal design (Atkinson, Donev & Tobias 2007, ch. 9 compare
space-filling and random designs with optimum ones). Both choose without replacement and never
choose an excluded (already profiled) candidate.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from scipy.stats import qmc

from scaledl.design.errors import DesignError


def random_indices(
    n_candidates: int, n: int, seed: int = 0, exclude: Iterable[int] | None = None
) -> np.ndarray:
    """Uniform random choice of ``n`` candidates without replacement.

    Args:
        n_candidates: size of the candidate set.
        n: candidates to choose.
        seed: random seed.
        exclude: indices that must not be chosen.

    Returns:
        The chosen indices, sorted ascending.

    Raises:
        DesignError: ``n`` is not positive or exceeds the available candidates.

    Shapes:
        result: ``(n,)``.
    """
    available = _available(n_candidates, exclude)
    _check_n(n, available.size)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(available, size=n, replace=False))


def lhs_indices(
    coords: np.ndarray, n: int, seed: int = 0, exclude: Iterable[int] | None = None
) -> np.ndarray:
    """Latin hypercube sample mapped to the nearest candidates, without replacement.

    ``n`` points of a Latin hypercube in ``[0, 1]^k`` (McKay, Beckman & Conover 1979;
    :class:`scipy.stats.qmc.LatinHypercube`) are mapped, in the order drawn, each to the nearest
    (Euclidean) candidate not chosen yet.

    Args:
        coords: candidates as points of the unit cube (see
            :meth:`scaledl.design.features.FeatureModel.unit_coordinates`).
        n: candidates to choose.
        seed: random seed of the hypercube.
        exclude: indices that must not be chosen.

    Returns:
        The chosen indices, sorted ascending.

    Raises:
        DesignError: ``coords`` is not a 2-D matrix, or ``n`` is not positive or exceeds the
            available candidates.

    Shapes:
        coords: ``(n_candidates, k)``; result: ``(n,)``.
    """
    coords = np.asarray(coords, dtype=np.float64)
    if coords.ndim != 2:
        raise DesignError(f"candidate coordinates must be 2-D, got shape {coords.shape}")
    available = _available(coords.shape[0], exclude)
    _check_n(n, available.size)
    if coords.shape[1] == 0:
        return random_indices(coords.shape[0], n, seed, exclude)
    points = qmc.LatinHypercube(d=coords.shape[1], seed=np.random.default_rng(seed)).random(n)
    free = np.zeros(coords.shape[0], dtype=bool)
    free[available] = True
    chosen = np.empty(n, dtype=np.int64)
    for k, point in enumerate(points):
        dist = np.sum((coords - point) ** 2, axis=1)
        dist[~free] = np.inf
        j = int(np.argmin(dist))
        chosen[k] = j
        free[j] = False
    return np.sort(chosen)


def _available(n_candidates: int, exclude: Iterable[int] | None) -> np.ndarray:
    mask = np.ones(int(n_candidates), dtype=bool)
    if exclude is not None:
        ex = np.asarray(list(exclude), dtype=np.int64)
        if ex.size and (ex.min() < 0 or ex.max() >= n_candidates):
            raise DesignError(f"excluded indices must lie in [0, {n_candidates})")
        mask[ex] = False
    return np.flatnonzero(mask)


def _check_n(n: int, n_available: int) -> None:
    if int(n) != n or n < 1:
        raise DesignError(f"n must be a positive integer, got {n!r}")
    if n > n_available:
        raise DesignError(f"cannot choose n={n}: only {n_available} candidates are available")
