"""History: the runtime GNN over layout graphs, a learned correction of composed layouts.

Evaluated beside the layout recipe until issue 52 (``gnn`` and ``gnn_no_edges`` in
``docs/results/layouts.json``), never the product's: the recipe keeps the ridge correction.
Run through ``benchmarks/history/layout_variants.py``; imports ``scaledl``, nothing in
``scaledl`` imports it.

ScaleDL's GNN (:class:`~scaledl.models.gnn.RuntimeGNN`, arXiv 2511.04162 Sec. III-C) corrects
the additive prior of a data-parallel layer graph. Here the same graph Transformer corrects a
layout composition (:class:`~scaledl.parallel.predict.LayoutComposer`): its prior is the
composed iteration, its target ``log(measured)``, its graph the layers one rank of each stage
runs, as the composition saw them (:func:`layout_graphs`):

* **nodes**, one per layer: ``log1p`` of its predicted forward, backward and tensor-parallel
  all-reduce times (ms, one micro-batch on one rank), ``log1p`` of its parameter MiB, its
  stage's position (``stage / (p - 1)``), whether it sends an activation to the next stage,
  whether it belongs to a sharding unit, and the composition's parts of the whole iteration
  (:data:`~scaledl.parallel.recipe.CORRECTION_FEATURES`, the ridge correction's inputs) on
  every node, so the graph-level information of the two corrections is the same;
* **edges**: the layer order in both directions (the forward's data flow and the backward's
  gradient flow), with features forward / backward, crossing a stage boundary, and ``log1p``
  of the MiB sent across it (0 within a stage).

The ``no_edges`` ablation trains the same model on the same nodes without edges (no message
passing: a set model over the layers), the test of whether cross-layer structure helps that
issue 26 asks for. Decisions, fixed before any layout profile was read with them: the GNN's
own hyper-parameters (:class:`~scaledl.models.gnn_training.GNNTrainConfig` defaults), an
ensemble of :data:`SEEDS` fits (mean of the log predictions), each with early stopping on a
random quarter of the training workloads (:data:`VALIDATION_SHARE`, its own draw per seed),
equal weights (as the ridge correction).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from scaledl.models.gnn_training import GNNTrainConfig, GraphBatch, predict_gnn, train_gnn
from scaledl.models.threads import single_threaded
from scaledl.parallel.predict import LayoutComposer, LayoutPredictions
from scaledl.parallel.recipe import correction_features
from scaledl.workloads.spec import Workload

#: Node features, in column order (module docstring).
NODE_FEATURES = (
    "log1p_forward_ms",
    "log1p_backward_ms",
    "log1p_tp_allreduce_ms",
    "log1p_param_mib",
    "stage_position",
    "sends_activation",
    "in_sharding_unit",
)
#: Edge features, in column order (module docstring).
EDGE_FEATURES = ("forward", "backward", "crosses_stage", "log1p_boundary_mib")
#: Seeds of the ensemble (module docstring).
SEEDS = (0, 1, 2)
#: Share of the training workloads each seed holds out for early stopping.
VALIDATION_SHARE = 0.25
MIB = 2.0**20


@dataclass(frozen=True)
class LayoutGraph:
    """One workload's layout graph.

    Attributes:
        x: node features, shape (n_layers, len(NODE_FEATURES) + len(CORRECTION_FEATURES)).
        edge_index: shape (2, n_edges), int64.
        edge_attr: shape (n_edges, len(EDGE_FEATURES)).
        log_prior: log of the composed iteration, ms.
    """

    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    log_prior: float

    def without_edges(self) -> LayoutGraph:
        """The same nodes, no edge (the ``no_edges`` ablation)."""
        return LayoutGraph(self.x, np.zeros((2, 0), dtype=np.int64),
                           np.zeros((0, len(EDGE_FEATURES))), self.log_prior)  # fmt: skip


def layout_graphs(
    composer: LayoutComposer, pred: LayoutPredictions, ws: Sequence[Workload]
) -> list[LayoutGraph]:
    """The layout graph of every workload of ``composer`` (module docstring).

    Args:
        composer: the composer of ``ws`` (its layer-wise inputs are the node times).
        pred: its composition of ``ws`` (the prior and the graph-level parts).
        ws: the workloads, in the composer's order.

    Returns:
        One :class:`LayoutGraph` per workload, in input order.

    Raises:
        ValueError: ``ws`` holds a workload the composer does not (its members index them).
    """
    parts = correction_features(pred, ws)
    graphs: list[LayoutGraph | None] = [None] * len(ws)
    for members, x in zip(composer.members, composer.inputs, strict=True):
        n_layers, pp = len(x.stage), int(x.stage.max()) + 1
        sends = np.zeros(n_layers)
        last = [np.flatnonzero(x.stage == s)[-1] for s in range(pp - 1)]
        sends[last] = 1.0
        src = np.arange(n_layers - 1)
        cross = (x.stage[1:] != x.stage[:-1]).astype(float)
        for j, i in enumerate(members):

            def col(values: np.ndarray, j: int = j) -> np.ndarray:
                values = np.asarray(values, dtype=float)
                return values[:, j] if values.ndim == 2 else values

            boundary = np.zeros(n_layers - 1)
            boundary[cross > 0] = np.log1p(col(x.boundary_bytes) / MIB)
            nodes = np.column_stack([
                np.log1p(col(x.forward_ms)), np.log1p(col(x.backward_ms)),
                np.log1p(col(x.tp_allreduce_ms)), np.log1p(x.param_bytes / MIB),
                x.stage / max(pp - 1, 1), sends, (x.unit >= 0).astype(float),
                np.broadcast_to(parts[i], (n_layers, parts.shape[1])),
            ])  # fmt: skip
            ones, zeros = np.ones_like(cross), np.zeros_like(cross)
            graphs[i] = LayoutGraph(
                x=nodes,
                edge_index=np.concatenate([np.stack([src, src + 1]), np.stack([src + 1, src])],
                                          axis=1).astype(np.int64),
                edge_attr=np.concatenate([np.column_stack([ones, zeros, cross, boundary]),
                                          np.column_stack([zeros, ones, cross, boundary])]),
                log_prior=float(np.log(max(pred.iteration_ms[i], 1e-9))),
            )  # fmt: skip
    missing = [i for i, g in enumerate(graphs) if g is None]
    if missing:
        raise ValueError(f"layout graphs: workloads {missing} are not in the composer")
    return graphs  # type: ignore[return-value]


def _batch(graphs: Sequence[LayoutGraph], y: np.ndarray | None = None) -> GraphBatch:
    """PyTorch Geometric's batch layout of some graphs (node indices offset per graph)."""
    offsets = np.cumsum([0] + [len(g.x) for g in graphs])[:-1]
    return GraphBatch(
        x=torch.from_numpy(np.concatenate([g.x for g in graphs]).astype(np.float32)),
        edge_index=torch.from_numpy(
            np.concatenate(
                [g.edge_index + o for g, o in zip(graphs, offsets, strict=True)], axis=1
            ).astype(np.int64)
        ),  # fmt: skip
        edge_attr=torch.from_numpy(
            np.concatenate([g.edge_attr for g in graphs]).astype(np.float32)
        ),
        batch=torch.from_numpy(np.repeat(np.arange(len(graphs)), [len(g.x) for g in graphs])),
        log_prior=torch.tensor([g.log_prior for g in graphs], dtype=torch.float32),
        y=None if y is None else torch.from_numpy(np.asarray(y, dtype=np.float32)),
    )


