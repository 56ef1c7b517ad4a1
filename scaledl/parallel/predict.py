"""Iteration time of layout workloads from a predictor's layer-wise and all-reduce models.

For each layout workload (``tp_size``, ``pp_size``, ``micro_batches``, ``sharding`` beyond plain
DDP) the single-rank layer graph of one micro-batch (:func:`~scaledl.parallel.shard.base_workload`)
is split as one rank runs it (:mod:`scaledl.parallel.shard`), its layers are predicted by the
fitted layer-wise models (:func:`~scaledl.models.layerwise_stage.node_predictions`), the
collectives by :class:`~scaledl.parallel.collectives.CollectiveModel` (derived from the fitted
all-reduce model, or fitted on measured ``collective_timings``), and the iteration is composed by
:func:`scaledl.parallel.compose.compose`. Workloads of one *structure* (architecture, mode,
``tp``, ``pp``, ``m``, schedule, sharding) are composed together, one array entry per workload,
whatever their ``dp``, batch and nodes.

The GNN of a :class:`~scaledl.models.methods.GraphMethod` corrects DDP graphs only: its graphs
have no tensor-parallel, pipeline or sharding nodes. A layout prediction is the composition, and
:func:`layout_reasons` flags every layout as outside the training domain (the layer-wise models
were fitted on other shapes' ranks, the composition is not learned): an extrapolation without a
calibration stratum, so its interval is the widest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from scaledl.models.features import architecture_graphs, build_graph_set
from scaledl.models.layerwise_stage import node_predictions
from scaledl.parallel.collectives import CollectiveModel
from scaledl.parallel.compose import LayoutInputs, compose
from scaledl.parallel.shard import (
    base_workload,
    block_ordinal,
    shard_tensor_parallel,
    stage_of_layers,
    tensor_parallel_collective_bytes,
    unit_of_layers,
)
from scaledl.registry.guard import Extrapolation
from scaledl.workloads.identity import architecture_key
from scaledl.workloads.parallelism import is_data_parallel, layout_label
from scaledl.workloads.spec import PRECISION_BYTES, Workload


@dataclass(frozen=True)
class LayoutPredictions:
    """Composed iterations of layout workloads, in input order.

    Attributes:
        iteration_ms: shape (n,).
        pipeline_ms: the pipeline replay's makespan, shape (n,).
        bubble_fraction: idle share of the busiest stage, shape (n,).
        exposed_sync_ms: gradient synchronisation not hidden by the backward, shape (n,).
        optimizer_ms: optimizer step (and ZeRO-1's parameter all-gather), shape (n,).
        generic_types: per workload, the layer types the generic layer model predicted.
    """

    iteration_ms: np.ndarray
    pipeline_ms: np.ndarray
    bubble_fraction: np.ndarray
    exposed_sync_ms: np.ndarray
    optimizer_ms: np.ndarray
    generic_types: list[tuple[str, ...]]

    def frame(self) -> pd.DataFrame:
        """The time columns as a DataFrame."""
        return pd.DataFrame({k: v for k, v in self.__dict__.items() if k != "generic_types"})


def structure_key(w: Workload, arch_key: str | None = None) -> tuple:
    """What fixes the replay's structure: architecture, mode and every layout field but dp."""
    return (arch_key or architecture_key(w), w.mode, w.tp_size, w.pp_size, w.micro_batches,
            w.pipeline_schedule, w.sharding)  # fmt: skip


def predict_layouts(
    method,
    workloads: Sequence[Workload],
    collectives: CollectiveModel | None = None,
    arch_keys: Sequence[str] | None = None,
) -> LayoutPredictions:
    """Compose the iteration of every workload (any layout, plain DDP included).

    Args:
        method: a fitted method with layer-wise models (``layerwise_``, ``allreduce_``).
        workloads: the workloads.
        collectives: the collective model (default: derived from ``method.allreduce_``).
        arch_keys: the workloads' architecture keys, when the caller knows them.

    Returns:
        The :class:`LayoutPredictions`.

    Raises:
        ValueError: the method has no layer-wise models.
    """
    if getattr(method, "layerwise_", None) is None:
        raise ValueError("layout prediction needs a method with layer-wise models")
    cm = collectives or CollectiveModel.from_allreduce(method.allreduce_)
    names = [k for k in LayoutPredictions.__dataclass_fields__ if k != "generic_types"]
    out = {k: np.empty(len(workloads)) for k in names}
    generic: list[tuple[str, ...]] = [()] * len(workloads)
    groups: dict[tuple, list[int]] = {}
    for i, w in enumerate(workloads):
        key = structure_key(w, None if arch_keys is None else arch_keys[i])
        groups.setdefault(key, []).append(i)
    for members in groups.values():
        inputs, types = _inputs(method, [workloads[i] for i in members], cm)
        result = compose(inputs, cm)
        for name in names:
            out[name][members] = np.broadcast_to(getattr(result, name), (len(members),))
        for i in members:
            generic[i] = types
    return LayoutPredictions(**out, generic_types=generic)


def _rank_layers(w: Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stage, unit and block of each layer of the workload's architecture (cached traces)."""
    layers = architecture_graphs(w)[0].layers
    block = block_ordinal(layers["block"])
    return stage_of_layers(block, w.pp_size), unit_of_layers(block), block


def _inputs(
    method, members: list[Workload], cm: CollectiveModel
) -> tuple[LayoutInputs, tuple[str, ...]]:
    """The :class:`LayoutInputs` of workloads of one structure (one column per workload).

    Returns:
        The inputs and the layer types the generic layer model predicted.
    """
    w0 = members[0]
    stage, unit, block = _rank_layers(w0)
    micro = sorted({w.batch_size // w.micro_batches for w in members})
    gs = build_graph_set([base_workload(w0, b) for b in micro])
    nodes = gs.nodes
    is_layer = (nodes["node_kind"] == "layer").to_numpy()
    sharded = shard_tensor_parallel(nodes[is_layer], w0.tp_size)
    preds = node_predictions(method.layerwise_, None, sharded)
    graph = gs.graph[is_layer]
    col = np.searchsorted(micro, [w.batch_size // w.micro_batches for w in members])
    per = lambda v: np.stack([v[graph == g] for g in range(len(micro))], axis=1)[:, col]  # noqa: E731
    forward = per(preds["forward_ms"].to_numpy())
    backward = per(preds["backward_ms"].to_numpy())
    tp_bytes = np.stack(
        [tensor_parallel_collective_bytes(sharded[graph == g], block) for g in range(len(micro))],
        axis=1,
    )[:, col]
    tp_ms = cm.predict_ms("all_reduce", tp_bytes, w0.tp_size)
    first = sharded[graph == 0]
    params = first["params"].to_numpy(dtype=np.float64)
    params[first["layer_name"].astype(str).str.contains("#").to_numpy()] = 0.0  # repeat calls
    param_bytes = params * PRECISION_BYTES[w0.precision]
    out_bytes = per(sharded["output_bytes"].to_numpy(dtype=np.float64))
    last = [np.flatnonzero(stage == s)[-1] for s in range(w0.pp_size - 1)]
    dp = np.array([w.dp_size for w in members], dtype=np.float64)
    train = w0.mode == "train"
    optimizer = _optimizer_ms(method, nodes, stage, params, dp, w0) if train else np.zeros(1)
    types = tuple(sorted(set(sharded.loc[preds["used_generic"].to_numpy(bool), "layer_type"])))
    inputs = LayoutInputs(
        stage=stage, unit=unit, forward_ms=forward, backward_ms=backward, tp_allreduce_ms=tp_ms,
        param_bytes=param_bytes, boundary_bytes=out_bytes[last], optimizer_ms=optimizer,
        dp_size=dp, micro_batches=w0.micro_batches, schedule=w0.pipeline_schedule,
        sharding=w0.sharding, train=train,
    )  # fmt: skip
    return inputs, types


def _optimizer_ms(method, nodes, stage, params, dp, w0) -> np.ndarray:
    """The optimizer step of each stage's parameters on one rank, shape (p, n).

    The layer-wise ``optimizer`` model on the parameters the rank updates: its stage's
    (tensor-parallel shard), ``1/dp`` of them with ZeRO or FSDP sharding.
    """
    template = nodes[(nodes["node_kind"] == "optimizer").to_numpy()].iloc[[0]]
    share = 1.0 / dp if w0.sharding != "none" else np.ones_like(dp)
    stage_params = np.array([params[stage == s].sum() for s in range(w0.pp_size)])
    counts = np.rint(stage_params[:, None] * share[None, :]).ravel()
    rows = template.loc[template.index.repeat(len(counts))].reset_index(drop=True)
    rows["params"] = counts
    step = node_predictions(method.layerwise_, None, rows)["forward_ms"].to_numpy()
    return step.reshape(w0.pp_size, len(dp))


def layout_reasons(workloads: Sequence[Workload]) -> list[list[Extrapolation]]:
    """The domain guard's reason for each layout workload (empty for plain DDP).

    Returns:
        One list per workload.
    """
    return [
        []
        if is_data_parallel(w)
        else [
            Extrapolation(
                "layout",
                layout_label(w),
                "composed from the layer-wise models (tensor/pipeline/sharding replay), "
                "no layout profile corrects it",
                None,
            )
        ]
        for w in workloads
    ]
