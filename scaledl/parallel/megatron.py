"""Megatron-LM's layouts on a GPU, composed from the GPU predictor and measured NCCL collectives.

A tensor-, pipeline- or data-parallel training (or inference) workload on a GPU the device table
knows is predicted the way Megatron-LM runs it: FP32, one kind of parallelism or several
(``dp x tp x pp`` within one DGX node), no sequence parallelism, no activation recompute, no
distributed optimizer, DDP's gradient buckets overlapped with the backward. This is the
composition that predicts NeuSight's 4-GPU Megatron-LM rows
(:mod:`scaledl.evaluation.gpu_layouts`; its MRE on the 11 rows against NeuSight's own is the
README's 4-GPU block, not distinguishable) and, through :mod:`scaledl.prediction.gpu_layouts`,
what ``scaledl predict`` and ``scaledl plan --layouts`` answer for a kernel-aware GPU
predictor. The iteration
includes the optimizer step (Megatron's train step does), unlike the GPU predictor's plain
single-GPU answers, which time forward and backward as NeuSight's single-GPU labels do.

**What is composed** (every choice fixed before NeuSight's 4-GPU rows were looked at, from the
label code (:mod:`scaledl.evaluation.gpu_layouts` says what those labels measure), Megatron-LM's
design and the single-GPU and Vidur data only, except the split units' kernels on the rank's
own operator shapes: that change, made for what the operator models exist to predict, was
judged on those same rows, against the rule before it: ``benchmarks/history/kernel_split.py``):

1. *Compute per rank*: the GPU predictor (:class:`~scaledl.models.kernel.KernelGraphMethod`)
   fitted on the single-GPU labels only. One rank's micro-batch graph gets the operator models'
   kernel times; for tensor parallelism Megatron's split (Shoeybi et al., "Megatron-LM",
   arXiv 1909.08053, Sec. 3): attention and feed-forward as
   :func:`~scaledl.parallel.shard.shard_tensor_parallel` (FLOPs and parameters divided by
   ``t``) and also the output layer (``head``: Megatron's vocabulary-parallel output layer);
   the word embedding's parameters are split too, its lookup is not. The kernel times of a
   split unit are those of its operators on the rank's own shapes (:func:`shard_operators`:
   a column-parallel linear's output width, a row-parallel linear's input width, the heads of
   the attention's batched matmuls and the elements between them divided by ``t``), predicted
   by the operator models, so a narrower GEMM runs at its own (lower) efficiency (the unit's
   kernel time divided by ``t``, the rule before, is compared by
   ``benchmarks/history/kernel_split.py``). The layer-wise models predict each layer, and
   every layer is multiplied by the predictor's correction at the rank's layer sum
   (:meth:`~scaledl.models.kernel.KernelGraphMethod.correction_factor`), so a one-rank layout
   is exactly the single-GPU prediction.
2. *Collectives* (:class:`~scaledl.parallel.measured_collectives.MeasuredCollectives`, fitted
   on all of Vidur's NCCL all-reduce measurements of the GPU's DGX system, :data:`VIDUR_SYSTEM`):
   tensor parallelism: one all-reduce of the ``batch x seq x hidden`` activation after each
   block's attention and feed-forward in forward and one each in backward (Megatron's ``g`` and
   ``f``; a feed-forward split in two units, BERT's, has one, after the second:
   :func:`~scaledl.parallel.shard.tensor_parallel_allreduce_layers`), plus one for the
   vocabulary-parallel embedding (forward) and the output layer's input gradient (backward),
   both charged to the embedding's layer (an approximation: Megatron runs the second on the
   last pipeline stage, so with a pipeline of several micro-batches the first stage carries a
   collective of the last); the cross entropy's three all-reduces of ``batch x seq`` scalars are
   left out (latency only, under 0.1 ms). Data parallelism: DDP's buckets over the backward,
   overlapped with it (``DDP_impl`` torch). Pipeline: each stage boundary sends the
   ``batch x seq x hidden`` activation forward and its gradient back, and after the backward
   a tied word embedding's gradient is all-reduced between the first and the last stage
   (Megatron keeps a copy of the word embedding on the last stage for the output layer;
   :func:`tied_word_embeddings`: GPT-2 and BERT tie it, Llama does not).
3. *Optimizer step* (Megatron's train step includes it; the single-GPU labels do not, so the
   predictor has no model of it): Megatron's FP32 Adam (apex ``FusedAdam``) reads parameters,
   gradients and both moments and writes parameters and moments, and the gradient-norm
   clipping reads the gradients once more: :data:`OPTIMIZER_BYTES_PER_PARAM` bytes per
   parameter the rank holds, at the device's peak memory bandwidth (:mod:`scaledl.devices`;
   a lower bound).
4. *Composition*: :func:`scaledl.parallel.compose.compose` (the pipeline replay, the DDP sync
   lane and the step).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from scaledl.devices.specs import device_spec
from scaledl.graph.features import architecture_graphs, build_graph_set
from scaledl.graph.layer_graph import build_layer_graph
from scaledl.graph.operators import at_batch, aten_descriptors
from scaledl.models.device_columns import device_columns
from scaledl.models.kernel_columns import kernel_columns
from scaledl.models.node_times import node_predictions
from scaledl.models.threads import single_threaded
from scaledl.parallel.compose import LayoutInputs, compose
from scaledl.parallel.measured_collectives import MeasuredCollectives
from scaledl.parallel.shard import (
    base_workload,
    block_ordinal,
    divide_rows,
    rank_parameters,
    shard_tensor_parallel,
    stage_of_layers,
    tensor_parallel_allreduce_layers,
)
from scaledl.workloads.identity import architecture_key
from scaledl.workloads.spec import PRECISION_BYTES, Workload, micro_batch_activation_bytes

if TYPE_CHECKING:  # the GPU predictor (scikit-learn) is passed in: composing needs no fitting
    from scaledl.models.kernel import KernelGraphMethod

#: Vidur system whose NCCL all-reduce times stand for a GPU's runs within one DGX node. DGX A100
#: nodes were built with the 40 GB and the 80 GB A100 SXM4 on the same NVLink / NVSwitch
#: fabric, so both take ``a100_dgx``.
VIDUR_SYSTEM = {"NVIDIA H100 80GB HBM3": "h100_dgx", "NVIDIA A100-SXM4-40GB": "a100_dgx",
                "NVIDIA A100-SXM4-80GB": "a100_dgx"}  # fmt: skip
#: GPUs of one DGX node (Vidur's systems: DGX A100, DGX H100): a layout is composed within one.
GPUS_PER_NODE = 8
#: Bytes moved per parameter by Megatron's FP32 optimizer step: Adam reads parameter, gradient
#: and two moments and writes parameter and two moments (7 x 4 B); the clipping's norm reads
#: the gradient (4 B).
OPTIMIZER_BYTES_PER_PARAM = 32.0
#: Layer types Megatron splits over the tensor-parallel ranks (beyond the blocks' units).
MEGATRON_EXTRA_TP_TYPES = ("head",)
_SPLIT_COLUMNS = ("fwd_flops", "bwd_flops", "params", "kernel_fwd_ms", "kernel_bwd_ms")


def shard_megatron(layers: pd.DataFrame, tp_size: int) -> pd.DataFrame:
    """The layer nodes one Megatron tensor-parallel rank runs (module docstring, step 1).

    Args:
        layers: layer nodes with ``layer_type`` and the kernel columns.
        tp_size: ``t`` >= 1.

    Returns:
        A copy: attention and feed-forward split as
        :func:`~scaledl.parallel.shard.shard_tensor_parallel`, the output layer's columns and
        the word embedding's parameters (the largest embedding unit's: Megatron's
        vocabulary-parallel embedding; position embeddings stay whole) divided by ``t`` too.
    """
    out = shard_tensor_parallel(layers, tp_size)
    if tp_size == 1:
        return out
    head = out["layer_type"].isin(MEGATRON_EXTRA_TP_TYPES).to_numpy()
    divide_rows(out, head, tp_size, _SPLIT_COLUMNS)
    params = out["params"].to_numpy(dtype=np.float64).copy()
    embedding = np.flatnonzero((out["layer_type"] == "embedding").to_numpy())
    if len(embedding):  # the word embedding: the largest; position embeddings are replicated
        params[embedding[np.argmax(params[embedding])]] /= tp_size
    out["params"] = params
    return out


#: Layer types whose operators Megatron splits over the tensor-parallel ranks.
SPLIT_UNIT_TYPES = ("attention", "cross-attention", "feed-forward")


def shard_operators(ops: pd.DataFrame, layers: pd.DataFrame, tp_size: int) -> pd.DataFrame:
    """One Megatron tensor-parallel rank's operators: each shape split as the rank runs it.

    An attention or feed-forward unit (Shoeybi et al. 2019, Sec. 3) that a tensor-parallel
    all-reduce follows (:func:`~scaledl.parallel.shard.tensor_parallel_allreduce_layers`) ends
    in a row-parallel linear (its input width ``k`` and its input and weight bytes divided by
    ``t``, the output full: the all-reduce follows it); every other linear is column-parallel
    (output width ``n``, weight, bias and output bytes divided by ``t``), and the operators
    between the first and the last linear run on the rank's heads or columns (a batched
    matmul's ``batch``, an element-wise or reduction operator's elements and bytes divided by
    ``t``); the operators before the first linear and after the last (norms, dropout and
    residual on the full hidden state) are not split. A feed-forward unit no all-reduce
    follows (BERT's ``intermediate``, one linear and its activation, before the ``output``
    unit's row-parallel linear) is column-parallel throughout: its linears by output width,
    every operator after its first linear by elements. In the output layer (``head``) the
    vocabulary-parallel linear (``n`` the vocabulary) is split by its output width and the
    operators after it by their elements. Other layers are unchanged.

    Args:
        ops: operator descriptors (:data:`~scaledl.graph.operators.DESCRIPTOR_COLUMNS`,
            ``layer_index``, ``op_index``) of one micro-batch graph, rows in execution order.
        layers: ``layer_type`` and ``block`` (the repeated block's name or ordinal) per layer,
            indexed by layer index, in execution order.
        tp_size: ``t`` >= 1.

    Returns:
        A copy with the split shapes (float columns).
    """
    out = ops.copy()
    if tp_size == 1:
        return out
    t = float(tp_size)
    cols = ("batch", "m", "n", "k", "elements", "bytes_in", "bytes_out")
    v = {c: out[c].to_numpy(dtype=np.float64).copy() for c in cols}
    kind = out["op_kind"].to_numpy()
    linear = kind == "linear"
    layer = out["layer_index"].to_numpy()
    types = layers["layer_type"].reindex(layer).to_numpy()
    followed = pd.Series(
        tensor_parallel_allreduce_layers(layers["layer_type"].to_numpy(),
                                         layers["block"].to_numpy()), index=layers.index
    ).reindex(layer).to_numpy()  # fmt: skip
    itemsize = np.divide(v["bytes_out"], v["batch"] * v["m"] * v["n"],
                         out=np.zeros(len(out)), where=linear & (v["m"] * v["n"] > 0))  # fmt: skip
    for li in np.unique(layer):
        rows = np.flatnonzero(layer == li)
        lin = rows[linear[rows]]
        if types[rows[0]] in SPLIT_UNIT_TYPES and len(lin) and followed[rows[0]]:
            first, last = lin[0], lin[-1]
            col = lin[:-1]
            between = rows[(rows > first) & (rows < last) & ~linear[rows]]
            row_parallel = [last]
        elif types[rows[0]] in SPLIT_UNIT_TYPES and len(lin):  # column-parallel throughout
            col = lin
            between = rows[(rows > lin[0]) & ~linear[rows]]
            row_parallel = []
        elif types[rows[0]] == "head" and len(lin):
            col = lin[-1:]
            between = rows[(rows > lin[-1]) & ~linear[rows]]
            row_parallel = []
        else:
            continue
        for i in col:  # column-parallel: output width, weight, bias and output split
            weight = (v["k"][i] * v["n"][i] + v["n"][i]) * itemsize[i]
            v["bytes_in"][i] -= weight * (1 - 1 / t)
            v["n"][i] /= t
            v["elements"][i] /= t
            v["bytes_out"][i] /= t
        for i in row_parallel:  # row-parallel: input width, input and weight split
            split = (v["m"][i] * v["k"][i] + v["k"][i] * v["n"][i]) * itemsize[i]
            v["bytes_in"][i] -= split * (1 - 1 / t)
            v["k"][i] /= t
        for i in between:
            if out["op_class"].iat[i] == "matmul":
                v["batch"][i] /= t
            for c in ("elements", "bytes_in", "bytes_out"):
                v[c][i] /= t
    for c in cols:
        out[c] = v[c]
    return out


@lru_cache(maxsize=16)
def _traced_operators(key: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Operator descriptors of an architecture at batch 2 and 3 and its layers (cached).

    The layers: ``layer_type`` and ``block`` indexed by layer index.

    Args:
        key: :func:`~scaledl.workloads.identity.architecture_key` of the architecture.
    """
    base = Workload.parse({**json.loads(key), "batch_size": 2, "world_size": 1, "num_nodes": 1})
    traces = [build_layer_graph(base.model_copy(update={"batch_size": b})) for b in (2, 3)]
    d2, d3 = (aten_descriptors(g.operators) for g in traces)
    return d2, d3, traces[0].layers.set_index("layer_index")[["layer_type", "block"]]


def sharded_kernel_ms(method: KernelGraphMethod, base: Workload, tp_size: int) -> pd.DataFrame:
    """Kernel milliseconds per layer of one tensor-parallel rank (:func:`shard_operators`).

    The micro-batch's operators come from the meta-device traces at batch 2 and 3, scaled to
    the batch (:func:`~scaledl.graph.operators.at_batch`, as the GPU predictor's own
    :func:`~scaledl.models.kernel_columns.kernel_columns`), are split, and are predicted by the
    predictor's operator models on the workload's device.

    Args:
        method: the fitted GPU predictor.
        base: one rank's micro-batch workload (:func:`~scaledl.parallel.shard.base_workload`).
        tp_size: ``t`` >= 1 (1: the unsplit kernels, equal to ``kernel_columns``).

    Returns:
        ``kernel_fwd_ms`` and ``kernel_bwd_ms`` (0 for inference) indexed by layer index.
    """
    d2, d3, layers = _traced_operators(architecture_key(base))
    ops = at_batch(d2, d3, np.array([base.batch_size]))
    ops = shard_operators(ops, layers, tp_size)
    ops = pd.concat([ops, device_columns([base.device_name] * len(ops),
                                         [base.precision] * len(ops))], axis=1)  # fmt: skip
    out = pd.DataFrame(index=layers.index)
    for column, direction in (("kernel_fwd_ms", "forward"), ("kernel_bwd_ms", "backward")):
        if direction == "backward" and base.mode != "train":
            out[column] = 0.0
            continue
        per_op = pd.Series(method.operator_model_.predict(ops, direction), index=ops.index)
        out[column] = per_op.groupby(ops["layer_index"].to_numpy()).sum().reindex(
            layers.index, fill_value=0.0)  # fmt: skip
    return out


@lru_cache(maxsize=64)
def _tied(key: str) -> bool:
    """Whether the architecture's output layer shares the input word embedding's weight."""
    # builders loads torch and transformers' model classes; only building a model needs them.
    from scaledl.workloads.builders import build_model

    w = Workload.parse({**json.loads(key), "batch_size": 2, "world_size": 1, "num_nodes": 1})
    model = build_model(w, device="meta")
    inputs = getattr(model, "get_input_embeddings", lambda: None)()
    outputs = getattr(model, "get_output_embeddings", lambda: None)()
    return inputs is not None and outputs is not None and outputs.weight is inputs.weight


def tied_word_embeddings(w: Workload) -> bool:
    """Whether ``w``'s model ties its output layer to its word embedding.

    Hugging Face's ``get_output_embeddings().weight is get_input_embeddings().weight``, on the
    meta device. Megatron-LM then keeps a copy of the word embedding on the last pipeline stage and
    all-reduces its gradient with the first stage's after the backward (GPT-2, BERT); an
    untied output layer (Llama) is the last stage's own parameters, with no such sync.
    """
    return _tied(architecture_key(w))


def megatron_rank_parameters(
    layers: pd.DataFrame, tp_size: int, pp_size: int, tied: bool = True
) -> tuple[list[float], float]:
    """Parameters one Megatron-LM rank holds per pipeline stage, and the largest unit's.

    As :func:`~scaledl.parallel.shard.rank_parameters`, on Megatron's split
    (:func:`shard_megatron`: the embeddings and the output layer split over the
    tensor-parallel ranks too) and with the last stage's copy of the word embedding when the
    model is pipelined and ties it (:func:`megatron_inputs`).

    Args:
        layers: the layer nodes of the model (``block``, ``layer_type``, ``layer_name``,
            ``params``), in execution order.
        tp_size: tensor-parallel ranks.
        pp_size: pipeline stages.
        tied: the output layer shares the word embedding (:func:`tied_word_embeddings`).

    Returns:
        ``(per stage parameters, largest unit parameters)``, one rank's.

    Raises:
        ValueError: ``pp_size`` does not divide the blocks.
    """
    per_stage, largest = rank_parameters(layers, tp_size, pp_size, split=shard_megatron)
    embedding = (layers["layer_type"] == "embedding").to_numpy()
    if pp_size > 1 and tied and embedding.any():
        split = shard_megatron(layers, tp_size)["params"].to_numpy(dtype=np.float64)
        per_stage[-1] += float(split[embedding].max())
    return per_stage, largest


def divided_unit_layers(
    method: KernelGraphMethod, workload: Workload
) -> tuple[Workload, pd.DataFrame]:
    """One rank's layers of a micro-batch, split the way Megatron splits them.

    Args:
        method: the fitted GPU predictor.
        workload: the layout workload (``tp_size`` and ``micro_batches`` are read).

    Returns:
        ``(base, layers)``: the one-rank workload of one micro-batch and its layer nodes with
        their kernel columns, after :func:`shard_megatron` (a split unit's kernel time divided
        by ``t``: :func:`rank_layers` replaces it by the rank's own operators').
    """
    base = base_workload(workload, workload.batch_size // workload.micro_batches)
    gs = build_graph_set([base])
    nodes = pd.concat([gs.nodes, kernel_columns(gs, method.operator_model_)], axis=1)
    layers = nodes[(nodes["node_kind"] == "layer").to_numpy()].reset_index(drop=True)
    return base, shard_megatron(layers, workload.tp_size)


def predict_rank_layers(
    method: KernelGraphMethod, base: Workload, layers: pd.DataFrame
) -> pd.DataFrame:
    """Predicted and corrected forward and backward milliseconds of one rank's layers.

    Args:
        method: the fitted GPU predictor (ridge-fallback correction).
        base: the one-rank workload of one micro-batch (:func:`divided_unit_layers`).
        layers: its layer nodes with kernel columns, split (:func:`divided_unit_layers`).

    Returns:
        ``layers`` with ``forward_ms`` and ``backward_ms`` (corrected), ``block``
        (:func:`~scaledl.parallel.shard.block_ordinal`), the rank's ``params`` and
        ``used_generic`` (the generic layer model predicted it).
    """
    layers = layers.copy()
    with single_threaded():
        pred = node_predictions(method.layerwise_, None, layers)
    total = float((pred["forward_ms"] + pred["backward_ms"]).sum())
    factor = float(method.correction_factor([base], [total])[0])
    layers["forward_ms"] = pred["forward_ms"].to_numpy(dtype=float) * factor
    layers["backward_ms"] = pred["backward_ms"].to_numpy(dtype=float) * factor
    layers["used_generic"] = pred["used_generic"].to_numpy(dtype=bool)
    layers["block"] = block_ordinal(architecture_graphs(base)[0].layers["block"])
    params = layers["params"].to_numpy(dtype=np.float64).copy()
    params[layers["layer_name"].astype(str).str.contains("#").to_numpy()] = 0.0  # repeats
    layers["params"] = params
    return layers


def rank_layers(method: KernelGraphMethod, workload: Workload) -> pd.DataFrame:
    """Per layer of one rank's micro-batch: predicted forward and backward milliseconds.

    A split unit's kernels are those of its operators on the rank's own shapes
    (:func:`sharded_kernel_ms`; module docstring, step 1).

    Args:
        method: the fitted GPU predictor (ridge-fallback correction).
        workload: the layout workload (``tp_size`` and ``micro_batches`` are read).

    Returns:
        The layer nodes in execution order after :func:`shard_megatron`, with ``forward_ms``
        and ``backward_ms`` (corrected), ``block`` (:func:`~scaledl.parallel.shard.block_ordinal`)
        the rank's ``params`` and ``used_generic`` (the generic layer model predicted it).
    """
    base, layers = divided_unit_layers(method, workload)
    if workload.tp_size > 1:
        kernels = sharded_kernel_ms(method, base, workload.tp_size)
        for column in ("kernel_fwd_ms", "kernel_bwd_ms"):
            layers[column] = kernels.loc[layers["layer_index"], column].to_numpy()
    return predict_rank_layers(method, base, layers)


def megatron_inputs(
    layers: pd.DataFrame, workload: Workload, collectives: MeasuredCollectives
) -> tuple[LayoutInputs, dict[str, float]]:
    """The composition's inputs of one Megatron layout (module docstring, steps 2-3).

    Args:
        layers: :func:`rank_layers`.
        workload: the layout workload.
        collectives: the system's collective model.

    Returns:
        ``(inputs, parts)``: the :class:`~scaledl.parallel.compose.LayoutInputs` (one column)
        and the parts in milliseconds: ``compute_ms`` (every stage's forward and backward),
        ``tp_allreduce_ms`` (forward and backward, summed over stages), ``p2p_ms`` (the
        boundaries' sends, both directions), ``embedding_sync_ms`` (the tied embedding's
        gradient all-reduce; 0 without a pipeline) and ``adam_ms`` (the slowest stage's step).
    """
    w, t, p = workload, workload.tp_size, workload.pp_size
    nbytes = PRECISION_BYTES[w.precision]
    activation = micro_batch_activation_bytes(w)
    types = layers["layer_type"].astype(str).to_numpy()
    per_layer = tensor_parallel_allreduce_layers(types, layers["block"].to_numpy())
    per_layer[np.flatnonzero(types == "embedding")[:1]] = True  # vocabulary-parallel lookup
    tp_allreduce = collectives.predict_ms("blocking_all_reduce", activation, t)
    tp_ms = np.where(per_layer, tp_allreduce, 0.0)
    stage = stage_of_layers(layers["block"].to_numpy(), p)
    params = layers["params"].to_numpy(dtype=np.float64)
    stage_params = np.array([params[stage == s].sum() for s in range(p)])
    embedding_sync = 0.0
    if p > 1 and tied_word_embeddings(workload):
        word = float(params[types == "embedding"].max()) if (types == "embedding").any() else 0.0
        stage_params[-1] += word  # the last stage's copy of the tied word embedding
        embedding_sync = float(collectives.predict_ms("all_reduce", word * nbytes, 2))
    bandwidth = device_spec(w.device_name).mem_bandwidth_gbps * 1e9  # bytes/s
    adam = OPTIMIZER_BYTES_PER_PARAM * stage_params / bandwidth * 1e3
    steps = adam.copy()
    if p > 1:
        steps[[0, -1]] += embedding_sync
    send = float(collectives.predict_ms("send", activation, 2)) if p > 1 else 0.0
    inputs = LayoutInputs(
        stage=stage, unit=np.asarray(layers["block"].to_numpy(), dtype=np.int64),
        forward_ms=layers["forward_ms"].to_numpy(float)[:, None],
        backward_ms=layers["backward_ms"].to_numpy(float)[:, None],
        tp_allreduce_ms=np.asarray(tp_ms, dtype=float)[:, None],
        param_bytes=params * nbytes, boundary_bytes=np.full((p - 1, 1), float(activation)),
        optimizer_ms=steps[:, None], dp_size=np.array([float(w.dp_size)]),
        micro_batches=w.micro_batches, schedule=w.pipeline_schedule, sharding="none",
        train=w.mode == "train",
    )  # fmt: skip
    parts = {
        "compute_ms": float((layers["forward_ms"] + layers["backward_ms"]).sum()),
        "tp_allreduce_ms": 2.0 * float(np.sum(tp_ms)),
        "p2p_ms": 2.0 * (p - 1) * w.micro_batches * send,
        "embedding_sync_ms": embedding_sync,
        "adam_ms": float(adam.max()),
    }
    return inputs, parts


def predict_layout_row(
    method: KernelGraphMethod, workload: Workload, collectives: MeasuredCollectives
) -> dict[str, float]:
    """ScaleDL's iteration of one layout workload and its parts.

    Args:
        method: the fitted GPU predictor.
        workload: the layout workload.
        collectives: the GPU system's collective model.

    Returns:
        :func:`compose_layout_row` of :func:`rank_layers`.
    """
    return compose_layout_row(rank_layers(method, workload), workload, collectives)


def compose_layout_row(
    layers: pd.DataFrame, workload: Workload, collectives: MeasuredCollectives
) -> dict[str, float]:
    """One layout's iteration composed from its rank's predicted layers.

    Args:
        layers: :func:`rank_layers` (or :func:`predict_rank_layers`) of ``workload``.
        workload: the layout workload.
        collectives: the GPU system's collective model.

    Returns:
        ``scaledl_ms`` (the composed iteration), ``exposed_sync_ms`` (DDP's all-reduces not
        hidden by the backward), ``step_ms`` (the slowest stage's step with its embedding sync)
        and the parts of :func:`megatron_inputs`, milliseconds.
    """
    inputs, parts = megatron_inputs(layers, workload, collectives)
    result = compose(inputs, collectives)
    return {
        "scaledl_ms": float(np.ravel(result.iteration_ms)[0]),
        "exposed_sync_ms": float(np.ravel(result.exposed_sync_ms)[0]),
        "step_ms": float(np.ravel(result.optimizer_ms)[0]),
        **parts,
    }
