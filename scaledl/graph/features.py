"""Layer graphs of many workloads at once, as flat arrays, and the features the models read.

Layer graphs are built once per *architecture* (the spec without ``batch_size``, ``world_size``,
``num_nodes``, ``dataset_size``, ``device_name`` and ``backend``: the meta trace depends on
neither device nor backend) at batch sizes 1 and 2, and every batch-dependent node
column is extended affinely: ``f(b) = f(1) + (f(2) - f(1)) * (b - 1)``. This is exact for every
column affine in the batch size, which holds for the FLOPs and activation bytes of every
transformer operation, so 10,000 workloads cost one meta trace per architecture. All-reduce
bucket nodes exist only when training on more than one rank.

A :class:`GraphSet` concatenates the graphs of a list of workloads (PyTorch Geometric's
"batch" layout: node arrays, a global ``edge_index``, a graph index per node), built with
array operations per architecture, not per workload.

Node features (:func:`node_feature_matrix`), shape (num_nodes, :data:`NUM_NODE_FEATURES`):
one-hot ``layer_type`` over :data:`~scaledl.graph.units.LAYER_TYPES`; ``log1p`` of forward and
backward FLOPs, ATen operator count, parameters, input and output bytes and all-reduce bytes;
the workload's ``log2`` batch size, sequence length, hidden size and world size, and a train
flag; and, for ScaleDL (not for the graph-only baseline), ``log1p`` of the layer-wise predicted
forward, backward and total milliseconds of the node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from scaledl.graph import trace_cache
from scaledl.graph.layer_graph import (
    EDGE_TYPES,
    LAYER_FEATURE_COLUMNS,
    LayerGraph,
    build_layer_graph,
)
from scaledl.graph.units import LAYER_TYPES
from scaledl.workloads.builders import build_model, describe_workload
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.identity import architecture_key
from scaledl.workloads.spec import Workload

_SCALED = ("fwd_flops", "bwd_flops", "input_bytes", "output_bytes")
NODE_NUMERIC = (*LAYER_FEATURE_COLUMNS, "allreduce_bytes")
WORKLOAD_NUMERIC = ("batch_size", "seq_len", "hidden_size", "world_size")
_NODE_TEXT = ("node_kind", "layer_name", "layer_type")
NUM_PREDICTION_FEATURES = 3
NUM_NODE_FEATURES = (
    len(LAYER_TYPES) + len(NODE_NUMERIC) + len(WORKLOAD_NUMERIC) + 1 + NUM_PREDICTION_FEATURES
)
NUM_EDGE_FEATURES = len(EDGE_TYPES)
_TYPE_INDEX = {t: i for i, t in enumerate(LAYER_TYPES)}
_EDGE_INDEX = {t: i for i, t in enumerate(EDGE_TYPES)}


@dataclass(frozen=True)
class _Template:
    """One architecture's graph at batch 1 and the per-sample increment, as arrays."""

    base: dict[str, np.ndarray]
    slope: dict[str, np.ndarray]
    text: dict[str, np.ndarray]
    layer_index: np.ndarray
    node_index: np.ndarray
    edge_index: np.ndarray
    edge_type: np.ndarray


@lru_cache(maxsize=4096)
def _graphs_at_batch_1_and_2(key: str) -> tuple[LayerGraph, LayerGraph]:
    base = Workload.parse({**json.loads(key), "batch_size": 1, "world_size": 2, "num_nodes": 1})
    model = build_model(base, device="meta")  # one build traced at both batch sizes
    return (
        build_layer_graph(base, model),
        build_layer_graph(base.model_copy(update={"batch_size": 2}), model),
    )


