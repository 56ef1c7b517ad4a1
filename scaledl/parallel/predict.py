"""Iteration time of layout workloads from a predictor's layer-wise and all-reduce models.

For each layout workload (``tp_size``, ``pp_size``, ``micro_batches``, ``sharding`` beyond plain
DDP) the single-rank layer graph of one micro-batch (:func:`~scaledl.parallel.shard.base_workload`)
is split as one rank runs it (:mod:`scaledl.parallel.shard`), its layers are predicted by the
fitted layer-wise models (:func:`~scaledl.models.node_times.node_predictions`), the
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
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from scaledl.graph.features import architecture_graphs, build_graph_set
from scaledl.models.guard import Extrapolation
from scaledl.models.node_times import node_predictions
from scaledl.parallel.collectives import CollectiveModel
from scaledl.parallel.compose import LayoutInputs, compose
from scaledl.parallel.optimizer_tensors import stepped_tensors
from scaledl.parallel.overlap import Overlap
from scaledl.parallel.shard import (
    base_workload,
    block_ordinal,
    shard_tensor_parallel,
    stage_of_layers,
    tensor_parallel_collective_bytes,
    tensor_parallel_linears,
    unit_of_layers,
)
from scaledl.profiles.tables import TP_API
from scaledl.workloads.identity import architecture_key
from scaledl.workloads.parallelism import is_data_parallel, layout_label
from scaledl.workloads.spec import PRECISION_BYTES, Workload, micro_batch_activation_bytes


@dataclass(frozen=True)
class LayoutPredictions:
    """Composed iterations of layout workloads, in input order.

    Attributes:
        iteration_ms: shape (n,).
        pipeline_ms: the pipeline replay's makespan, shape (n,).
        bubble_fraction: idle share of the busiest stage, shape (n,).
        exposed_sync_ms: gradient synchronisation not hidden by the backward, shape (n,).
        optimizer_ms: optimizer step (and ZeRO-1's parameter broadcasts), shape (n,).
        generic_types: per workload, the layer types the generic layer model predicted.
    """

    iteration_ms: np.ndarray
    pipeline_ms: np.ndarray
    bubble_fraction: np.ndarray
    exposed_sync_ms: np.ndarray
    optimizer_ms: np.ndarray
    generic_types: list[tuple[str, ...]]


def structure_key(w: Workload, arch_key: str | None = None) -> tuple:
    """What fixes the replay's structure: architecture, mode and every layout field but dp."""
    return (arch_key or architecture_key(w), w.mode, w.tp_size, w.pp_size, w.micro_batches,
            w.pipeline_schedule, w.sharding)  # fmt: skip


def predict_layouts(
    method,
    workloads: Sequence[Workload],
    collectives: CollectiveModel | None = None,
    arch_keys: Sequence[str] | None = None,
    overlap: Overlap | None = None,
) -> LayoutPredictions:
    """Compose the iteration of every workload (any layout, plain DDP included).

    Args:
        method: a fitted method with layer-wise models (``layerwise_``, ``allreduce_``).
        workloads: the workloads.
        collectives: the collective model (default: derived from ``method.allreduce_``).
        arch_keys: the workloads' architecture keys, when the caller knows them.
        overlap: the hidden share of each collective lane (default: all hidden).

    Returns:
        The :class:`LayoutPredictions`.

    Raises:
        ValueError: the method has no layer-wise models.
    """
    return LayoutComposer(method, workloads, collectives, arch_keys).predict(overlap)


class LayoutComposer:
    """The layer-wise predictions of some workloads, composed under any :class:`Overlap`.

    The layer-wise models run once (in the constructor); :meth:`predict` only replays, so a
    search over overlap factors (:func:`scaledl.parallel.overlap.fit_overlap`) costs one
    composition per candidate.

    Args:
        method: a fitted method with layer-wise models (``layerwise_``, ``allreduce_``).
        workloads: the workloads.
        collectives: the collective model (default: derived from ``method.allreduce_``).
        arch_keys: the workloads' architecture keys, when the caller knows them.

    Raises:
        ValueError: the method has no layer-wise models.
    """

    def __init__(
        self,
        method,
        workloads: Sequence[Workload],
        collectives: CollectiveModel | None = None,
        arch_keys: Sequence[str] | None = None,
    ) -> None:
        if getattr(method, "layerwise_", None) is None:
            raise ValueError("layout prediction needs a method with layer-wise models")
        self.cm = collectives or CollectiveModel.from_allreduce(method.allreduce_)
        self.n = len(workloads)
        keys = [architecture_key(w) for w in workloads] if arch_keys is None else list(arch_keys)
        layers = _LayerTimes(method, workloads, keys)
        groups: dict[tuple, list[int]] = {}
        for i, w in enumerate(workloads):
            groups.setdefault(structure_key(w, keys[i]), []).append(i)
        self.members = list(groups.values())
        inputs = [layers.inputs(keys[m[0]], [workloads[i] for i in m], self.cm)
                  for m in self.members]  # fmt: skip
        tensors = [np.stack([stepped_tensors(workloads[i], keys[i]) for i in m], axis=1)
                   for m in self.members]  # fmt: skip
        steps = layers.optimizer_ms([x for x, _ in inputs], tensors)
        steps = [step + sharded_step_ms(self.cm, x, t)
                 for step, (x, _), t in zip(steps, inputs, tensors, strict=True)]  # fmt: skip
        self.inputs = [replace(x, optimizer_ms=step)
                       for (x, _), step in zip(inputs, steps, strict=True)]  # fmt: skip
        self.generic = [types for _, types in inputs]
        self._memo: dict[tuple, object] = {}

    def predict(self, overlap: Overlap | None = None) -> LayoutPredictions:
        """Compose every workload (input order) under ``overlap`` (default: all hidden).

        A structure is composed again only when the factors of the lanes it uses changed
        (memoised per structure), so a search over one lane replays only its users.
        """
        overlap = overlap or Overlap.full()
        names = [k for k in LayoutPredictions.__dataclass_fields__ if k != "generic_types"]
        out = {k: np.empty(self.n) for k in names}
        generic: list[tuple[str, ...]] = [()] * self.n
        for s, (members, x, types) in enumerate(
            zip(self.members, self.inputs, self.generic, strict=True)
        ):
            key = (s, *(overlap.hidden[lane] for lane in _lanes(x)))
            if key not in self._memo:
                self._memo[key] = compose(x, self.cm, overlap)
            result = self._memo[key]
            for name in names:
                out[name][members] = np.broadcast_to(getattr(result, name), (len(members),))
            for i in members:
                generic[i] = types
        return LayoutPredictions(**out, generic_types=generic)


def _lanes(x: LayoutInputs) -> tuple[str, ...]:
    """The lanes of :data:`~scaledl.parallel.overlap.LANES` a structure's composition reads."""
    lanes = []
    if x.train:
        lanes += ["all_gather", "reduce_scatter"] if x.sharding in ("zero2", "fsdp") else []
        lanes += ["all_reduce"] if x.sharding in ("none", "zero1") else []
    elif x.sharding in ("zero2", "fsdp"):
        lanes.append("all_gather")
    if int(x.stage.max()) > 0:
        lanes.append("send")
    return tuple(lanes)


class _LayerTimes:
    """Layer-wise predictions of every (architecture, ``tp``, micro-batch) the workloads need.

    One graph set per architecture (one graph per micro-batch size), every tensor-parallel
    split of it predicted in one call of the layer-wise models; the optimizer steps of every
    structure in one more call (:meth:`optimizer_ms`).
    """

    def __init__(self, method, workloads: Sequence[Workload], keys: list[str]) -> None:
        self.method = method
        first: dict[str, Workload] = {}
        micro: dict[str, set[int]] = {}
        splits: dict[str, set[int]] = {}
        for w, key in zip(workloads, keys, strict=True):
            first.setdefault(key, w)
            micro.setdefault(key, set()).add(w.batch_size // w.micro_batches)
            splits.setdefault(key, set()).add(w.tp_size)
        self.micro = {k: sorted(v) for k, v in micro.items()}
        frames, self.optimizer_row, self.blocks = [], {}, {}
        for key, w in first.items():
            gs = build_graph_set(
                [base_workload(w, b) for b in self.micro[key]],
                arch_keys=[key] * len(self.micro[key]),
            )
            nodes = gs.nodes.assign(graph=gs.graph)
            self.optimizer_row[key] = nodes[(nodes["node_kind"] == "optimizer").to_numpy()][:1]
            layers = nodes[(nodes["node_kind"] == "layer").to_numpy()]
            self.blocks[key] = block_ordinal(architecture_graphs(w)[0].layers["block"])
            for tp in sorted(splits[key]):
                frames.append(shard_tensor_parallel(layers, tp).assign(arch=key, tp=tp))
        self.layers = pd.concat(frames, ignore_index=True)
        # Not bounded: the layout path has no channel to report a clamped layer yet
        # (docs/layer_typing.md), and a clamp must never be silent.
        preds = node_predictions(method.layerwise_, None, self.layers, bound=False)
        self.layers[["forward_ms", "backward_ms", "used_generic"]] = preds[
            ["forward_ms", "backward_ms", "used_generic"]
        ].to_numpy()
        self.index = {k: g.index.to_numpy() for k, g in self.layers.groupby(["arch", "tp"])}

    def inputs(
        self, key: str, members: list[Workload], cm: CollectiveModel
    ) -> tuple[LayoutInputs, tuple[str, ...]]:
        """The :class:`LayoutInputs` of workloads of one structure (one column per workload).

        ``optimizer_ms`` holds the parameter counts each stage's step updates, shape (p, n),
        until :meth:`optimizer_ms` predicts them.

        Returns:
            The inputs and the layer types the generic layer model predicted.
        """
        w0 = members[0]
        rows = self.layers.loc[self.index[(key, w0.tp_size)]]
        graph = rows["graph"].to_numpy()
        block = self.blocks[key]
        stage, unit = stage_of_layers(block, w0.pp_size), unit_of_layers(block)
        col = np.searchsorted(self.micro[key], [w.batch_size // w.micro_batches for w in members])
        n_graphs = len(self.micro[key])

        def per(values: np.ndarray) -> np.ndarray:  # (n_layers, n_members)
            return np.stack([values[graph == g] for g in range(n_graphs)], axis=1)[:, col]

        blocks = np.tile(block, n_graphs)
        tp_bytes = per(tensor_parallel_collective_bytes(rows, blocks))
        # a layer no all-reduce follows (0 bytes) issues none: it costs nothing, not alpha
        tp_allreduce = np.where(
            tp_bytes > 0, cm.predict_ms("blocking_all_reduce", tp_bytes, w0.tp_size), 0.0
        )
        out_bytes = per(rows["output_bytes"].to_numpy(dtype=np.float64))
        linears = tensor_parallel_linears(
            rows, blocks, w0.hidden_size, w0.intermediate_size, w0.tp_size
        )
        activation = np.array([micro_batch_activation_bytes(w) for w in members], dtype=float)
        api = _tensor_parallel_api_ms(cm, w0, per(linears[0]), per(linears[1]), activation)
        first = rows[graph == 0]
        params = first["params"].to_numpy(dtype=np.float64).copy()
        params[first["layer_name"].astype(str).str.contains("#").to_numpy()] = 0.0  # repeats
        last = [np.flatnonzero(stage == s)[-1] for s in range(w0.pp_size - 1)]
        dp = np.array([w.dp_size for w in members], dtype=np.float64)
        share = 1.0 / dp if w0.sharding != "none" else np.ones_like(dp)
        stage_params = np.array([params[stage == s].sum() for s in range(w0.pp_size)])
        generic = rows.loc[rows["used_generic"].astype(bool), "layer_type"]
        inputs = LayoutInputs(
            stage=stage, unit=unit, forward_ms=per(rows["forward_ms"].to_numpy(float)) + api[0],
            backward_ms=per(rows["backward_ms"].to_numpy(float)) + api[1],
            tp_allreduce_ms=tp_allreduce,
            param_bytes=params * PRECISION_BYTES[w0.precision], boundary_bytes=out_bytes[last],
            optimizer_ms=np.rint(stage_params[:, None] * share[None, :]), dp_size=dp,
            micro_batches=w0.micro_batches, schedule=w0.pipeline_schedule,
            sharding=w0.sharding, train=w0.mode == "train",
        )  # fmt: skip
        return inputs, tuple(sorted(set(generic.astype(str))))

    def optimizer_ms(
        self, inputs: list[LayoutInputs], tensors: list[np.ndarray]
    ) -> list[np.ndarray]:
        """The optimizer step of every structure's stages, from their parameter counts.

        The layer-wise ``optimizer`` model on the parameters a rank updates: its stage's
        (tensor-parallel shard), ``1/dp`` of them with ZeRO or FSDP sharding, and the parameter
        tensors it steps as the operator count (``tensors``, one (p, n) array per structure,
        :func:`~scaledl.parallel.optimizer_tensors.stepped_tensors`); 0 for inference.
        """
        template = next((r for r in self.optimizer_row.values() if len(r)), None)
        train = [(x, t) for x, t in zip(inputs, tensors, strict=True) if x.train]
        counts = np.concatenate([x.optimizer_ms.ravel() for x, _ in train] or [[]])
        steps = np.zeros(0)
        if len(counts) and template is not None:
            rows = template.loc[template.index.repeat(len(counts))].reset_index(drop=True)
            rows["params"] = counts
            rows["fwd_ops"] = np.concatenate([t.ravel() for _, t in train])
            steps = node_predictions(self.method.layerwise_, None, rows, bound=False)
            steps = steps["forward_ms"].to_numpy()
        out, start = [], 0
        for x in inputs:
            if not x.train:
                out.append(np.zeros_like(x.optimizer_ms))
                continue
            n = x.optimizer_ms.size
            out.append(steps[start : start + n].reshape(x.optimizer_ms.shape))
            start += n
        return out


def sharded_step_ms(cm: CollectiveModel, x: LayoutInputs, tensors: np.ndarray) -> np.ndarray:
    """DTensor's cost in the step of a ``zero2`` / ``fsdp`` rank, beyond its plain step, ms.

    The rank's stepped tensors times the micro-benchmarked cost of stepping one DTensor
    parameter (``fsdp_step`` of :data:`~scaledl.parallel.collectives.FSDP_API`,
    :mod:`scaledl.profiling.fsdp_probe`) at the stage's mean unsharded tensor bytes; 0 for
    other layouts, inference, or a collective model without the probe (``source`` ``none``).

    Args:
        cm: the collective model.
        x: the structure's inputs (its stages, parameter bytes, sharding, ``dp_size``).
        tensors: parameter tensors each stage's rank steps, shape (p, n).

    Returns:
        Shape (p, n).
    """
    if (
        not x.train
        or x.sharding not in ("zero2", "fsdp")
        or cm.source.get("fsdp_step") in (None, "none")
    ):
        return np.zeros(np.shape(tensors))
    stage_bytes = np.array([x.param_bytes[x.stage == s].sum() for s in range(len(tensors))])
    mean_bytes = stage_bytes[:, None] / np.maximum(tensors, 1)
    return tensors * cm.predict_ms("fsdp_step", mean_bytes, x.dp_size)


def _tensor_parallel_api_ms(
    cm: CollectiveModel,
    w: Workload,
    colwise: np.ndarray,
    rowwise: np.ndarray,
    activation_bytes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Tensor parallelism's API cost per layer beyond its compute and all-reduce, fwd and bwd.

    Per unit, its column-wise linears times the micro-benchmarked column-wise cost and its
    row-wise ones times the row-wise cost (:data:`~scaledl.parallel.collectives.TP_API` of
    :class:`~scaledl.parallel.collectives.CollectiveModel`, :mod:`scaledl.profiling.tp_probe`;
    those costs hold the linears' own all-reduces), less the one blocking all-reduce per
    row-wise linear the composition adds itself in forward and in backward
    (:func:`~scaledl.parallel.shard.tensor_parallel_collective_bytes`), at least 0.

    Args:
        cm: the collective model.
        w: a workload of the structure (its ``tp_size``).
        colwise: column-wise linears per unit, (n_layers, n)
            (:func:`~scaledl.parallel.shard.tensor_parallel_linears`).
        rowwise: row-wise linears per unit, (n_layers, n).
        activation_bytes: one micro-batch's ``tokens x hidden`` activation per workload, (n,):
            the size the probe's rows are fitted on (the pair's output).

    Returns:
        ``(forward_ms, backward_ms)``, each shape (n_layers, n).
    """
    ar = cm.predict_ms("blocking_all_reduce", activation_bytes, w.tp_size)
    cost = {name: cm.predict_ms(name, activation_bytes, w.tp_size) for name in TP_API}
    return tuple(
        np.maximum(colwise * cost[f"tp_colwise_{d}"] + rowwise * (cost[f"tp_rowwise_{d}"] - ar),
                   0.0)
        for d in ("forward", "backward")
    )  # fmt: skip


def layout_reasons(
    workloads: Sequence[Workload],
    recipe: str = "current",
    in_sample: Sequence[bool] | None = None,
) -> list[list[Extrapolation]]:
    """The domain guard's reason for each layout workload (empty for plain DDP).

    Args:
        workloads: the workloads.
        recipe: what composed them: ``current`` (the predictor's layer-wise models), or a
            layout calibration's label (``calibrated:<candidate>@<version>``,
            :class:`~scaledl.parallel.calibration.LayoutCalibration`).
        in_sample: per workload, whether it fitted that calibration (said in its reason).

    Returns:
        One list per workload: the layout's reason and, for a 1F1B pipeline of fewer
        micro-batches than stages (replayed, but refused by PyTorch's ``Schedule1F1B``, torch
        2.13, so never profiled and left out of a layout search), a second one.
    """
    if recipe == "current":
        why = ("composed from the layer-wise models (tensor/pipeline/sharding replay), "
               "no layout profile corrects it")  # fmt: skip
    else:
        why = (f"composed by the {recipe} recipe (a layout calibration fitted on this host's "
               "layout profiles; its accuracy is the leave-one-layout-out one), no interval "
               "stratum covers layouts")  # fmt: skip
    fitted = f"{why}; in-sample: this workload was profiled and fitted the calibration"
    seen = in_sample if in_sample is not None else [False] * len(workloads)
    out = []
    for w, own in zip(workloads, seen, strict=True):
        if is_data_parallel(w):
            out.append([])
            continue
        reasons = [Extrapolation("layout", layout_label(w), fitted if own else why, None)]
        if w.pipeline_schedule == "1f1b" and w.pp_size > 1 and w.micro_batches < w.pp_size:
            reasons.append(Extrapolation(
                "micro_batches", w.micro_batches,
                f"1F1B with fewer micro-batches than its {w.pp_size} stages: PyTorch's "
                "Schedule1F1B refuses it, so no such layout was profiled (the replay runs it)",
                None,
            ))  # fmt: skip
        out.append(reasons)
    return out
