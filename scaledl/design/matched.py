"""A D-optimal criterion matched to the predictor: the information of the models ScaleDL fits.

The response-surface criterion (:mod:`scaledl.design.features`, :mod:`scaledl.design.doptimal`)
maximises the information of a workload-level polynomial in the log size factors, a model the
product never fits. ScaleDL fits

* one **layer-wise regressor per layer type** on layer calls: its inputs are a call's FLOPs,
  ATen operators, bytes moved and parameters (:mod:`scaledl.models.layerwise`);
* a **GNN over layer graphs**, which sees each (family, world size) cell and graphs of
  different sizes (all-reduce buckets exist only at world size > 1).

So the criterion is a *compound* D-criterion (Atkinson, Donev & Tobias 2007, *Optimum
Experimental Designs, with SAS*, ch. 21, eq. 21.1; Läuter 1974) over one information matrix per
model::

    Phi(S) = sum_t kappa_t / p_t * log det(M_t(S) + eps_t I)

* for each **layer type** ``t``: ``M_t(S) = sum over the layer calls c of type t of the chosen
  workloads of x_c x_c^T``, where ``x_c`` is the second-order model (intercept, linear and
  squared terms) in the standardised ``log1p`` of the call's forward FLOPs, operators, bytes
  moved and parameters (the quantities the regressor reads; the features the candidates do not
  vary are dropped); the weight ``kappa_t`` is the type's share of the candidates' estimated
  iteration time (forward plus backward FLOPs plus bytes moved at :data:`FLOPS_PER_BYTE`
  FLOPs per byte, a roofline proxy known before anything is profiled), floored at a share of
  ``1 / (2 T)`` so a cheap type is still estimated;
* for the **GNN**: ``M_g(S) = sum_w x_w x_w^T`` with ``x_w`` the indicators of the workload's
  (family, world size) cell and the standardised log of its graph size (layer nodes) and of its
  FLOPs, with weight :data:`GNN_WEIGHT` (the layer-wise models together weigh 1). Its log
  determinant is largest for a design balanced over the cells and spread in graph size.

``eps_t`` (a thousandth of the mean trace per dimension of one candidate's information) keeps
the log determinant finite while a type is not yet estimable: the first calls of a missing type
or the first workload of an empty cell then bring a large gain, so a design covers every type
and cell before it refines.

The optimiser is greedy forward selection from a random start, followed by exchange passes
(Fedorov 1972's exchange, one point at a time: the best swap of a chosen workload for an
unchosen one, while the criterion improves), best of ``n_starts`` starts.

**Sequential design** (:func:`sequential_indices`): the retraining step adds ``k`` workloads to
an existing design, maximising the criterion in which each candidate's information is weighted
by the predictor's own uncertainty about it (``u_w``, e.g. the relative disagreement of models
trained with different seeds, or the relative interval width), normalised to mean 1: a
weighted D-optimal design (Atkinson et al. 2007, ch. 22.3, design for weighted least squares,
``M = sum_w lambda_w x_w x_w^T``), so among equally informative candidates the most uncertain is
chosen first, and an uncertain candidate that informs nothing new is not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from scaledl.design.errors import DesignError
from scaledl.workloads.identity import family_key

#: Layer-call quantities the layer-wise regressors read (forward direction).
LAYER_INPUTS = ("fwd_flops", "fwd_ops", "bytes_moved", "params")
#: FLOPs per byte of the roofline proxy of a layer call's time (a CPU core's ratio is 5-20).
FLOPS_PER_BYTE = 10.0
#: Weight of the GNN's information; the layer-wise models' weights sum to 1.
GNN_WEIGHT = 1.0
_EPS_SHARE = 1e-3


@dataclass(frozen=True)
class InformationBlock:
    """One model's per-candidate information, kept as a low-rank factor.

    A candidate's information ``sum_c x_c x_c^T`` over its layer calls has one term per
    *distinct* call (a transformer repeats the same block, so the same ``x``): with ``F_w`` the
    ``(r, p)`` matrix of its distinct rows scaled by the square root of their count (zero rows
    pad it to the largest ``r`` of the block), the information is ``F_w^T F_w``.

    Attributes:
        name: ``layer:<type>`` or ``gnn``.
        weight: ``kappa`` of the compound criterion.
        factors: ``(N, r, p)``: each candidate workload's ``F_w``.
        eps: ridge ``eps`` of the block.
    """

    name: str
    weight: float
    factors: np.ndarray
    eps: float

    @property
    def dim(self) -> int:
        """The model's number of terms ``p``."""
        return int(self.factors.shape[2])

    @cached_property
    def per_candidate(self) -> np.ndarray:
        """``(N, p, p)``: each candidate's information ``F_w^T F_w``."""
        return np.einsum("nri,nrj->nij", self.factors, self.factors)


