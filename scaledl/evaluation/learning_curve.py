"""Learning curves: test error versus the number of profiled training workloads, per sampler.

From a training *pool* (the profiled workloads minus a fixed test set) each sampler chooses
subsets of the given sizes, in the design's feature space (:mod:`scaledl.design.features`: log2-
coded size factors and effects-coded categories, model order ``"main"`` by default):

* ``doptimal``: :func:`scaledl.design.doptimal.d_optimal_indices` (modified Fedorov exchange,
  Cook & Nachtsheim 1980) on the pool's model matrix;
* ``random``: :func:`scaledl.design.samplers.random_indices`;
* ``lhs``: :func:`scaledl.design.samplers.lhs_indices` on the pool's unit-cube coordinates.

A method is fitted on each subset (seeded validation subset as ``val_ids``) and scored (MRE of
iteration time) on the fixed test set; mean and standard deviation over seeds are reported. The
full pool is the same subset for every sampler, so it is fitted once per seed and shared.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from scaledl.design.doptimal import d_optimal_indices
from scaledl.design.features import FeatureModel, workload_factors
from scaledl.design.samplers import lhs_indices, random_indices
from scaledl.evaluation.metrics import error_summary
from scaledl.evaluation.splits import validation_ids
from scaledl.models.data import ProfileData

SAMPLERS = ("doptimal", "random", "lhs")
DEFAULT_SIZES = (12, 24, 36)


class PoolDesign:
    """The design-space view of a pool of workloads: model matrix and unit-cube coordinates.

    Args:
        data: profile data holding the pool.
        pool_ids: the pool's workload ids (row order of the matrices).
        order: model order of :class:`~scaledl.design.features.FeatureModel`.

    Attributes:
        ids: the pool ids.
        X: model matrix, shape ``(len(ids), p)``.
        coords: unit-cube coordinates, shape ``(len(ids), k)``.
        terms: names of the model terms.
    """

    def __init__(self, data: ProfileData, pool_ids: Sequence[str], order: str = "main") -> None:
        self.ids = list(pool_ids)
        numeric, categorical = workload_factors([data.workloads[i] for i in self.ids])
        model = FeatureModel.fit(numeric, categorical, order)
        self.X = model.transform(numeric, categorical)
        self.coords = model.unit_coordinates(numeric, categorical)
        self.terms = model.terms

    def select(self, sampler: str, n: int, seed: int, n_starts: int = 5) -> list[str]:
        """Ids of ``n`` pool workloads chosen by a sampler.

        Args:
            sampler: one of :data:`SAMPLERS`.
            n: subset size, ``1 <= n <= len(ids)`` (``doptimal`` needs ``n >= p``).
            seed: random seed (the subset is deterministic for a seed).
            n_starts: random starts of the D-optimal exchange.

        Returns:
            The chosen ids, in pool order.

        Raises:
            ValueError: unknown sampler.
            scaledl.design.DesignError: ``n`` infeasible for the sampler.
        """
        if sampler == "doptimal":
            idx, _ = d_optimal_indices(self.X, n, seed=seed, n_starts=n_starts)
        elif sampler == "random":
            idx = random_indices(len(self.ids), n, seed=seed)
        elif sampler == "lhs":
            idx = lhs_indices(self.coords, n, seed=seed)
        else:
            raise ValueError(f"unknown sampler {sampler!r}; choose from {SAMPLERS}")
        return [self.ids[i] for i in sorted(int(i) for i in idx)]


def auto_sizes(n_pool: int, n_terms: int) -> list[int]:
    """Default subset sizes: those of :data:`DEFAULT_SIZES` in ``[n_terms, n_pool)``, then the pool.

    Args:
        n_pool: workloads in the pool.
        n_terms: model terms ``p`` (D-optimal needs at least ``p`` runs).

    Returns:
        Increasing sizes ending with ``n_pool``.
    """
    return [s for s in DEFAULT_SIZES if n_terms <= s < n_pool] + [n_pool]


def learning_curves(
    data: ProfileData,
    test_ids: Sequence[str],
    fit_predict: Callable[[ProfileData, list[str], int], np.ndarray],
    sizes: Sequence[int] | None = None,
    seeds: int = 5,
    samplers: Sequence[str] = SAMPLERS,
    val_fraction: float = 0.15,
    order: str = "main",
) -> dict:
    """MRE of iteration time versus training-set size for each sampler.

    Args:
        data: all profile data.
        test_ids: the fixed test set; the pool is every other workload.
        fit_predict: ``(train_data, val_ids, seed) -> predicted iteration seconds of test_ids``
            (in ``test_ids`` order); fits one method.
        sizes: subset sizes; ``None`` gives :func:`auto_sizes`. Sizes above the pool are an
            error; the pool size itself is fitted once per seed and shared by the samplers.
        seeds: number of seeds (0 .. seeds-1) per (sampler, size).
        samplers: subset of :data:`SAMPLERS`.
        val_fraction: validation share of each subset.
        order: model order of the design space.

    Returns:
        ``{"samplers": {sampler: {"sizes", "mre_mean", "mre_std", "mre_per_seed"}}, "n_fits",
        "fit_seconds", "pool_size", "design_terms"}`` (a
        :class:`~scaledl.evaluation.results.LearningCurves`).

    Raises:
        ValueError: a size outside ``[1, pool size]``, or no seed.
    """
    test_ids = list(test_ids)
    test = set(test_ids)
    pool = [i for i in data.ids if i not in test]
    design = PoolDesign(data, pool, order)
    sizes = sorted(set(auto_sizes(len(pool), len(design.terms)) if sizes is None else sizes))
    if sizes[0] < 1 or sizes[-1] > len(pool):
        raise ValueError(f"learning-curve sizes {sizes} must lie in [1, {len(pool)}] (the pool)")
    if seeds < 1:
        raise ValueError(f"learning_curve_seeds must be >= 1, got {seeds}")
    true = data.subset(test_ids).labels.set_index("workload_id").loc[test_ids, "iteration_ms"]
    true_s = true.to_numpy() / 1000.0
    cache: dict[tuple, float] = {}
    started = time.perf_counter()

    def score(ids: list[str], seed: int) -> float:
        key = (tuple(ids), seed)
        if key not in cache:
            val = list(validation_ids(ids, val_fraction, seed))
            pred = fit_predict(data.subset(ids), val, seed)
            cache[key] = error_summary(pred, true_s)["mre"]
        return cache[key]

    curves: dict = {}
    for sampler in samplers:
        per_seed = []
        for n in sizes:
            row = []
            for seed in range(seeds):
                ids = pool if n == len(pool) else design.select(sampler, n, seed)
                row.append(score(ids, seed))
            per_seed.append(row)
        curves[sampler] = {
            "sizes": list(sizes),
            "mre_mean": [float(np.mean(r)) for r in per_seed],
            "mre_std": [float(np.std(r)) for r in per_seed],
            "mre_per_seed": per_seed,
        }
    return {
        "samplers": curves,
        "n_fits": len(cache),
        "fit_seconds": time.perf_counter() - started,
        "pool_size": len(pool),
        "design_terms": list(design.terms),
    }


def workloads_to_reach(curve: dict, target_mre: float) -> int | None:
    """Smallest size whose mean MRE is at most ``target_mre``, ``None`` if never reached.

    Args:
        curve: one sampler's entry of :func:`learning_curves`.
        target_mre: the MRE to reach.

    Returns:
        The size, or ``None``.
    """
    for n, m in zip(curve["sizes"], curve["mre_mean"], strict=True):
        if m <= target_mre:
            return int(n)
    return None
