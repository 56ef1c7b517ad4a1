"""D-optimal choice of rows from a candidate model matrix by modified Fedorov exchange.

The D-criterion of an exact design ``X`` (``n`` runs, ``p`` model terms) is ``log det(X^T X)``:
maximising it minimises the volume of the confidence ellipsoid of the least-squares coefficients
(Fedorov 1972, *Theory of Optimal Experiments*, ch. 2; Atkinson, Donev & Tobias 2007, *Optimum
Experimental Designs, with SAS*, ch. 10-12).

Algorithm (Cook & Nachtsheim 1980, "A comparison of algorithms for constructing exact D-optimal
designs", *Technometrics* 22(3), the "modified Fedorov" exchange; Atkinson et al. 2007 §12.5):

1. Start: ``r`` random candidates, then greedy additions of the candidate with the largest
   prediction variance ``d(x) = x^T M^-1 x`` on a slightly ridged information matrix
   ``M = eps I + X^T X`` until ``n`` rows are chosen (the sequential construction of Wynn 1970 /
   Dykstra 1971). Fixed rows (already profiled) are part of ``M`` from the start.
2. Exchange: visit the chosen rows in random order; for row ``i`` find the candidate ``j`` that
   maximises the determinant ratio of swapping ``i`` for ``j``,
   ``Δ(i, j) = (1 + d_j)(1 - d_i) + d_ij²`` with ``d_ij = x_i^T M^-1 x_j``
   (Fedorov 1972, eq. 3.2.5), and swap when ``Δ > 1``.
3. ``M^-1`` and the variance vector ``d`` over all candidates are updated by the rank-two
   Woodbury identity (Sherman & Morrison 1950; Woodbury 1950); the determinant ratio is the
   matrix determinant lemma. One evaluation costs one ``(N, p) @ (p,)`` product, one swap one more,
   so a pass over ``n`` design rows is ``O(n N p)`` instead of Fedorov's ``O(n N p²)``.
4. Passes repeat until no swap improves the determinant (``M^-1`` and ``d`` are recomputed
   exactly after every pass, which bounds round-off); the best of ``n_starts`` starts is kept.

Designs are chosen *without replacement*: a candidate (a workload) is profiled at most once.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
from scipy import linalg

from scaledl.design.errors import DesignError

_RIDGE = 1e-6  # ridge of the greedy start, relative to the mean squared row norm


def _single_threaded_blas() -> AbstractContextManager:
    """Limit BLAS to one thread for the exchange.

    The exchange is a long chain of small ``(N, p) @ (p,)`` products; threaded BLAS only adds
    synchronisation there (measured 5-10x slower on a shared 2-core host) and one thread also
    makes the result independent of the host's thread count.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # threadpoolctl comes with scikit-learn; without it run as configured
        return nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def log_det_information(X: np.ndarray) -> float:
    """``log det(X^T X)`` of a design matrix, ``-inf`` when it is singular.

    Args:
        X: the design's model matrix.

    Returns:
        The natural log of the determinant of the information matrix ``X^T X``.

    Shapes:
        X: ``(n_runs, n_terms)``.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < X.shape[1]:
        return float("-inf")
    sign, value = np.linalg.slogdet(X.T @ X)
    if sign <= 0 or not np.isfinite(value):
        return float("-inf")
    # Rank-deficient designs can give a tiny positive determinant by round-off.
    if np.linalg.matrix_rank(X) < X.shape[1]:
        return float("-inf")
    return float(value)


def d_efficiency(log_det: float, n_runs: int, n_terms: int) -> float:
    """D-efficiency ``det(X^T X / n)^(1/p)`` of a design (Atkinson, Donev & Tobias 2007, §11.1).

    With the factors coded to ``[-1, 1]`` it is 1 for an orthogonal two-level design of a
    first-order model and lies in ``[0, 1]`` for designs on the cube; it is comparable across
    designs of different size ``n``.

    Args:
        log_det: ``log det(X^T X)`` of the design (``-inf`` for a singular one).
        n_runs: rows ``n`` of the design.
        n_terms: model terms ``p``.

    Returns:
        The D-efficiency; 0.0 for a singular design.
    """
    if not np.isfinite(log_det) or n_runs <= 0 or n_terms <= 0:
        return 0.0
    return float(np.exp((log_det - n_terms * np.log(n_runs)) / n_terms))


def d_optimal_indices(
    F: np.ndarray,
    n: int,
    seed: int = 0,
    n_starts: int = 10,
    fixed: Iterable[int] | None = None,
    *,
    max_passes: int = 100,
    tol: float = 1e-9,
) -> tuple[np.ndarray, float]:
    """Choose ``n`` rows of a candidate model matrix maximising ``log det(X^T X)``.

    Modified Fedorov exchange (Cook & Nachtsheim 1980) with rank-two Woodbury updates, see the
    module docstring. Deterministic for a given ``seed`` (and BLAS build).

    Args:
        F: candidate model matrix, one row per candidate (already coded, intercept included).
        n: rows to choose in addition to ``fixed``; chosen without replacement.
        seed: seed of the random starts.
        n_starts: random starts; the best final design is returned.
        fixed: indices of rows of ``F`` that are in the design already (profiled workloads);
            they count in the determinant, are never removed and never chosen again.
        max_passes: upper bound on exchange passes per start.
        tol: a swap is made only if it multiplies the determinant by more than ``1 + tol``.

    Returns:
        ``(indices, log_det)``: the ``n`` chosen row indices (sorted ascending, disjoint from
        ``fixed``) and ``log det(X^T X)`` of the whole design, fixed rows included.

    Raises:
        DesignError: ``F`` is not a finite 2-D matrix; ``n`` exceeds the free candidates;
            ``n + len(fixed)`` is smaller than the number of terms; or ``F`` has rank below the
            number of terms (singular model: some terms are aliased over the candidate set).

    Shapes:
        F: ``(n_candidates, n_terms)``; indices: ``(n,)``.
    """
    F, n, fixed_idx = _checked_inputs(F, n, n_starts, fixed)
    n_cand, p = F.shape
    rng = np.random.default_rng(seed)
    best_idx: np.ndarray | None = None
    best_ld = float("-inf")
    with _single_threaded_blas():
        for child in rng.spawn(int(n_starts)):
            idx, ld = _one_start(F, n, fixed_idx, child, max_passes, tol)
            if ld > best_ld + 1e-10:
                best_idx, best_ld = idx, ld
    if best_idx is None:
        raise DesignError(
            f"no nonsingular design of {n} runs found in {n_starts} starts "
            f"({n_cand} candidates, {p} terms)"
        )
    return np.sort(best_idx), best_ld


def _checked_inputs(
    F: np.ndarray, n: Any, n_starts: Any, fixed: Iterable[int] | None
) -> tuple[np.ndarray, int, np.ndarray]:
    """The checked inputs of :func:`d_optimal_indices`: ``(F as float64, n, sorted fixed)``.

    Raises:
        DesignError: as :func:`d_optimal_indices` (a bad matrix, ``n``, ``n_starts`` or fixed
            indices; too few free candidates or runs; a singular model).
    """
    F = np.ascontiguousarray(F, dtype=np.float64)
    if F.ndim != 2 or F.shape[0] == 0 or F.shape[1] == 0:
        raise DesignError(f"candidate matrix must be 2-D and non-empty, got shape {F.shape}")
    if not np.all(np.isfinite(F)):
        raise DesignError("candidate matrix contains NaN or infinite values")
    n_cand, p = F.shape
    if int(n) != n or n < 1:
        raise DesignError(f"n must be a positive integer, got {n!r}")
    n = int(n)
    if int(n_starts) != n_starts or n_starts < 1:
        raise DesignError(f"n_starts must be a positive integer, got {n_starts!r}")
    fixed_idx = np.unique(np.asarray(list(fixed) if fixed is not None else [], dtype=np.int64))
    if fixed_idx.size and (fixed_idx[0] < 0 or fixed_idx[-1] >= n_cand):
        raise DesignError(f"fixed indices must lie in [0, {n_cand}), got {fixed_idx.tolist()}")
    n_free = n_cand - fixed_idx.size
    if n > n_free:
        raise DesignError(
            f"cannot choose n={n} rows: only {n_free} candidates are available "
            f"({n_cand} candidates, {fixed_idx.size} already in the design)"
        )
    if n + fixed_idx.size < p:
        raise DesignError(
            f"a design of {n + fixed_idx.size} runs cannot estimate {p} model terms: "
            f"at least {p} runs are needed (choose n >= {p - fixed_idx.size} or a smaller model)"
        )
    with _single_threaded_blas():
        rank = int(np.linalg.matrix_rank(F))
    if rank < p:
        raise DesignError(
            f"singular model: the candidate matrix has rank {rank} < {p} model terms, so "
            f"{p - rank} term(s) are aliased over the candidate set and no design can estimate them"
        )
    return F, n, fixed_idx


def _one_start(
    F: np.ndarray,
    n: int,
    fixed: np.ndarray,
    rng: np.random.Generator,
    max_passes: int,
    tol: float,
) -> tuple[np.ndarray, float]:
    """One random start: greedy build then modified Fedorov passes; ``-inf`` if singular."""
    n_cand, p = F.shape
    blocked = np.zeros(n_cand, dtype=bool)
    blocked[fixed] = True
    design = _greedy_start(F, n, fixed, blocked, rng)

    Minv, d, log_det = _exact_state(F, design, fixed)
    if Minv is None:
        return design, float("-inf")
    for _ in range(max_passes):
        swapped = False
        for k in rng.permutation(n):
            i = design[k]
            a = Minv @ F[i]
            d_i = d[i]
            g = F @ a  # d_ij for every candidate j
            delta = (1.0 + d) * (1.0 - d_i) + g * g
            delta[blocked] = -np.inf
            j = int(np.argmax(delta))
            ratio = delta[j]
            if not ratio > 1.0 + tol:
                continue
            # Rank-two Woodbury update for M' = M + x_j x_j^T - x_i x_i^T.
            b = Minv @ F[j]
            h = F @ b
            s = np.array([[1.0 + d[j], g[j]], [g[j], d_i - 1.0]])
            s_inv = np.array([[s[1, 1], -s[0, 1]], [-s[1, 0], s[0, 0]]]) / (-ratio)
            B = np.column_stack([b, a])
            Minv -= B @ s_inv @ B.T
            d -= s_inv[0, 0] * h * h + 2.0 * s_inv[0, 1] * h * g + s_inv[1, 1] * g * g
            log_det += float(np.log(ratio))
            blocked[i] = False
            blocked[j] = True
            design[k] = j
            swapped = True
        Minv, d, log_det = _exact_state(F, design, fixed)
        if Minv is None:
            return design, float("-inf")
        if not swapped:
            break
    return design, log_det


def _greedy_start(
    F: np.ndarray, n: int, fixed: np.ndarray, blocked: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Random seed rows then greedy max-variance additions on a ridged information matrix.

    Marks the chosen rows in ``blocked`` (in place) and returns them, in order of choice.
    """
    n_cand, p = F.shape
    eps = _RIDGE * max(float(np.mean(np.einsum("ij,ij->i", F, F))), 1e-12)
    M = eps * np.eye(p)
    if fixed.size:
        M += F[fixed].T @ F[fixed]
    Minv = linalg.inv(M)
    d = np.einsum("ij,ij->i", F @ Minv, F)
    free = np.flatnonzero(~blocked)
    n_random = int(rng.integers(1, min(n, p) + 1))
    seeds = rng.choice(free, size=n_random, replace=False)
    design = np.empty(n, dtype=np.int64)
    for k in range(n):
        if k < n_random:
            j = int(seeds[k])
        else:
            masked = np.where(blocked, -np.inf, d)
            j = int(np.argmax(masked))
        b = Minv @ F[j]
        c = 1.0 + F[j] @ b
        Minv -= np.outer(b, b) / c
        h = F @ b
        d -= h * h / c
        blocked[j] = True
        design[k] = j
    return design


def _exact_state(
    F: np.ndarray, design: np.ndarray, fixed: np.ndarray
) -> tuple[np.ndarray | None, np.ndarray, float]:
    """Exact ``M^-1``, variance vector ``d`` and ``log det M`` of a design (None if singular)."""
    rows = np.concatenate([fixed, design]) if fixed.size else design
    X = F[rows]
    M = X.T @ X
    try:
        chol = linalg.cholesky(M, lower=True)
    except linalg.LinAlgError:
        return None, np.empty(0), float("-inf")
    diag = np.diag(chol)
    if np.min(diag) <= 1e-10 * np.max(diag):
        return None, np.empty(0), float("-inf")
    Minv = linalg.cho_solve((chol, True), np.eye(M.shape[0]))
    Minv = 0.5 * (Minv + Minv.T)
    d = np.einsum("ij,ij->i", F @ Minv, F)
    return Minv, d, float(2.0 * np.sum(np.log(diag)))