@dataclass(frozen=True)
class PredictorInformation:
    """The compound criterion's blocks over a candidate set (module docstring).

    Attributes:
        blocks: one :class:`InformationBlock` per layer type, then the GNN's.
        n_candidates: ``N``.
    """

    blocks: tuple[InformationBlock, ...]
    n_candidates: int

    def criterion(
        self, chosen: Sequence[int], candidate_weights: np.ndarray | None = None
    ) -> float:
        """``Phi`` of a set of candidates (module docstring).

        Args:
            chosen: candidate indices (repeats count twice).
            candidate_weights: ``(N,)`` weight of each candidate's information (``None``: 1).

        Returns:
            The criterion value (higher is better).
        """
        idx = np.asarray(chosen, dtype=int)
        w = np.ones(len(idx)) if candidate_weights is None else candidate_weights[idx]
        total = 0.0
        for block in self.blocks:
            m = np.tensordot(w, block.per_candidate[idx], axes=1) + block.eps * np.eye(block.dim)
            total += block.weight / block.dim * _log_det(m)
        return float(total)


def _log_det(m: np.ndarray) -> np.ndarray:
    sign, value = np.linalg.slogdet(m)
    return np.where(sign > 0, value, -np.inf)


def _second_order(z: np.ndarray) -> np.ndarray:
    """``(n, k) -> (n, 1 + 2k)``: intercept, linear and squared terms."""
    return np.column_stack([np.ones(len(z)), z, z**2 - 1.0])


def _standardise(values: np.ndarray) -> np.ndarray:
    std = values.std(axis=0)
    keep = std > 1e-9
    return (values[:, keep] - values[:, keep].mean(axis=0)) / std[keep]


def _factors(rows: np.ndarray, graph: np.ndarray, n: int) -> np.ndarray:
    """``(rows (m, p), graph (m,)) -> (n, r, p)``: the factors of :class:`InformationBlock`.

    Per graph, its distinct rows scaled by the square root of their count, zero-padded to the
    largest number ``r`` of distinct rows of any graph.
    """
    unique, counts = np.unique(np.column_stack([graph, rows]), axis=0, return_counts=True)
    owner = unique[:, 0].astype(int)  # sorted by graph first
    first = np.searchsorted(owner, owner, side="left")
    rank = np.arange(len(owner)) - first
    out = np.zeros((n, int(rank.max()) + 1, rows.shape[1]))
    out[owner, rank] = unique[:, 1:] * np.sqrt(counts)[:, None]
    return out


def _block(name: str, weight: float, factors: np.ndarray) -> InformationBlock:
    scale = float(np.sum(factors**2)) / (len(factors) * factors.shape[2])  # mean trace per term
    return InformationBlock(name, weight, factors, _EPS_SHARE * max(scale, 1e-12))


