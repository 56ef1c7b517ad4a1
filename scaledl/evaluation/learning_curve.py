"""Learning curves: test error versus the number of profiled training workloads, per sampler.

From a training *pool* (the profiled workloads minus a fixed test set) each sampler chooses
subsets of the given sizes, in the design's feature space (:mod:`scaledl.design.features`: log2-
coded size factors and effects-coded categories, model order ``"main"`` by default):

* ``doptimal``: the D-optimal design matched to the predictor
  (:func:`scaledl.design.matched.matched_d_optimal_indices`: a compound D-criterion over the
  layer-wise models' information per layer type and the GNN's (family, world size) cells);
* ``doptimal-surface``: the workload-level response-surface D-optimal design
  (:func:`scaledl.design.doptimal.d_optimal_indices`, modified Fedorov exchange, Cook &
  Nachtsheim 1980) on the pool's model matrix, the criterion the product used before;
* ``random``: :func:`scaledl.design.samplers.random_indices`;
* ``lhs``: :func:`scaledl.design.samplers.lhs_indices` on the pool's unit-cube coordinates.

A method is fitted on each subset (seeded validation subset as ``val_ids``, the seed also the
model seed) and scored (MRE of iteration time) on the fixed test set; mean and standard deviation
over seeds are reported. The full pool is the same subset for every sampler, so it is fitted once
per seed and shared.

**Paired by seed.** Seed ``s`` is one replicate of every sampler (its subset draw, validation
subset and model seed), so samplers are compared paired by seed: the difference of their MREs at
a size, with a 95% paired bootstrap interval over the seeds
(:func:`~scaledl.stats.significance.paired_comparison`, the resampling unit is the seed) and
a verdict. The *halving* comparison asks the project's question: does D-optimal sampling at half
the workloads (the largest size <= half the final one) reach random sampling's final MRE (the
largest proper subset)? Its interval says so, or shows that it does not.

**Design check.** Each subset is also scored for the predictor's own models
(:class:`~scaledl.evaluation.design_check.DesignCheck`: the layer-wise models' D-efficiency and
the (family, world size) coverage), so the learning curve shows whether a sampler's workloads
inform the layer-wise and GNN models, not only the design's workload-level model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from scaledl.design.doptimal import d_optimal_indices
from scaledl.design.errors import DesignError
from scaledl.design.features import FeatureModel, workload_factors
from scaledl.design.matched import (
    PredictorInformation,
    matched_d_optimal_indices,
    predictor_information,
)
from scaledl.design.samplers import lhs_indices, random_indices
from scaledl.evaluation.design_check import DesignCheck
from scaledl.models.data import ProfileData
from scaledl.models.train import validation_ids
from scaledl.stats.metrics import error_summary
from scaledl.stats.significance import paired_comparison
from scaledl.workloads.identity import family_key

SAMPLERS = ("doptimal", "doptimal-surface", "random", "lhs")
#: The samplers' MREs are compared with this one's at each size.
REFERENCE_SAMPLER = "random"


class PoolDesign:
    """The design-space view of a pool of workloads: model matrix and unit-cube coordinates.

    Args:
        data: profile data holding the pool.
        pool_ids: the pool's workload ids (row order of the matrices).
        order: model order of :class:`~scaledl.design.features.FeatureModel`.

    Attributes:
        ids: the pool ids.
        X: model matrix, shape ``(len(ids), p)`` (``None`` with ``surface_error``).
        coords: unit-cube coordinates, shape ``(len(ids), k)`` (``None`` likewise).
        terms: names of the model terms (empty likewise).
        surface_error: why the response surface cannot code the pool, or ``None``.
    """

    def __init__(self, data: ProfileData, pool_ids: Sequence[str], order: str = "main") -> None:
        self.ids = list(pool_ids)
        # The response surface needs explicit sizes; a pool without them (a Hugging Face config
        # with no intermediate size, e.g. DINOv2's mlp_ratio) can only use doptimal and random.
        self.surface_error: DesignError | None = None
        self.X = self.coords = None
        self.terms: tuple[str, ...] = ()
        try:
            numeric, categorical = workload_factors([data.workloads[i] for i in self.ids])
        except DesignError as exc:
            self.surface_error = exc
        else:
            model = FeatureModel.fit(numeric, categorical, order)
            self.X = model.transform(numeric, categorical)
            self.coords = model.unit_coordinates(numeric, categorical)
            self.terms = model.terms
        self._data = data
        self._matched: PredictorInformation | None = None

    @property
    def matched(self) -> PredictorInformation:
        """The pool's information for the matched criterion (built on first use)."""
        if self._matched is None:
            workloads = [self._data.workloads[i] for i in self.ids]
            cells = [f"{family_key(w)}/{w.world_size}" for w in workloads]
            position = {w: g for g, w in enumerate(self._data.ids)}
            graphs = self._data.graphs.select(np.array([position[w] for w in self.ids]))
            self._matched = predictor_information(graphs.nodes, cells)
        return self._matched

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
            # One random start per seed: the seeds are the replicates of the curve.
            idx, _ = matched_d_optimal_indices(self.matched, n, seed=seed, n_starts=1)
        elif sampler in ("doptimal-surface", "lhs") and self.surface_error is not None:
            raise self.surface_error
        elif sampler == "doptimal-surface":
            idx, _ = d_optimal_indices(self.X, n, seed=seed, n_starts=n_starts)
        elif sampler == "random":
            idx = random_indices(len(self.ids), n, seed=seed)
        elif sampler == "lhs":
            idx = lhs_indices(self.coords, n, seed=seed)
        else:
            raise ValueError(f"unknown sampler {sampler!r}; choose from {SAMPLERS}")
        return [self.ids[i] for i in sorted(int(i) for i in idx)]


