"""The layer graph of a workload: layer calls, all-reduce buckets and an optimizer step.

Nodes, in this order:

1. one ``layer`` node per unit call, in execution order (``layer_index`` 0..L-1), with the
   analytical features of :mod:`scaledl.graph.tracing`;
2. for training with ``world_size > 1``, one ``allreduce`` node per DDP gradient bucket, with its
   bytes and the world size. Buckets follow DDP's defaults: parameters in reverse registration
   order, the first bucket capped at 1 MiB, the others at 25 MiB (``bucket_cap_mb``; see
   ``torch.nn.parallel.DistributedDataParallel``);
3. for training, one ``optimizer`` node (AdamW step over all parameters).

Edges (``edge_type``): ``sequential`` (call i -> call i+1), ``residual`` (the input of a
transformer block -> its feed-forward and its last unit), ``cross`` (the last encoder unit -> every
cross-attention call), ``gradient`` (a layer -> the bucket holding its parameters' gradients) and
``update`` (a bucket, or the last layer when there are none -> the optimizer).

The ATen operators each layer call dispatched are kept in :attr:`LayerGraph.operators` (one row
per operator, :data:`OPERATOR_COLUMNS`), the input of the kernel-aware operator models.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from scaledl.graph.tracing import trace_units
from scaledl.workloads.spec import Workload

FIRST_BUCKET_BYTES = 1024 * 1024
BUCKET_CAP_BYTES = 25 * 1024 * 1024
EDGE_TYPES = ("sequential", "residual", "cross", "gradient", "update")
#: Analytical features of a layer call (also stored beside each measured layer time).
LAYER_FEATURE_COLUMNS = (
    "fwd_flops",
    "bwd_flops",
    "fwd_ops",
    "params",
    "input_bytes",
    "output_bytes",
)

NODE_COLUMNS = (
    "node_index",
    "node_kind",
    "layer_index",
    "layer_name",
    "layer_type",
    "block",
    *LAYER_FEATURE_COLUMNS,
    "input_shape",
    "output_shape",
    "allreduce_bytes",
)
#: Columns of :attr:`LayerGraph.operators` (shapes as tuples of ints, sizes in bytes).
OPERATOR_COLUMNS = (
    "layer_index",
    "op_index",
    "op",
    "input_shapes",
    "input_itemsizes",
    "output_shapes",
    "output_itemsizes",
)


@dataclass(frozen=True)
class LayerGraph:
    """A workload's layer graph.

    Attributes:
        workload: the workload.
        nodes: one row per node, columns :data:`NODE_COLUMNS` (FLOPs as floats, bytes and
            parameter counts as integers; ``layer_index`` is -1 for non-layer nodes).
        edges: columns ``src``, ``dst`` (node indices) and ``edge_type`` (:data:`EDGE_TYPES`).
        operators: the ATen operators of every layer call, in execution order
            (:data:`OPERATOR_COLUMNS`); empty when not traced.
    """

    workload: Workload
    nodes: pd.DataFrame
    edges: pd.DataFrame
    operators: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=list(OPERATOR_COLUMNS))
    )

    @property
    def layers(self) -> pd.DataFrame:
        """The ``layer`` nodes only, indexed by position (``layer_index``)."""
        return self.nodes[self.nodes["node_kind"] == "layer"]

    @property
    def total_fwd_flops(self) -> float:
        """Forward FLOPs of one iteration on one rank."""
        return float(self.nodes["fwd_flops"].sum())

    @property
    def total_params(self) -> int:
        """Trainable parameters of the model."""
        return int(self.layers.drop_duplicates("layer_name")["params"].sum())


def build_layer_graph(workload: Workload, model: torch.nn.Module | None = None) -> LayerGraph:
    """Build the layer graph of a workload without running it on real data.

    Args:
        workload: a validated workload.
        model: its meta model, passed to :func:`~scaledl.graph.tracing.trace_units` (built
            there when ``None``).

    Returns:
        The :class:`LayerGraph`.

    Raises:
        RuntimeError: the model could not be traced on the meta device.
    """
    calls, model = trace_units(workload, model)
    rows = []
    for i, c in enumerate(calls):
        rows.append(
            {
                "node_index": i,
                "node_kind": "layer",
                "layer_index": i,
                "layer_name": c.unit.name if c.call_index == 0 else f"{c.unit.name}#{c.call_index}",
                "layer_type": c.unit.layer_type,
                "block": c.unit.block,
                "fwd_flops": c.fwd_flops,
                "bwd_flops": c.bwd_flops,
                "fwd_ops": c.fwd_ops,
                "params": c.params,
                "input_bytes": c.input_bytes,
                "output_bytes": c.output_bytes,
                "input_shape": c.input_shape,
                "output_shape": c.output_shape,
                "allreduce_bytes": 0,
            }
        )
    edges: list[tuple[int, int, str]] = [(i, i + 1, "sequential") for i in range(len(calls) - 1)]
    edges += _residual_edges(calls)
    edges += _cross_edges(calls)

    train = workload.mode == "train"
    if train:
        buckets = _gradient_buckets(model, calls) if workload.world_size > 1 else []
        update_sources = []
        for b_index, (nbytes, layer_ids) in enumerate(buckets):
            node = len(rows)
            rows.append(_extra_node(node, "allreduce", f"bucket{b_index}", allreduce_bytes=nbytes))
            edges += [(lid, node, "gradient") for lid in sorted(layer_ids)]
            update_sources.append(node)
        total_params = sum(c.params for c in calls)
        node = len(rows)
        rows.append(_extra_node(node, "optimizer", "optimizer", params=total_params))
        edges += [(s, node, "update") for s in (update_sources or [len(calls) - 1])]

    nodes = pd.DataFrame(rows, columns=list(NODE_COLUMNS))
    edge_frame = pd.DataFrame(edges, columns=["src", "dst", "edge_type"])
    operators = pd.DataFrame(
        [
            (i, j, o.name, o.input_shapes, o.input_itemsizes, o.output_shapes, o.output_itemsizes)
            for i, c in enumerate(calls)
            for j, o in enumerate(c.operators)
        ],
        columns=list(OPERATOR_COLUMNS),
    )
    return LayerGraph(workload=workload, nodes=nodes, edges=edge_frame, operators=operators)


def _extra_node(index: int, kind: str, name: str, params: int = 0, allreduce_bytes: int = 0):
    return {
        "node_index": index,
        "node_kind": kind,
        "layer_index": -1,
        "layer_name": name,
        "layer_type": kind,
        "block": "",
        "fwd_flops": 0.0,
        "bwd_flops": 0.0,
        "fwd_ops": 0,
        "params": params,
        "input_bytes": 0,
        "output_bytes": 0,
        "input_shape": "",
        "output_shape": "",
        "allreduce_bytes": allreduce_bytes,
    }


def _residual_edges(calls) -> list[tuple[int, int, str]]:
    """Skip connections of each transformer block (an approximation read off the structure).

    The block's entry (the call before its first unit) links to the call after each attention
    unit of the block (where ``x + attention(x)`` is consumed) and to the call after the block
    (where the block's residual stream leaves it).
    """
    edges = []
    by_block: dict[str, list[int]] = {}
    for i, c in enumerate(calls):
        if c.unit.block:
            by_block.setdefault(f"{c.unit.block}#{c.call_index}", []).append(i)
    for members in by_block.values():
        entry = members[0] - 1
        if entry < 0:
            continue
        targets = {members[-1] + 1}
        targets |= {m + 1 for m in members if "attention" in calls[m].unit.layer_type}
        edges += [(entry, t, "residual") for t in sorted(targets) if entry + 1 < t < len(calls)]
    return edges


def _cross_edges(calls) -> list[tuple[int, int, str]]:
    """Encoder output -> each cross-attention call (encoder-decoder models)."""
    cross = [i for i, c in enumerate(calls) if c.unit.layer_type == "cross-attention"]
    if not cross:
        return []
    encoder = [i for i, c in enumerate(calls[: cross[0]]) if "encoder" in c.unit.name]
    source = encoder[-1] if encoder else cross[0] - 1
    return [(source, i, "cross") for i in cross if i != source + 1]


def _gradient_buckets(model, calls) -> list[tuple[int, set[int]]]:
    """DDP's default bucketing: reverse parameter order, 1 MiB first bucket then 25 MiB."""
    owner: dict[int, int] = {}
    for i, c in enumerate(calls):
        if c.call_index == 0:
            for p in c.unit.module.parameters():
                owner.setdefault(id(p), i)
    params = [p for p in model.parameters() if p.requires_grad]
    buckets: list[tuple[int, set[int]]] = []
    current_bytes, current_layers = 0, set()
    cap = FIRST_BUCKET_BYTES
    for p in reversed(params):
        current_bytes += p.numel() * p.element_size()
        if id(p) in owner:
            current_layers.add(owner[id(p)])
        if current_bytes >= cap:
            buckets.append((current_bytes, current_layers))
            current_bytes, current_layers, cap = 0, set(), BUCKET_CAP_BYTES
    if current_bytes:
        buckets.append((current_bytes, current_layers))
    return buckets


def edge_index(graph: LayerGraph) -> np.ndarray:
    """Edges as an integer array of shape (2, num_edges) (PyTorch Geometric layout)."""
    return graph.edges[["src", "dst"]].to_numpy(dtype=np.int64).T