def predictor_information(
    nodes: pd.DataFrame, cells: Sequence[str], gnn_weight: float = GNN_WEIGHT
) -> PredictorInformation:
    """The criterion's information blocks of a candidate set, from its layer graphs.

    Args:
        nodes: layer-graph nodes of the candidates (:attr:`scaledl.graph.features.GraphSet.nodes`:
            ``graph`` (candidate index 0..N-1), ``node_kind``, ``layer_type``, ``fwd_flops``,
            ``bwd_flops``, ``fwd_ops``, ``params``, ``input_bytes``, ``output_bytes``).
        cells: ``(N,)`` the GNN cell of each candidate, e.g. ``"bert/2"`` (family, world size).
        gnn_weight: ``kappa`` of the GNN block.

    Returns:
        The blocks (layer types in sorted order, then ``gnn``).

    Raises:
        DesignError: no layer node, or ``cells`` does not have one entry per graph.
    """
    n = len(cells)
    layers = nodes[nodes["node_kind"] == "layer"]
    if layers.empty:
        raise DesignError("matched D-optimal criterion: the candidates have no layer node")
    graph = layers["graph"].to_numpy(dtype=int)
    if graph.max() >= n:
        raise DesignError(f"matched D-optimal criterion: {n} cells for {graph.max() + 1} graphs")
    bytes_moved = (layers["input_bytes"] + layers["output_bytes"]).to_numpy(dtype=float)
    flops = (layers["fwd_flops"] + layers["bwd_flops"]).to_numpy(dtype=float)
    proxy_time = flops + FLOPS_PER_BYTE * bytes_moved
    inputs = {
        "fwd_flops": layers["fwd_flops"].to_numpy(dtype=float),
        "fwd_ops": layers["fwd_ops"].to_numpy(dtype=float),
        "bytes_moved": bytes_moved,
        "params": layers["params"].to_numpy(dtype=float),
    }
    values = np.log1p(np.column_stack([inputs[c] for c in LAYER_INPUTS]))
    types = layers["layer_type"].astype(str).to_numpy()
    names = sorted(set(types))
    share = np.array([proxy_time[types == t].sum() for t in names]) / proxy_time.sum()
    kappa = np.maximum(share, 1.0 / (2 * len(names)))
    kappa = kappa / kappa.sum()
    blocks = []
    for name, weight in zip(names, kappa, strict=True):
        mask = types == name
        rows = _second_order(_standardise(values[mask]))
        blocks.append(_block(f"layer:{name}", float(weight), _factors(rows, graph[mask], n)))
    blocks.append(_block("gnn", gnn_weight, _gnn_rows(layers, graph, flops, cells, n)))
    return PredictorInformation(tuple(blocks), n)


def _gnn_rows(layers, graph, flops, cells, n) -> np.ndarray:
    """``(N, 1, p)``: the GNN block's one row per candidate (cell indicators, log size, FLOPs)."""
    size = np.bincount(graph, minlength=n).astype(float)
    total = np.bincount(graph, weights=flops, minlength=n)
    levels, code = np.unique(np.asarray(cells, dtype=str), return_inverse=True)
    onehot = np.eye(len(levels))[code]
    rows = np.column_stack([onehot, _standardise(np.log1p(np.column_stack([size, total])))])
    return rows[:, None, :]


def _gains(info: PredictorInformation, current: list[np.ndarray], weights: np.ndarray):
    """``(N,)``: the criterion's increase from adding each candidate to the design ``current``.

    By the matrix determinant lemma, ``log det(M + w F^T F) - log det M =
    log det(I_r + w F M^-1 F^T)``: an ``r x r`` determinant per candidate (``r``, the distinct
    calls of a layer type in one workload, is 1-4 for the presets) instead of a ``p x p`` one.
    On the quick preset (96 of 1,564 candidates, 20 starts) this chose the same design as the
    direct ``p x p`` log determinants in 24-29 s (three runs) instead of 154-167 s (two runs),
    on this project's 2-core host.
    """
    gain = np.zeros(info.n_candidates)
    for block, m in zip(info.blocks, current, strict=True):
        f = block.factors
        projected = (f.reshape(-1, f.shape[2]) @ np.linalg.inv(m)).reshape(f.shape)  # one GEMM
        inner = projected @ f.transpose(0, 2, 1)
        inner *= weights[:, None, None]
        inner += np.eye(inner.shape[1])
        gain += block.weight / block.dim * _small_log_det(inner)
    return gain