def check_traceable(workload: Workload, where: str) -> None:
    """Build and trace the workload's model on the meta device, or say why it cannot be.

    The traces are the cached ones predictions use (:func:`architecture_key`; in memory, and
    on disk in :mod:`scaledl.graph.trace_cache`), so checking costs nothing extra before a
    prediction.

    Args:
        workload: a parsed workload.
        where: the file and row it came from (``"workloads.csv row 3"``), named in errors.

    Raises:
        WorkloadError: any failure of building or tracing, naming ``where``, the family,
            config and architecture fields, and the library's message.
    """
    try:
        _templates(architecture_key(workload))
    except WorkloadError as exc:
        raise WorkloadError(f"{where}: {exc}") from exc
    except Exception as exc:
        raise WorkloadError(
            f"{where}: {describe_workload(workload)}: cannot build or trace the model: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def architecture_graphs(workload: Workload) -> tuple[LayerGraph, LayerGraph]:
    """The (cached) layer graphs of the workload's architecture at batch sizes 1 and 2."""
    return _graphs_at_batch_1_and_2(architecture_key(workload))


def _template(key: str, with_buckets: bool) -> _Template:
    return _templates(key)[with_buckets]


@lru_cache(maxsize=4096)
def _templates(key: str) -> tuple[_Template, _Template]:
    """The architecture's templates without and with all-reduce buckets (traced or cached)."""
    arrays = trace_cache.load(key)
    if arrays is not None:
        try:
            return _from_arrays(arrays, "0"), _from_arrays(arrays, "1")
        except KeyError as exc:  # an entry of another layout: trace again
            trace_cache.logger.warning("trace cache: entry without %s: tracing again", exc)
    templates = _trace_template(key, False), _trace_template(key, True)
    trace_cache.store(key, {**_to_arrays(templates[0], "0"), **_to_arrays(templates[1], "1")})
    return templates


def _to_arrays(t: _Template, tag: str) -> dict[str, np.ndarray]:
    """A template as a few plain arrays (strings fixed-width), for the trace cache.

    ``numbers``: base then slope of every :data:`NODE_NUMERIC` column, shape (14, n);
    ``text``: the :data:`_NODE_TEXT` columns, (3, n); ``indices``: layer and node index,
    (2, n); ``edges``: source, destination and type, (3, num_edges).
    """
    return {
        f"{tag}/numbers": np.stack([t.base[c] for c in NODE_NUMERIC]
                                   + [t.slope[c] for c in NODE_NUMERIC]),
        f"{tag}/text": np.stack([t.text[c].astype(str) for c in _NODE_TEXT]),
        f"{tag}/indices": np.stack([t.layer_index, t.node_index]),
        f"{tag}/edges": np.vstack([t.edge_index.reshape(2, -1), t.edge_type[None, :]]),
    }  # fmt: skip


def _from_arrays(arrays: dict[str, np.ndarray], tag: str) -> _Template:
    """Inverse of :func:`_to_arrays`.

    Raises:
        KeyError: an array is missing.
    """
    numbers = arrays[f"{tag}/numbers"].astype(np.float64)
    text, indices = arrays[f"{tag}/text"], arrays[f"{tag}/indices"].astype(np.int64)
    edges = arrays[f"{tag}/edges"].astype(np.int64)
    k = len(NODE_NUMERIC)
    return _Template(
        base={c: numbers[i].copy() for i, c in enumerate(NODE_NUMERIC)},
        slope={c: numbers[k + i].copy() for i, c in enumerate(NODE_NUMERIC)},
        text={c: text[i].astype(object) for i, c in enumerate(_NODE_TEXT)},
        layer_index=indices[0].copy(),
        node_index=indices[1].copy(),
        edge_index=edges[:2].copy(),
        edge_type=edges[2].copy(),
    )


def _trace_template(key: str, with_buckets: bool) -> _Template:
    g1, g2 = _graphs_at_batch_1_and_2(key)
    n1, n2, edges = g1.nodes, g2.nodes, g1.edges
    if not with_buckets:
        n1, edges = _drop_buckets(n1, edges)
        n2, _ = _drop_buckets(n2, g2.edges)
    base = {c: n1[c].to_numpy(dtype=np.float64) for c in NODE_NUMERIC}
    slope = {c: np.zeros(len(n1)) for c in NODE_NUMERIC}
    for c in _SCALED:
        slope[c] = n2[c].to_numpy(dtype=np.float64) - base[c]
    return _Template(
        base=base,
        slope=slope,
        text={c: n1[c].to_numpy(dtype=object) for c in _NODE_TEXT},
        layer_index=n1["layer_index"].to_numpy(dtype=np.int64),
        node_index=np.arange(len(n1), dtype=np.int64),
        edge_index=edges[["src", "dst"]].to_numpy(dtype=np.int64).T,
        edge_type=np.array([_EDGE_INDEX[t] for t in edges["edge_type"]], dtype=np.int64),
    )


def _drop_buckets(nodes: pd.DataFrame, edges: pd.DataFrame):
    """Remove all-reduce nodes (one rank); the last layer then feeds the optimizer."""
    buckets = set(nodes.loc[nodes["node_kind"] == "allreduce", "node_index"])
    if not buckets:
        return nodes, edges
    keep = nodes[~nodes["node_index"].isin(buckets)].reset_index(drop=True)
    remap = {old: new for new, old in enumerate(keep["node_index"])}
    keep["node_index"] = range(len(keep))
    kept = edges[~edges["src"].isin(buckets) & ~edges["dst"].isin(buckets)].copy()
    kept["src"] = kept["src"].map(remap)
    kept["dst"] = kept["dst"].map(remap)
    opt = int(keep.loc[keep["node_kind"] == "optimizer", "node_index"].iloc[0])
    last_layer = int(keep.loc[keep["node_kind"] == "layer", "node_index"].max())
    extra = pd.DataFrame([{"src": last_layer, "dst": opt, "edge_type": "update"}])
    return keep, pd.concat([kept, extra], ignore_index=True)


@dataclass
class GraphSet:
    """The layer graphs of several workloads, concatenated.

    Attributes:
        workloads: the workloads, graph ``g`` is ``workloads[g]``.
        nodes: one row per node: ``workload_id``, ``graph``, ``node_index``, ``layer_index``,
            ``node_kind``, ``layer_name``, ``layer_type``, :data:`NODE_NUMERIC`, the workload's
            ``batch_size``, ``seq_len``, ``hidden_size``, ``world_size``, ``num_nodes``,
            ``train``.
        edge_index: global node indices, shape (2, num_edges).
        edge_type: index into :data:`~scaledl.graph.layer_graph.EDGE_TYPES`, shape (num_edges,).
    """

    workloads: list[Workload]
    nodes: pd.DataFrame
    edge_index: np.ndarray
    edge_type: np.ndarray

    @property
    def graph(self) -> np.ndarray:
        """Graph index of every node, shape (num_nodes,)."""
        return self.nodes["graph"].to_numpy()

    def per_graph_sum(self, values: np.ndarray) -> np.ndarray:
        """Sum node values per graph, shape (num_graphs,)."""
        return np.bincount(self.graph, weights=values, minlength=len(self.workloads))

    def edge_attr(self) -> np.ndarray:
        """One-hot edge types, shape (num_edges, :data:`NUM_EDGE_FEATURES`), float32."""
        attr = np.zeros((len(self.edge_type), NUM_EDGE_FEATURES), dtype=np.float32)
        attr[np.arange(len(self.edge_type)), self.edge_type] = 1.0
        return attr

    def select(self, graphs: np.ndarray) -> GraphSet:
        """The sub-set of the given graph indices (renumbered in that order)."""
        graphs = np.asarray(graphs, dtype=np.int64)
        old_graph = self.graph
        new_of_old = np.full(len(self.workloads), -1)
        new_of_old[graphs] = np.arange(len(graphs))
        order = np.argsort(new_of_old[old_graph], kind="stable")
        order = order[new_of_old[old_graph][order] >= 0]
        nodes = self.nodes.iloc[order].reset_index(drop=True)
        nodes["graph"] = new_of_old[old_graph[order]]
        node_map = np.full(len(self.nodes), -1)
        node_map[order] = np.arange(len(order))
        keep = node_map[self.edge_index[0]] >= 0
        return GraphSet(
            workloads=[self.workloads[g] for g in graphs],
            nodes=nodes,
            edge_index=node_map[self.edge_index[:, keep]],
            edge_type=self.edge_type[keep],
        )

    def keep_nodes(self, mask: np.ndarray) -> GraphSet:
        """The same graphs with only the nodes where ``mask`` holds, and the edges among them.

        Args:
            mask: boolean, shape (num_nodes,).

        Returns:
            A graph set with the kept nodes in their order (``node_index`` unchanged: it is
            the position in the full graph) and the edges whose ends are both kept.
        """
        mask = np.asarray(mask, dtype=bool)
        new_index = np.cumsum(mask) - 1
        keep = mask[self.edge_index[0]] & mask[self.edge_index[1]]
        return GraphSet(
            workloads=self.workloads,
            nodes=self.nodes[mask].reset_index(drop=True),
            edge_index=new_index[self.edge_index[:, keep]],
            edge_type=self.edge_type[keep],
        )

    def without_edges(self) -> GraphSet:
        """The same nodes with no edge."""
        return GraphSet(
            self.workloads, self.nodes, np.zeros((2, 0), np.int64), np.zeros(0, np.int64)
        )


def build_graph_set(
    workloads: list[Workload], ids: list[str] | None = None, arch_keys: list[str] | None = None
) -> GraphSet:
    """Concatenated layer graphs of ``workloads`` (graph ``g`` belongs to ``workloads[g]``).

    Args:
        workloads: the workloads.
        ids: the ``workload_id`` column of each graph's nodes (default the workloads' ids;
            a caller that knows them, or predicts unnamed candidates, saves hashing each
            spec again).
        arch_keys: each workload's :func:`architecture_key`, when the caller knows them.

    Raises:
        scaledl.workloads.fields.WorkloadError: a workload's model cannot be traced.
    """
    groups: dict[tuple[str, bool], list[int]] = {}
    for g, w in enumerate(workloads):
        with_buckets = w.mode == "train" and w.world_size > 1
        key = architecture_key(w) if arch_keys is None else arch_keys[g]
        groups.setdefault((key, with_buckets), []).append(g)
    sizes = np.zeros(len(workloads), dtype=np.int64)
    templates = {}
    for key, members in groups.items():
        templates[key] = _template(*key)
        sizes[members] = len(templates[key].node_index)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    total = int(offsets[-1])
    numeric = {c: np.empty(total) for c in NODE_NUMERIC}
    text = {c: np.empty(total, dtype=object) for c in _NODE_TEXT}
    graph = np.empty(total, dtype=np.int64)
    node_index = np.empty(total, dtype=np.int64)
    layer_index = np.empty(total, dtype=np.int64)
    edge_parts, type_parts = [], []
    for key, members in groups.items():
        t = templates[key]
        members = np.array(members)
        n = len(t.node_index)
        idx = (offsets[members][:, None] + np.arange(n)[None, :]).ravel()
        batch = np.array([workloads[g].batch_size for g in members], dtype=np.float64)
        for c in NODE_NUMERIC:
            numeric[c][idx] = (
                t.base[c][None, :] + t.slope[c][None, :] * (batch - 1)[:, None]
            ).ravel()
        for c in _NODE_TEXT:
            text[c][idx] = np.tile(t.text[c], len(members))
        graph[idx] = np.repeat(members, n)
        node_index[idx] = np.tile(t.node_index, len(members))
        layer_index[idx] = np.tile(t.layer_index, len(members))
        edge_parts.append(
            (t.edge_index[:, None, :] + offsets[members][None, :, None]).reshape(2, -1)
        )
        type_parts.append(np.tile(t.edge_type, len(members)))
    per_graph = pd.DataFrame(
        {
            "workload_id": [w.workload_id for w in workloads] if ids is None else list(ids),
            "batch_size": [w.batch_size for w in workloads],
            "seq_len": [w.seq_len for w in workloads],
            "hidden_size": [w.hidden_size or 1 for w in workloads],
            "world_size": [w.world_size for w in workloads],
            "num_nodes": [w.num_nodes for w in workloads],
            "train": [1 if w.mode == "train" else 0 for w in workloads],
        }
    )
    nodes = pd.DataFrame(
        {"graph": graph, "node_index": node_index, "layer_index": layer_index, **text, **numeric}
    )
    nodes = pd.concat([per_graph.iloc[graph].reset_index(drop=True), nodes], axis=1)
    edge_index = np.concatenate(edge_parts, axis=1) if edge_parts else np.zeros((2, 0), np.int64)
    edge_type = np.concatenate(type_parts) if type_parts else np.zeros(0, np.int64)
    return GraphSet(list(workloads), nodes, edge_index, edge_type)


def workload_graph(workload: Workload) -> LayerGraph:
    """The layer graph of one workload from the cached per-architecture template.

    Returns:
        A :class:`~scaledl.graph.layer_graph.LayerGraph` equal to
        ``build_layer_graph(workload)`` in every column that is affine in the batch size.
    """
    gs = build_graph_set([workload])
    nodes = gs.nodes.drop(columns=["workload_id", "graph", *_WORKLOAD_COLUMNS])
    edges = pd.DataFrame(
        {
            "src": gs.edge_index[0],
            "dst": gs.edge_index[1],
            "edge_type": [EDGE_TYPES[i] for i in gs.edge_type],
        }
    )
    return LayerGraph(workload=workload, nodes=nodes, edges=edges)


_WORKLOAD_COLUMNS = ("batch_size", "seq_len", "hidden_size", "world_size", "num_nodes", "train")


def node_feature_matrix(gs: GraphSet, predicted_ms: np.ndarray | None = None) -> np.ndarray:
    """Node features of a graph set.

    Args:
        gs: the graphs.
        predicted_ms: layer-wise predictions of shape (num_nodes, 3): forward, backward and
            total milliseconds per node; ``None`` leaves those columns at zero (graph-only).

    Returns:
        float32 array of shape (num_nodes, :data:`NUM_NODE_FEATURES`).
    """
    nodes = gs.nodes
    n = len(nodes)
    onehot = np.zeros((n, len(LAYER_TYPES)), dtype=np.float32)
    other = _TYPE_INDEX["other"]
    cols = nodes["layer_type"].map(_TYPE_INDEX).fillna(other).to_numpy(dtype=np.int64)
    onehot[np.arange(n), cols] = 1.0
    numeric = np.log1p(nodes[list(NODE_NUMERIC)].to_numpy(dtype=np.float64))
    workload = np.log2(nodes[list(WORKLOAD_NUMERIC)].to_numpy(dtype=np.float64).clip(min=1))
    train = nodes[["train"]].to_numpy(dtype=np.float64)
    preds = (
        np.zeros((n, NUM_PREDICTION_FEATURES))
        if predicted_ms is None
        else np.log1p(np.asarray(predicted_ms, dtype=np.float64))
    )
    return np.hstack([onehot, numeric, workload, train, preds]).astype(np.float32)


def workload_frame(workloads: list[Workload]) -> pd.DataFrame:
    """Workload-level numeric features (global-feature baseline, analytical baseline).

    Returns:
        One row per workload: ``workload_id`` and log2 of hidden size, layers, heads,
        intermediate size, sequence length, batch size, world size, plus log1p of total
        forward/backward FLOPs, parameters and activation bytes, a train flag and
        ``steps_per_epoch``.
    """
    gs = build_graph_set(workloads)
    layer = (gs.nodes["node_kind"] == "layer").to_numpy()

    def total(column: str) -> np.ndarray:
        return gs.per_graph_sum(np.where(layer, gs.nodes[column].to_numpy(), 0.0))

    return pd.DataFrame(
        {
            "workload_id": [w.workload_id for w in workloads],
            "log2_hidden_size": np.log2([w.hidden_size or 1 for w in workloads]),
            "log2_num_layers": np.log2([w.num_layers or 1 for w in workloads]),
            "log2_num_heads": np.log2([w.num_heads or 1 for w in workloads]),
            "log2_intermediate_size": np.log2([w.intermediate_size or 1 for w in workloads]),
            "log2_seq_len": np.log2([w.seq_len for w in workloads]),
            "log2_batch_size": np.log2([w.batch_size for w in workloads]),
            "log2_world_size": np.log2([w.world_size for w in workloads]),
            "log1p_fwd_flops": np.log1p(total("fwd_flops")),
            "log1p_bwd_flops": np.log1p(total("bwd_flops")),
            "log1p_params": np.log1p(total("params")),
            "log1p_activation_bytes": np.log1p(total("output_bytes")),
            "train": [1.0 if w.mode == "train" else 0.0 for w in workloads],
            "steps_per_epoch": [w.steps_per_epoch for w in workloads],
        }
    )
