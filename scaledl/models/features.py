"""Features of workloads and of their layer-graph nodes, fast for large batches of workloads.

Layer graphs are built once per *architecture* (the spec without ``batch_size``, ``world_size``,
``num_nodes`` and ``dataset_size``) at batch sizes 1 and 2, and every batch-dependent node
column is extended affinely: ``f(b) = f(1) + (f(2) - f(1)) * (b - 1)``. This is exact for every
column that is affine in the batch size, which holds for the FLOPs and activation bytes of every
transformer operation, so predicting 10,000 workloads costs one meta trace per architecture.
All-reduce bucket nodes exist only when training on more than one rank.

Node features (:func:`node_feature_matrix`), shape (num_nodes, :data:`NUM_NODE_FEATURES`):
one-hot ``layer_type`` over :data:`~scaledl.graph.units.LAYER_TYPES`; ``log1p`` of forward and
backward FLOPs, ATen operator count, parameters, input and output bytes and all-reduce bytes; the workload's
``log2`` batch size, sequence length, hidden size and world size, and a train flag; and, for
ScaleDL (not for the graph-only baseline), ``log1p`` of the layer-wise predicted forward,
backward and total milliseconds of the node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from scaledl.graph.layer_graph import EDGE_TYPES, LayerGraph, build_layer_graph
from scaledl.graph.units import LAYER_TYPES
from scaledl.workloads.spec import Workload

_SCALED = ("fwd_flops", "bwd_flops", "input_bytes", "output_bytes")
_ARCH_EXCLUDE = {"batch_size", "world_size", "num_nodes", "dataset_size"}
NODE_NUMERIC = (
    "fwd_flops",
    "bwd_flops",
    "fwd_ops",
    "params",
    "input_bytes",
    "output_bytes",
    "allreduce_bytes",
)
WORKLOAD_NUMERIC = ("batch_size", "seq_len", "hidden_size", "world_size")
NUM_PREDICTION_FEATURES = 3
NUM_NODE_FEATURES = (
    len(LAYER_TYPES) + len(NODE_NUMERIC) + len(WORKLOAD_NUMERIC) + 1 + NUM_PREDICTION_FEATURES
)
NUM_EDGE_FEATURES = len(EDGE_TYPES)


@dataclass(frozen=True)
class _Template:
    nodes_b1: pd.DataFrame
    nodes_b2: pd.DataFrame
    edges: pd.DataFrame


def architecture_key(workload: Workload) -> str:
    """JSON of the spec fields that shape the layer graph's structure."""
    return json.dumps(workload.model_dump(mode="json", exclude=_ARCH_EXCLUDE), sort_keys=True)


@lru_cache(maxsize=4096)
def _template(key: str) -> _Template:
    record = json.loads(key)
    base = Workload.parse({**record, "batch_size": 1, "world_size": 2, "num_nodes": 1})
    g1 = build_layer_graph(base)
    g2 = build_layer_graph(base.model_copy(update={"batch_size": 2}))
    return _Template(g1.nodes, g2.nodes, g1.edges)


def workload_graph(workload: Workload) -> LayerGraph:
    """The layer graph of a workload, from the cached per-architecture template.

    Returns:
        A :class:`~scaledl.graph.layer_graph.LayerGraph` equal to
        ``build_layer_graph(workload)`` in every column that is affine in the batch size.
    """
    t = _template(architecture_key(workload))
    nodes = t.nodes_b1.copy()
    b = workload.batch_size
    for col in _SCALED:
        nodes[col] = t.nodes_b1[col] + (t.nodes_b2[col] - t.nodes_b1[col]) * (b - 1)
    edges = t.edges
    if workload.mode == "train" and workload.world_size == 1:
        buckets = nodes.index[nodes["node_kind"] == "allreduce"]
        if len(buckets):
            nodes, edges = _drop_buckets(nodes, edges, set(buckets))
    return LayerGraph(workload=workload, nodes=nodes, edges=edges)