def _small_log_det(m: np.ndarray) -> np.ndarray:
    """``(N, r, r) -> (N,)``: log determinants of positive definite matrices.

    Closed forms for ``r <= 3`` (no per-matrix LAPACK call), ``numpy.linalg.slogdet`` above.
    """
    r = m.shape[1]
    if r == 1:
        det = m[:, 0, 0]
    elif r == 2:
        det = m[:, 0, 0] * m[:, 1, 1] - m[:, 0, 1] * m[:, 1, 0]
    elif r == 3:
        det = (
            m[:, 0, 0] * (m[:, 1, 1] * m[:, 2, 2] - m[:, 1, 2] * m[:, 2, 1])
            - m[:, 0, 1] * (m[:, 1, 0] * m[:, 2, 2] - m[:, 1, 2] * m[:, 2, 0])
            + m[:, 0, 2] * (m[:, 1, 0] * m[:, 2, 1] - m[:, 1, 1] * m[:, 2, 0])
        )
    else:
        return _log_det(m)
    return np.log(det)


def _matrices(info: PredictorInformation, chosen: list[int], weights: np.ndarray):
    return [
        np.tensordot(weights[chosen], b.per_candidate[chosen], axes=1) + b.eps * np.eye(b.dim)
        for b in info.blocks
    ]


def _greedy(info, start: list[int], n: int, allowed: np.ndarray, weights) -> list[int]:
    chosen = list(start)
    current = _matrices(info, chosen, weights)
    while len(chosen) < n:
        gain = _gains(info, current, weights)
        gain[~allowed] = -np.inf
        gain[chosen] = -np.inf
        best = int(np.argmax(gain))
        chosen.append(best)
        for block, m in zip(info.blocks, current, strict=True):
            m += weights[best] * block.per_candidate[best]
    return chosen


def _exchange(info, chosen: list[int], fixed: set[int], allowed, weights, passes: int):
    """Fedorov exchange: swap a chosen point for an unchosen one while ``Phi`` improves."""
    value = info.criterion(chosen, weights)
    for _ in range(passes):
        improved = False
        for pos in range(len(chosen)):
            if chosen[pos] in fixed:
                continue
            rest = chosen[:pos] + chosen[pos + 1 :]
            current = _matrices(info, rest, weights)
            gain = _gains(info, current, weights)
            gain[~allowed] = -np.inf
            gain[rest] = -np.inf
            best = int(np.argmax(gain))
            trial = info.criterion(rest + [best], weights)
            if best != chosen[pos] and trial > value + 1e-9:
                chosen[pos], value, improved = best, trial, True
        if not improved:
            break
    return chosen, value