def fit_predict_gnn(
    graphs: Sequence[LayoutGraph],
    measured_ms: np.ndarray,
    train: np.ndarray,
    edges: bool = True,
    seeds: Sequence[int] = SEEDS,
) -> np.ndarray:
    """Fit the GNN correction on the training workloads, predict every workload.

    Args:
        graphs: the workloads' layout graphs (:func:`layout_graphs`).
        measured_ms: measured iteration times, shape (len(graphs),), ms.
        train: which workloads to fit on, bool, shape (len(graphs),).
        edges: message passing over the edges (``False``: the ``no_edges`` ablation).
        seeds: the ensemble's seeds (module docstring).

    Returns:
        Predicted iteration times, ms, shape (len(graphs),): the geometric mean of the seeds'.

    Raises:
        ValueError: fewer than two training workloads (nothing to stop early on).
    """
    graphs = list(graphs) if edges else [g.without_edges() for g in graphs]
    rows = np.flatnonzero(train)
    if len(rows) < 2:
        raise ValueError(f"layout GNN: {len(rows)} training workload(s), need at least 2")
    y = np.log(np.asarray(measured_ms, dtype=float))
    everything = _batch(graphs)
    logs = []
    with single_threaded():
        for seed in seeds:
            order = np.random.default_rng(seed).permutation(rows)
            n_val = max(1, round(VALIDATION_SHARE * len(rows)))
            val, fit = order[:n_val], order[n_val:]
            model, _ = train_gnn(
                _batch([graphs[i] for i in fit], y[fit]),
                _batch([graphs[i] for i in val], y[val]),
                use_prior=True,
                config=GNNTrainConfig(seed=seed),
            )
            logs.append(predict_gnn(model, everything))
    return np.exp(np.mean(logs, axis=0))
