"""Critical-path assembly of a training iteration from per-node times (DDP overlap of all-reduce).

A sum of layer times charges every gradient all-reduce in full. PyTorch's
``DistributedDataParallel`` does not wait for the end of backward: its reducer launches a bucket's
all-reduce as soon as the last gradient of that bucket is produced, in bucket order, while backward
goes on (Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel Training",
VLDB 2020, Sec. 3.2.3). Trace-replay simulators (dPRO, Hu et al., MLSys 2022; Lumos, Liang et al.,
MLSys 2025) replay exactly this dependency graph with measured operator times; here it runs on
*predicted* node times (:func:`~scaledl.models.methods.node_predictions`), over the layer graph of
:mod:`scaledl.graph.layer_graph`:

1. **forward**, one layer call after the other in execution order: it ends at
   ``F = sum(forward_ms)``;
2. **backward**, layer by layer in reverse execution order on the compute lane: the gradients of
   layer ``i`` are ready at ``F + sum(backward_ms of the layers j >= i)``; backward ends at
   ``F + B`` with ``B = sum(backward_ms)``;
3. each **all-reduce bucket** (an ``allreduce`` node) is ready when the last of its gradients is
   produced (the latest ready time over its ``gradient`` edges; a bucket without such an edge at
   the end of backward) and runs on one **communication lane** that serialises the buckets in
   bucket order (DDP reduces bucket ``k`` only after bucket ``k - 1``):
   ``start_k = max(ready_k, end_{k-1})``, ``end_k = start_k + allreduce_ms_k``;
4. the **optimizer step** starts when backward and the last all-reduce have finished:
   ``iteration = max(F + B, end_last) + optimizer_ms``.

Without all-reduce nodes (one rank, inference) the critical path is the plain sum. When every
bucket is only ready at the end of backward it is the sum too (no overlap); when the
communication hides under backward it is the compute time alone (full overlap): the assembly lies
between ``max(compute, communication)`` and the sum. The compute and communication lanes are
assumed independent; on a CPU, gloo's all-reduce competes with backward for the same cores, which
the GNN on top (or the reader of the ``critical_path`` baseline) has to account for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from scaledl.graph.layer_graph import EDGE_TYPES

#: Node kinds the assembly knows (:mod:`scaledl.graph.layer_graph`).
NODE_KINDS = ("layer", "allreduce", "optimizer")
_GRADIENT = EDGE_TYPES.index("gradient")


@dataclass(frozen=True)
class CriticalPath:
    """The assembled iteration of each graph and its parts, milliseconds.

    Attributes:
        iteration_ms: critical-path iteration time, shape (num_graphs,).
        forward_ms: forward time (sum over layer calls), shape (num_graphs,).
        backward_ms: backward time (sum over layer calls), shape (num_graphs,).
        allreduce_ms: summed all-reduce time of the buckets, shape (num_graphs,).
        exposed_allreduce_ms: the part of the all-reduce not hidden under backward (the
            communication lane's end after the end of backward), shape (num_graphs,).
        optimizer_ms: optimizer step, shape (num_graphs,).
    """

    iteration_ms: np.ndarray
    forward_ms: np.ndarray
    backward_ms: np.ndarray
    allreduce_ms: np.ndarray
    exposed_allreduce_ms: np.ndarray
    optimizer_ms: np.ndarray

    @property
    def sum_ms(self) -> np.ndarray:
        """The plain sum of every node (the ``additive`` assembly), shape (num_graphs,)."""
        return self.forward_ms + self.backward_ms + self.allreduce_ms + self.optimizer_ms


def assemble(
    graph: np.ndarray,
    node_kind: np.ndarray,
    layer_index: np.ndarray,
    node_index: np.ndarray,
    forward_ms: np.ndarray,
    backward_ms: np.ndarray,
    total_ms: np.ndarray,
    edge_index: np.ndarray,
    edge_type: np.ndarray,
    num_graphs: int,
) -> CriticalPath:
    """Critical path of graphs given as flat node and edge arrays (see the module docstring).

    Args:
        graph: graph index of every node, in ``[0, num_graphs)``.
        node_kind: ``layer``, ``allreduce`` or ``optimizer`` per node.
        layer_index: execution order of the layer calls within their graph (other nodes: any).
        node_index: position of the node in its graph; all-reduce buckets are served in this
            order (DDP's bucket order).
        forward_ms: forward time of layer nodes (the step time of optimizer nodes).
        backward_ms: backward time of layer nodes.
        total_ms: the all-reduce time of ``allreduce`` nodes (read only there).
        edge_index: global node indices of the edges, shape (2, num_edges).
        edge_type: index into :data:`~scaledl.graph.layer_graph.EDGE_TYPES` per edge; only
            ``gradient`` edges (layer -> its bucket) are read.
        num_graphs: number of graphs.

    Returns:
        The :class:`CriticalPath` of every graph.

    Raises:
        ValueError: an unknown node kind, arrays of different lengths, a negative or non-finite
            time, or a ``gradient`` edge that does not go from a layer to an all-reduce node.

    Shapes:
        node arrays: (num_nodes,); ``edge_index``: (2, num_edges); ``edge_type``: (num_edges,);
        every output: (num_graphs,).
    """
    graph = np.asarray(graph, dtype=np.int64)
    kind = np.asarray(node_kind).astype(str)
    times = {
        "forward_ms": np.asarray(forward_ms, dtype=np.float64),
        "backward_ms": np.asarray(backward_ms, dtype=np.float64),
        "total_ms": np.asarray(total_ms, dtype=np.float64),
    }
    is_layer, is_ar, is_opt = _check_nodes(graph, kind, layer_index, times)
    fwd, bwd, ar_ms = times["forward_ms"], times["backward_ms"], times["total_ms"]
    forward = np.bincount(graph[is_layer], weights=fwd[is_layer], minlength=num_graphs)
    backward = np.bincount(graph[is_layer], weights=bwd[is_layer], minlength=num_graphs)
    optimizer = np.bincount(graph[is_opt], weights=fwd[is_opt], minlength=num_graphs)
    allreduce = np.bincount(graph[is_ar], weights=ar_ms[is_ar], minlength=num_graphs)
    backward_end = forward + backward
    ready = _gradient_ready(graph, is_layer, np.asarray(layer_index), bwd, forward)
    # A bucket is ready when its last gradient is; without gradient edges at the end of backward.
    bucket_ready = np.full(len(graph), -np.inf)
    gradient = np.asarray(edge_type) == _GRADIENT
    src, dst = np.asarray(edge_index)[:, gradient]
    if len(src) and (not is_layer[src].all() or not is_ar[dst].all()):
        raise ValueError("critical path: a 'gradient' edge must go from a layer to an all-reduce")
    np.maximum.at(bucket_ready, dst, ready[src])
    bucket_ready = np.where(np.isfinite(bucket_ready), bucket_ready, backward_end[graph])
    lane_end = _communication_lane(
        graph, is_ar, np.asarray(node_index), bucket_ready, ar_ms, num_graphs
    )
    finish = np.maximum(backward_end, lane_end)
    return CriticalPath(
        iteration_ms=finish + optimizer,
        forward_ms=forward,
        backward_ms=backward,
        allreduce_ms=allreduce,
        exposed_allreduce_ms=finish - backward_end,
        optimizer_ms=optimizer,
    )


def _check_nodes(
    graph: np.ndarray, kind: np.ndarray, layer_index, times: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The layer, all-reduce and optimizer masks, after checking lengths, kinds and times.

    Raises:
        ValueError: see :func:`assemble`.
    """
    n = len(graph)
    for name, values in {**times, "node_kind": kind, "layer_index": layer_index}.items():
        if len(values) != n:
            raise ValueError(f"critical path: {name} has {len(values)} entries, graph has {n}")
    unknown = sorted(set(kind.tolist()) - set(NODE_KINDS))
    if unknown:
        raise ValueError(f"critical path: field 'node_kind' has unknown value(s) {unknown}")
    is_layer, is_ar, is_opt = (kind == k for k in NODE_KINDS)
    for name, values in times.items():
        used = values[is_layer | is_opt] if name != "total_ms" else values[is_ar]
        if not np.all(np.isfinite(used)) or np.any(used < 0):
            raise ValueError(f"critical path: field {name!r} must be finite and >= 0")
    return is_layer, is_ar, is_opt


def _gradient_ready(
    graph: np.ndarray,
    is_layer: np.ndarray,
    layer_index: np.ndarray,
    bwd: np.ndarray,
    forward: np.ndarray,
) -> np.ndarray:
    """Gradient ready time of every layer: F + the backward of itself and every later layer.

    Returns:
        Milliseconds per node, shape (num_nodes,) (0 for the other nodes).
    """
    ready = np.zeros(len(graph))
    layers = np.flatnonzero(is_layer)
    order = layers[np.lexsort((-layer_index[layers], graph[layers]))]
    done = np.cumsum(bwd[order])
    first = np.r_[True, graph[order][1:] != graph[order][:-1]]
    start_of_graph = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    before = np.r_[0.0, done][start_of_graph]  # backward of the graph's earlier-ending layers
    ready[order] = forward[graph[order]] + done - before
    return ready


def _communication_lane(
    graph: np.ndarray,
    is_ar: np.ndarray,
    node_index: np.ndarray,
    bucket_ready: np.ndarray,
    allreduce_ms: np.ndarray,
    num_graphs: int,
) -> np.ndarray:
    """End of the communication lane per graph: buckets served in node order, one at a time.

    Vectorised over graphs: the k-th bucket of every graph is served in one step.

    Returns:
        Milliseconds, shape (num_graphs,) (0 for a graph without buckets).
    """
    lane_end = np.zeros(num_graphs)
    buckets = np.flatnonzero(is_ar)
    buckets = buckets[np.lexsort((node_index[buckets], graph[buckets]))]
    rank = pd.Series(graph[buckets]).groupby(graph[buckets]).cumcount().to_numpy()
    for k in range(int(rank.max()) + 1 if len(rank) else 0):
        these = buckets[rank == k]
        g = graph[these]
        lane_end[g] = np.maximum(bucket_ready[these], lane_end[g]) + allreduce_ms[these]
    return lane_end


def critical_path(gs, times: pd.DataFrame) -> CriticalPath:
    """Critical path of every graph of a graph set from per-node predicted times.

    Args:
        gs: the graphs (:class:`~scaledl.graph.features.GraphSet`).
        times: aligned with ``gs.nodes``: ``forward_ms``, ``backward_ms`` and ``total_ms`` per
            node (:func:`~scaledl.models.methods.node_predictions`: the all-reduce time in
            ``total_ms`` of bucket nodes, the optimizer step in ``forward_ms``).

    Returns:
        The :class:`CriticalPath` (``iteration_ms`` of shape (num_graphs,)).

    Raises:
        ValueError: see :func:`assemble`.
    """
    nodes = gs.nodes
    return assemble(
        graph=gs.graph,
        node_kind=nodes["node_kind"].to_numpy(),
        layer_index=nodes["layer_index"].to_numpy(),
        node_index=nodes["node_index"].to_numpy(),
        forward_ms=times["forward_ms"].to_numpy(dtype=np.float64),
        backward_ms=times["backward_ms"].to_numpy(dtype=np.float64),
        total_ms=times["total_ms"].to_numpy(dtype=np.float64),
        edge_index=gs.edge_index,
        edge_type=gs.edge_type,
        num_graphs=len(gs.workloads),
    )