def matched_d_optimal_indices(
    info: PredictorInformation,
    n: int,
    seed: int = 0,
    n_starts: int = 3,
    include: Sequence[int] = (),
    exclude: Sequence[int] = (),
    candidate_weights: np.ndarray | None = None,
    exchange_passes: int = 2,
) -> tuple[np.ndarray, float]:
    """Choose ``n`` candidates maximising the matched compound D-criterion (module docstring).

    Args:
        info: the candidates' information (:func:`predictor_information`).
        n: total design size, ``include`` counted.
        seed: seed of the random starts.
        n_starts: random starts (each: a random point, then greedy, then exchange); with
            ``include`` one start from the included design.
        include: candidates that stay in the design (already profiled).
        exclude: candidates that must not be chosen.
        candidate_weights: ``(N,)`` positive weight of each candidate's information (``None``:
            1; :func:`sequential_indices` passes the normalised uncertainty).
        exchange_passes: exchange passes per start.

    Returns:
        ``(indices, criterion)``: the chosen candidate indices sorted ascending, shape ``(n,)``,
        and ``Phi`` of the design.

    Raises:
        DesignError: ``n`` below ``len(include)`` or above the admissible candidates, or a
            non-positive candidate weight.
    """
    weights = np.ones(info.n_candidates) if candidate_weights is None else candidate_weights
    weights = np.asarray(weights, dtype=float)
    if weights.shape != (info.n_candidates,) or not np.all(weights > 0):
        raise DesignError(
            "matched D-optimal: candidate_weights must be positive, one per candidate"
        )
    allowed = np.ones(info.n_candidates, dtype=bool)
    allowed[list(exclude)] = False
    allowed[list(include)] = False
    n_free = int(allowed.sum())
    if not len(include) <= n <= len(include) + n_free:
        raise DesignError(
            f"matched D-optimal: n={n} must lie in [{len(include)}, {len(include) + n_free}] "
            f"({len(include)} included, {n_free} admissible)"
        )
    rng = np.random.default_rng(seed)
    best: tuple[list[int], float] = ([], -np.inf)
    # With an included design the greedy start is that design: one deterministic start.
    for _ in range(1 if len(include) else max(1, n_starts)):
        start = list(include)
        if not start and n:
            start.append(int(rng.choice(np.flatnonzero(allowed))))
        chosen = _greedy(info, start, n, allowed, weights)
        chosen, value = _exchange(info, chosen, set(include), allowed, weights, exchange_passes)
        if value > best[1]:
            best = (chosen, value)
    return np.sort(np.asarray(best[0], dtype=int)), float(best[1])


def sequential_indices(
    info: PredictorInformation,
    profiled: Sequence[int],
    k: int,
    uncertainty: np.ndarray,
    exclude: Sequence[int] = (),
) -> np.ndarray:
    """The next ``k`` workloads to profile: uncertainty-weighted D-optimal augmentation.

    Args:
        info: information of the candidates, the profiled ones included.
        profiled: indices already in the design (kept).
        k: workloads to add.
        uncertainty: ``(N,)`` the predictor's uncertainty about each candidate (relative seed
            disagreement or interval width; positive where admissible, ignored where profiled).
        exclude: inadmissible candidates (outside the constraints, failed before).

    Returns:
        The ``k`` added indices, sorted ascending.

    Raises:
        DesignError: ``k`` exceeds the admissible candidates or an uncertainty is not finite
            and positive where admissible.
    """
    uncertainty = np.asarray(uncertainty, dtype=float)
    admissible = np.ones(info.n_candidates, dtype=bool)
    admissible[list(profiled)] = False
    admissible[list(exclude)] = False
    values = uncertainty[admissible]
    if uncertainty.shape != (info.n_candidates,) or not np.all(np.isfinite(values) & (values > 0)):
        raise DesignError(
            "sequential design: uncertainty must be finite and positive per candidate"
        )
    weights = np.ones(info.n_candidates)
    weights[admissible] = values / values.mean()
    idx, _ = matched_d_optimal_indices(
        info,
        len(profiled) + k,
        n_starts=1,
        include=profiled,
        exclude=exclude,
        candidate_weights=weights,
        exchange_passes=1,
    )
    return np.setdiff1d(idx, np.asarray(profiled, dtype=int))


def candidate_information(workloads: Sequence) -> PredictorInformation:
    """:func:`predictor_information` of candidate workloads, from their traced layer graphs.

    Args:
        workloads: the candidates (:class:`~scaledl.workloads.spec.Workload`); graphs are traced
            on the meta device once per architecture (:func:`scaledl.graph.features.
            build_graph_set`), cells are (:func:`~scaledl.workloads.identity.family_key`,
            world size).

    Returns:
        The information of each candidate, in order.

    Raises:
        scaledl.workloads.fields.WorkloadError: a candidate's model cannot be traced.
    """
    # Imported here: tracing needs torch and transformers, which the design's other paths avoid.
    from scaledl.graph.features import build_graph_set

    cells = [f"{family_key(w)}/{w.world_size}" for w in workloads]
    return predictor_information(build_graph_set(list(workloads)).nodes, cells)