def _drop_buckets(nodes: pd.DataFrame, edges: pd.DataFrame, buckets: set[int]):
    keep = nodes[~nodes["node_index"].isin(buckets)].reset_index(drop=True)
    remap = {old: new for new, old in enumerate(keep["node_index"])}
    keep["node_index"] = range(len(keep))
    opt = remap[int(nodes.loc[nodes["node_kind"] == "optimizer", "node_index"].iloc[0])]
    last_layer = int(keep.loc[keep["node_kind"] == "layer", "node_index"].max())
    kept = edges[~edges["src"].isin(buckets) & ~edges["dst"].isin(buckets)].copy()
    kept["src"] = kept["src"].map(remap)
    kept["dst"] = kept["dst"].map(remap)
    extra = pd.DataFrame([{"src": last_layer, "dst": opt, "edge_type": "update"}])
    return keep, pd.concat([kept, extra], ignore_index=True)


def node_feature_matrix(graph: LayerGraph, predicted_ms: np.ndarray | None = None) -> np.ndarray:
    """Node features of one graph.

    Args:
        graph: the layer graph.
        predicted_ms: layer-wise predictions of shape (num_nodes, 3): forward, backward and
            total milliseconds per node; ``None`` leaves those columns at zero (graph-only).

    Returns:
        float32 array of shape (num_nodes, :data:`NUM_NODE_FEATURES`).
    """
    nodes = graph.nodes
    w = graph.workload
    n = len(nodes)
    onehot = np.zeros((n, len(LAYER_TYPES)), dtype=np.float32)
    type_index = {t: i for i, t in enumerate(LAYER_TYPES)}
    other = type_index["other"]
    for row, layer_type in enumerate(nodes["layer_type"]):
        onehot[row, type_index.get(layer_type, other)] = 1.0
    numeric = np.log1p(nodes[list(NODE_NUMERIC)].to_numpy(dtype=np.float64))
    workload_cols = np.log2(
        np.array([[w.batch_size, w.seq_len, w.hidden_size or 1, w.world_size]], dtype=np.float64)
    ).repeat(n, axis=0)
    train = np.full((n, 1), 1.0 if w.mode == "train" else 0.0)
    preds = (
        np.zeros((n, NUM_PREDICTION_FEATURES))
        if predicted_ms is None
        else np.log1p(np.asarray(predicted_ms, dtype=np.float64))
    )
    return np.hstack([onehot, numeric, workload_cols, train, preds]).astype(np.float32)


def edge_feature_matrix(graph: LayerGraph) -> tuple[np.ndarray, np.ndarray]:
    """Edge index of shape (2, num_edges) and one-hot edge types of shape (num_edges, 5)."""
    edges = graph.edges
    index = edges[["src", "dst"]].to_numpy(dtype=np.int64).T
    attr = np.zeros((len(edges), NUM_EDGE_FEATURES), dtype=np.float32)
    type_index = {t: i for i, t in enumerate(EDGE_TYPES)}
    attr[np.arange(len(edges)), [type_index[t] for t in edges["edge_type"]]] = 1.0
    return index, attr


def workload_frame(workloads: list[Workload]) -> pd.DataFrame:
    """Workload-level numeric features (global-feature baseline and epoch model).

    Returns:
        One row per workload: ``workload_id`` and log2 of hidden size, layers, heads,
        intermediate size, sequence length, batch size, world size, plus log1p of total
        forward FLOPs and parameters, a train flag and ``steps_per_epoch``.
    """
    rows = []
    for w in workloads:
        g = workload_graph(w)
        layers = g.nodes[g.nodes["node_kind"] == "layer"]
        rows.append(
            {
                "workload_id": w.workload_id,
                "log2_hidden_size": np.log2(w.hidden_size or 1),
                "log2_num_layers": np.log2(w.num_layers or 1),
                "log2_num_heads": np.log2(w.num_heads or 1),
                "log2_intermediate_size": np.log2(w.intermediate_size or 1),
                "log2_seq_len": np.log2(w.seq_len),
                "log2_batch_size": np.log2(w.batch_size),
                "log2_world_size": np.log2(w.world_size),
                "log1p_fwd_flops": np.log1p(layers["fwd_flops"].sum()),
                "log1p_bwd_flops": np.log1p(layers["bwd_flops"].sum()),
                "log1p_params": np.log1p(layers["params"].sum()),
                "log1p_activation_bytes": np.log1p(layers["output_bytes"].sum()),
                "train": 1.0 if w.mode == "train" else 0.0,
                "steps_per_epoch": w.steps_per_epoch,
            }
        )
    return pd.DataFrame(rows)