def auto_sizes(n_pool: int, n_terms: int) -> list[int]:
    """Default subset sizes: a quarter and a half of the pool (those >= ``n_terms``), the pool.

    With these the halving question (D-optimal at half the workloads against random at the
    largest proper size) is asked at a size the curve has.

    Args:
        n_pool: workloads in the pool.
        n_terms: model terms ``p`` (D-optimal needs at least ``p`` runs).

    Returns:
        Increasing sizes ending with ``n_pool``.
    """
    sizes = sorted({n_pool // 4, n_pool // 2})
    return [s for s in sizes if n_terms <= s < n_pool] + [n_pool]


def learning_curves(
    data: ProfileData,
    test_ids: Sequence[str],
    fit_predict_many: Callable[[list[tuple[list[str], list[str], int]]], list[dict]],
    sizes: Sequence[int] | None = None,
    seeds: int = 10,
    samplers: Sequence[str] = SAMPLERS,
    val_fraction: float = 0.15,
    order: str = "main",
) -> dict:
    """MRE of iteration time versus training-set size for each sampler, paired by seed.

    Args:
        data: all profile data.
        test_ids: the fixed test set; the pool is every other workload.
        fit_predict_many: ``[(train_ids, val_ids, seed), ...] -> [result, ...]``: fits one
            method per task (in parallel if it likes); a result holds ``pred``, a frame whose
            ``iteration_s`` are the predictions of ``test_ids`` in that order, and, for a GNN
            on a prior, ``prior_ms`` (the prior's predictions,
            :func:`~scaledl.evaluation.split_fits.fit_predict_many`).
        sizes: subset sizes; ``None`` gives :func:`auto_sizes`. Sizes above the pool are an
            error; the pool size itself is fitted once per seed and shared by the samplers.
        seeds: number of seeds (0 .. seeds-1) per (sampler, size).
        samplers: subset of :data:`SAMPLERS`.
        val_fraction: validation share of each subset.
        order: model order of the design space (``"main"``, ...; D-optimal needs sizes of at
            least its number of terms).

    Returns:
        ``{"samplers": {sampler: {"sizes", "mre_mean", "mre_std", "mre_per_seed",
        "prior_mre_mean", "layerwise_d_efficiency", "family_world_coverage"}}, "n_fits",
        "fit_seconds", "pool_size", "design_terms", "design_order", "seeds", "comparisons",
        "halving"}`` (a
        :class:`~scaledl.evaluation.results.LearningCurves`); ``halving`` is ``None`` without
        D-optimal and random samplers and two proper sizes; ``prior_mre_mean`` (the MRE of
        the method's prior fitted on the same subsets) is ``None`` for a method without one.

    Raises:
        ValueError: a size outside ``[1, pool size]``, or no seed.
    """
    test_ids = list(test_ids)
    test = set(test_ids)
    pool = [i for i in data.ids if i not in test]
    design = PoolDesign(data, pool, order)
    sizes = _checked_sizes(sizes, seeds, len(pool), len(design.terms))
    chosen = {
        (sampler, n, seed): pool if n == len(pool) else design.select(sampler, n, seed)
        for sampler in samplers
        for n in sizes
        for seed in range(seeds)
    }
    tasks = list(dict.fromkeys((tuple(ids), seed) for (_, _, seed), ids in chosen.items()))
    started = time.perf_counter()
    mre, prior_mre = _fit_tasks(data, test_ids, tasks, fit_predict_many, val_fraction)
    fit_seconds = time.perf_counter() - started
    check = DesignCheck(
        data.subset(pool).nodes,
        [data.workloads[w].family for w in pool],
        [data.workloads[w].world_size for w in pool],
    )
    pool_pos = {w: i for i, w in enumerate(pool)}
    curves = {}
    for sampler in samplers:
        subsets = [[chosen[(sampler, n, seed)] for seed in range(seeds)] for n in sizes]
        curves[sampler] = _sampler_curve(subsets, sizes, mre, prior_mre, check, pool_pos)
    comparisons, halving = sampler_comparisons(curves, len(pool), seeds)
    return {
        "samplers": curves,
        "n_fits": len(tasks),
        "fit_seconds": fit_seconds,
        "pool_size": len(pool),
        "design_terms": list(design.terms),
        "design_order": order,
        "seeds": seeds,
        "comparisons": comparisons,
        "halving": halving,
    }


def _checked_sizes(sizes: Sequence[int] | None, seeds: int, n_pool: int, n_terms: int) -> list[int]:
    """The sorted distinct sizes (:func:`auto_sizes` for ``None``).

    Raises:
        ValueError: a size outside ``[1, n_pool]``, or no seed.
    """
    sizes = sorted(set(auto_sizes(n_pool, n_terms) if sizes is None else sizes))
    if sizes[0] < 1 or sizes[-1] > n_pool:
        raise ValueError(f"learning-curve sizes {sizes} must lie in [1, {n_pool}] (the pool)")
    if seeds < 1:
        raise ValueError(f"learning_curve_seeds must be >= 1, got {seeds}")
    return sizes


def _fit_tasks(
    data: ProfileData,
    test_ids: list[str],
    tasks: list[tuple[tuple[str, ...], int]],
    fit_predict_many: Callable[[list[tuple[list[str], list[str], int]]], list[dict]],
    val_fraction: float,
) -> tuple[dict, dict]:
    """Fit every distinct (training subset, seed) once; the test MRE of each and of its prior.

    Returns:
        ``(mre, prior_mre)``: task -> iteration MRE on ``test_ids``; the prior's (empty for a
        method without one).
    """
    true_s = data.subset(test_ids).labels.set_index("workload_id").loc[test_ids, "iteration_ms"]
    true_s = true_s.to_numpy() / 1000.0
    results = fit_predict_many(
        [(list(ids), list(validation_ids(ids, val_fraction, seed)), seed) for ids, seed in tasks]
    )
    mre, prior_mre = {}, {}
    for task, r in zip(tasks, results, strict=True):
        mre[task] = error_summary(r["pred"]["iteration_s"].to_numpy(), true_s)["mre"]
        if r.get("prior_ms") is not None:
            prior_mre[task] = error_summary(np.asarray(r["prior_ms"]) / 1000.0, true_s)["mre"]
    return mre, prior_mre


def _sampler_curve(
    subsets_by_size: list[list[list[str]]],
    sizes: list[int],
    mre: dict,
    prior_mre: dict,
    check: DesignCheck,
    pool_pos: dict[str, int],
) -> dict:
    """One sampler's curve: MRE per size and seed, its prior's, D-efficiency and coverage.

    Args:
        subsets_by_size: per size, the training subset of each seed (seed order).
        sizes: the sizes.
        mre: task -> MRE (:func:`_fit_tasks`).
        prior_mre: task -> the prior's MRE (empty: no prior).
        check: the pool's design check.
        pool_pos: workload id -> its position in the pool.

    Returns:
        A ``SamplerCurve`` of :mod:`scaledl.evaluation.results` as a dict.
    """
    per_seed, prior, efficiency, coverage = [], [], [], []
    for subsets in subsets_by_size:
        keys = [(tuple(ids), seed) for seed, ids in enumerate(subsets)]
        per_seed.append([mre[k] for k in keys])
        prior.append(float(np.mean([prior_mre[k] for k in keys])) if prior_mre else None)
        graphs = [[pool_pos[w] for w in ids] for ids in subsets]
        efficiency.append(float(np.mean([check.layerwise_d_efficiency(g) for g in graphs])))
        coverage.append(float(np.mean([check.family_world_coverage(g) for g in graphs])))
    return {
        "sizes": list(sizes),
        "mre_mean": [float(np.mean(r)) for r in per_seed],
        "mre_std": [float(np.std(r)) for r in per_seed],
        "mre_per_seed": per_seed,
        "prior_mre_mean": prior if prior_mre else None,
        "layerwise_d_efficiency": efficiency,
        "family_world_coverage": coverage,
    }


def _seed_comparison(curves: dict, a: tuple[str, int], b: tuple[str, int]) -> dict | None:
    """Paired (by seed) comparison of sampler ``a[0]`` at size ``a[1]`` with ``b``."""
    mre_a = curves[a[0]]["mre_per_seed"][curves[a[0]]["sizes"].index(a[1])]
    mre_b = curves[b[0]]["mre_per_seed"][curves[b[0]]["sizes"].index(b[1])]
    if len(mre_a) < 2:
        return None
    name_a, name_b = f"{a[0]}@{a[1]}", f"{b[0]}@{b[1]}"
    return paired_comparison(mre_a, mre_b, name_a, name_b, unit="seed").model_dump()


def sampler_comparisons(curves: dict, pool_size: int, seeds: int) -> tuple[list[dict], dict | None]:
    """Every sampler against the reference at each proper size, and the halving comparison.

    Args:
        curves: sampler -> ``{"sizes", "mre_per_seed"}`` (seed ``s`` is column ``s``).
        pool_size: the pool (a size equal to it is the same subset for every sampler).
        seeds: seeds per size.

    Returns:
        ``(comparisons, halving)``: comparison records (unit ``seed``) of each sampler against
        :data:`REFERENCE_SAMPLER` at each size below the pool, and D-optimal at the largest
        size <= half the largest proper size against the reference at that size (``None``
        without both samplers, fewer than two seeds or no such size).
    """
    if REFERENCE_SAMPLER not in curves or seeds < 2:
        return [], None
    sizes = [n for n in curves[REFERENCE_SAMPLER]["sizes"] if n < pool_size]
    comparisons = [
        _seed_comparison(curves, (sampler, n), (REFERENCE_SAMPLER, n))
        for sampler in curves
        if sampler != REFERENCE_SAMPLER
        for n in sizes
    ]
    halving = None
    half = [n for n in sizes if sizes and n <= sizes[-1] / 2]
    if "doptimal" in curves and half:
        halving = _seed_comparison(curves, ("doptimal", half[-1]), (REFERENCE_SAMPLER, sizes[-1]))
    return [c for c in comparisons if c is not None], halving
