"""NeuSight's 4-GPU rows (``-dp4``, ``-tp4``, ``-pp4_1``): ScaleDL composed, against NeuSight.

**What a label measures.** NeuSight (sitar-lab/NeuSight 6945927d) times these rows with
``scripts/asplos/run_label_distributed.py``: ``accelerate launch --use_megatron_lm`` of
``collect_label_distributed.py`` on 4 GPUs of one node, FP32, one kind of parallelism of degree
4 at a time, one micro-batch, no sequence parallelism, no activation recompute, no distributed
optimizer, gradient clipping 1.0, ``DDP_impl`` torch. From that code:

* the batch in the name is the **global batch**: ``per_device_batch_size = global_batch_size //
  dp_degree // num_micro_batches``, so a ``-dp4`` rank runs a quarter of it, a ``-tp4`` group
  and a ``-pp4_1`` pipeline all of it (``pp4_1``: 4 stages, 1 micro-batch);
* the model is Megatron-LM's GPT built by accelerate's Megatron-LM integration from the Hugging
  Face config (not the Hugging Face module the single-GPU labels time);
* ``e2e_latency`` is rank 0's CUDA-event time of ``model(**batch)`` plus
  ``accelerator.backward(loss)`` (the mean of the 10 fastest of 50 iterations). With the
  Megatron-LM integration the forward call runs accelerate's ``MegatronEngine.train_step``:
  forward and backward of every micro-batch through the pipeline, ``reduce_model_grads`` and
  ``optimizer.step`` (gradient clipping and Adam); ``accelerator.backward`` returns at once. So,
  unlike the single-GPU labels, it **includes the optimizer step**. Rank 0 is pipeline stage 0,
  whose backward ends last with one micro-batch.

**What ScaleDL composes** (every choice fixed before these rows were looked at, from the
labels' code above, Megatron-LM's design and the single-GPU and Vidur data only):

1. *Compute per rank*: the GPU predictor (:class:`~scaledl.models.kernel.KernelGraphMethod`)
   fitted on the single-GPU labels only. One rank's micro-batch graph gets the operator models'
   kernel times; for tensor parallelism Megatron's split (Shoeybi et al., "Megatron-LM",
   arXiv 1909.08053, Sec. 3): attention and feed-forward as
   :func:`~scaledl.parallel.shard.shard_tensor_parallel` (kernel times, FLOPs and parameters
   divided by ``t``) and also the output layer (``head``: Megatron's vocabulary-parallel
   output layer and cross entropy); the word embedding's parameters are split too, its lookup
   is not. The layer-wise models predict each layer, and every layer is multiplied by the
   predictor's correction at the rank's layer sum
   (:meth:`~scaledl.models.kernel.KernelGraphMethod.correction_factor`), so a one-rank layout
   is exactly the single-GPU prediction.
2. *Collectives* (:class:`~scaledl.parallel.measured_collectives.MeasuredCollectives`, fitted
   on all of Vidur's NCCL all-reduce measurements of the GPU's DGX system, :data:`VIDUR_SYSTEM`):
   tensor parallelism: one all-reduce of the ``batch x seq x hidden`` activation after each
   block's attention and feed-forward in forward and one each in backward (Megatron's ``g`` and
   ``f``), plus one for the vocabulary-parallel embedding (forward) and the output layer's input
   gradient (backward); the cross entropy's three all-reduces of ``batch x seq`` scalars are
   left out (latency only, under 0.1 ms). Data parallelism: DDP's buckets over the backward,
   overlapped with it (``DDP_impl`` torch). Pipeline: each stage boundary sends the
   ``batch x seq x hidden`` activation forward and its gradient back, and after the backward
   the tied word embedding's gradient is all-reduced between the first and the last stage
   (Megatron keeps a copy of the word embedding on the last stage for the output layer).
3. *Optimizer step* (the labels include it; the single-GPU labels do not, so the predictor has
   no model of it): Megatron's FP32 Adam (apex ``FusedAdam``) reads parameters, gradients and
   both moments and writes parameters and moments, and the gradient-norm clipping reads the
   gradients once more: :data:`OPTIMIZER_BYTES_PER_PARAM` bytes per parameter the rank holds,
   at the device's peak memory bandwidth (:mod:`scaledl.devices`; a lower bound).
4. *Composition*: :func:`scaledl.parallel.compose.compose` (the pipeline replay, the DDP sync
   lane and the step).

NeuSight's own predictions of the same rows
(:func:`~scaledl.external.neusight_peer.load_peer_layout_predictions`) are compared paired on
the rows both predicted (:func:`~scaledl.evaluation.significance.paired_comparison`, BCa
bootstrap over rows); with 11 rows (3 or 4 per kind) every interval is wide.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scaledl.devices.specs import device_spec
from scaledl.evaluation.significance import MIN_WORKLOADS, paired_comparison
from scaledl.external.neusight import _NAME_RE
from scaledl.models.features import architecture_graphs, build_graph_set
from scaledl.models.kernel import KernelGraphMethod, kernel_columns
from scaledl.models.layerwise_stage import node_predictions
from scaledl.models.threads import single_threaded
from scaledl.parallel.compose import LayoutInputs, compose
from scaledl.parallel.measured_collectives import MeasuredCollectives, fit_system_allreduce
from scaledl.parallel.shard import (
    base_workload,
    block_ordinal,
    micro_batch_activation_bytes,
    shard_tensor_parallel,
    stage_of_layers,
)
from scaledl.workloads.spec import PRECISION_BYTES, Workload

#: Vidur system whose NCCL all-reduce times stand for a GPU's 4-GPU runs (one DGX node).
VIDUR_SYSTEM = {"NVIDIA H100 80GB HBM3": "h100_dgx", "NVIDIA A100-SXM4-40GB": "a100_dgx"}
#: Bytes moved per parameter by Megatron's FP32 optimizer step: Adam reads parameter, gradient
#: and two moments and writes parameter and two moments (7 x 4 B); the clipping's norm reads
#: the gradient (4 B).
OPTIMIZER_BYTES_PER_PARAM = 32.0
#: Layer types Megatron splits over the tensor-parallel ranks (beyond the blocks' units).
MEGATRON_EXTRA_TP_TYPES = ("head",)
_SPLIT_COLUMNS = ("fwd_flops", "bwd_flops", "params", "kernel_fwd_ms", "kernel_bwd_ms")
PEER_SOURCE = (
    "NeuSight's own predictions of its 4-GPU rows (sitar-lab/NeuSight 6945927d, MIT licence; "
    "external/neusight_peer/prediction)"
)
LABEL_SOURCE = (
    "NeuSight's 4-GPU Megatron-LM labels (external/neusight/label, -dp4/-tp4/-pp4_1; "
    "global batch in the name; forward, backward, gradient sync and optimizer step)"
)


def layout_workload(label: Any) -> Workload:
    """The workload spec of one ``parallel_labels`` row (the importer's ``workload`` JSON).

    Args:
        label: a row with ``file`` and ``workload``.

    Returns:
        The workload (its layout fields say the strategy and degree).

    Raises:
        ValueError: a null or unreadable ``workload`` (naming the label file and the field).
    """
    text = getattr(label, "workload", None)
    if not isinstance(text, str):
        raise ValueError(
            f"{label.file}: field 'workload' is {text!r}; re-import NeuSight (scaledl import "
            "neusight) so every 4-GPU label carries its layout's workload"
        )
    try:
        return Workload.from_record(json.loads(text), source=str(label.file))
    except ValueError as exc:  # json.JSONDecodeError and WorkloadError are ValueErrors
        raise ValueError(f"{label.file}: field 'workload' is not a workload spec: {exc}") from exc


def shard_megatron(layers: pd.DataFrame, tp_size: int) -> pd.DataFrame:
    """The layer nodes one Megatron tensor-parallel rank runs (module docstring, step 1).

    Args:
        layers: layer nodes with ``layer_type`` and the kernel columns.
        tp_size: ``t`` >= 1.

    Returns:
        A copy: attention and feed-forward split as
        :func:`~scaledl.parallel.shard.shard_tensor_parallel`, the output layer's columns and
        the embeddings' parameters divided by ``t`` too.
    """
    out = shard_tensor_parallel(layers, tp_size)
    if tp_size == 1:
        return out
    head = out["layer_type"].isin(MEGATRON_EXTRA_TP_TYPES).to_numpy()
    for column in _SPLIT_COLUMNS:
        if column in out:
            values = out[column].to_numpy(dtype=np.float64).copy()
            values[head] /= tp_size
            out[column] = values
    embedding = (out["layer_type"] == "embedding").to_numpy()
    params = out["params"].to_numpy(dtype=np.float64).copy()
    params[embedding] /= tp_size
    out["params"] = params
    return out


def rank_layers(method: KernelGraphMethod, workload: Workload) -> pd.DataFrame:
    """Per layer of one rank's micro-batch: predicted forward and backward milliseconds.

    Args:
        method: the fitted GPU predictor (ridge-fallback correction).
        workload: the layout workload (``tp_size`` and ``micro_batches`` are read).

    Returns:
        The layer nodes in execution order after :func:`shard_megatron`, with ``forward_ms``
        and ``backward_ms`` (corrected), ``block`` (:func:`~scaledl.parallel.shard.block_ordinal`)
        and the rank's ``params``.
    """
    base = base_workload(workload, workload.batch_size // workload.micro_batches)
    gs = build_graph_set([base])
    nodes = pd.concat([gs.nodes, kernel_columns(gs, method.operator_model_)], axis=1)
    layers = nodes[(nodes["node_kind"] == "layer").to_numpy()].reset_index(drop=True)
    layers = shard_megatron(layers, workload.tp_size)
    with single_threaded():
        pred = node_predictions(method.layerwise_, None, layers)
    total = float((pred["forward_ms"] + pred["backward_ms"]).sum())
    factor = float(method.correction_factor([base], [total])[0])
    layers["forward_ms"] = pred["forward_ms"].to_numpy(dtype=float) * factor
    layers["backward_ms"] = pred["backward_ms"].to_numpy(dtype=float) * factor
    layers["block"] = block_ordinal(architecture_graphs(base)[0].layers["block"])
    params = layers["params"].to_numpy(dtype=np.float64).copy()
    params[layers["layer_name"].astype(str).str.contains("#").to_numpy()] = 0.0  # repeats
    layers["params"] = params
    return layers


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
    per_layer = np.isin(types, ("attention", "cross-attention", "feed-forward")).astype(float)
    first_embedding = np.flatnonzero(types == "embedding")[:1]
    per_layer[first_embedding] = 1.0
    tp_allreduce = collectives.predict_ms("blocking_all_reduce", activation, t)
    tp_ms = np.where(per_layer > 0, tp_allreduce, 0.0)
    stage = stage_of_layers(layers["block"].to_numpy(), p)
    params = layers["params"].to_numpy(dtype=np.float64)
    stage_params = np.array([params[stage == s].sum() for s in range(p)])
    embedding_sync = 0.0
    if p > 1:
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
    """ScaleDL's iteration of one 4-GPU label and its parts.

    Args:
        method: the fitted GPU predictor.
        workload: the layout workload (:func:`layout_workload`).
        collectives: the GPU system's collective model.

    Returns:
        ``scaledl_ms`` (the composed iteration), ``exposed_sync_ms`` (DDP's all-reduces not
        hidden by the backward), ``step_ms`` (the slowest stage's step with its embedding sync)
        and the parts of :func:`megatron_inputs`, milliseconds.
    """
    layers = rank_layers(method, workload)
    inputs, parts = megatron_inputs(layers, workload, collectives)
    result = compose(inputs, collectives)
    return {
        "scaledl_ms": float(np.ravel(result.iteration_ms)[0]),
        "exposed_sync_ms": float(np.ravel(result.exposed_sync_ms)[0]),
        "step_ms": float(np.ravel(result.optimizer_ms)[0]),
        **parts,
    }


def _layout_kind(file: str) -> str:
    """The label's layout suffix (``dp4``, ``tp4``, ``pp4_1``) from its file name."""
    m = _NAME_RE.match(Path(file).stem)
    if m is None or not m["strategy"]:
        raise ValueError(f"{file}: file name is not <model>-<mode>-<seq>-<batch>-<layout>")
    return str(m["suffix"])


def evaluate_layout_rows(
    method: KernelGraphMethod, labels: pd.DataFrame, vidur: pd.DataFrame, peer: pd.DataFrame
) -> dict[str, Any]:
    """Predict every 4-GPU label, compare with NeuSight's predictions of the same rows.

    Args:
        method: the GPU predictor fitted on the single-GPU labels only.
        labels: the import's ``parallel_labels`` (``file``, ``device_name``, ``model``,
            ``global_batch_size``, ``iteration_ms``, ``workload``).
        vidur: :func:`scaledl.external.vidur.load_vidur_allreduce`.
        peer: :func:`~scaledl.external.neusight_peer.load_peer_layout_predictions`.

    Returns:
        ``{"label_source", "peer_source", "rows", "not_modelled", "unmatched", "collectives",
        "summary", "targets"}``: one row per predicted label (parts, both predictions, both
        relative errors), the labels not predicted and why, the rows without a NeuSight
        prediction, each system's collective model, :func:`layout_summary` and
        :func:`layout_targets`.

    Raises:
        ValueError: a label without a readable workload (naming the file and field).
    """
    peer_ms = {(r.gpu, r.stem): r.peer_ms for r in peer.itertuples(index=False)}
    models: dict[str, MeasuredCollectives] = {}
    rows, not_modelled, unmatched = [], [], []
    for label in labels.itertuples(index=False):
        gpu = str(label.device_name).split(":", 1)[-1]
        stem = Path(label.file).stem
        if gpu not in VIDUR_SYSTEM:
            not_modelled.append(f"{gpu} {stem}: no Vidur measurements of its system")
            continue
        workload = layout_workload(label)
        system = VIDUR_SYSTEM[gpu]
        if system not in models:
            models[system] = MeasuredCollectives(fit_system_allreduce(vidur, system), system)
        parts = predict_layout_row(method, workload, models[system])
        true = float(label.iteration_ms)
        theirs = peer_ms.get((gpu, stem))
        if theirs is None:
            unmatched.append(f"{gpu} {stem}")
        rows.append(
            {
                "gpu": gpu, "model": str(label.model), "layout": _layout_kind(label.file),
                "global_batch_size": int(label.global_batch_size),
                "per_rank_batch": workload.batch_size, "true_ms": true, **parts,
                "neusight_ms": theirs,
                "scaledl_re": abs(parts["scaledl_ms"] - true) / true,
                "neusight_re": None if theirs is None else abs(theirs - true) / true,
                "device_seen": workload.device_name in method.training_devices_,
                "vidur_system": system, "file": _label_name(label.file),
            }
        )  # fmt: skip
    summary = layout_summary(rows)
    return {
        "label_source": LABEL_SOURCE,
        "peer_source": PEER_SOURCE,
        "rows": rows,
        "not_modelled": not_modelled,
        "unmatched": unmatched,
        "collectives": {s: m.to_dict() for s, m in sorted(models.items())},
        "summary": summary,
        "targets": layout_targets(summary),
    }


def _paired(rows: list[dict]) -> dict[str, Any]:
    """MREs of both on the rows both predicted, and their paired comparison."""
    both = [r for r in rows if r["neusight_re"] is not None]
    ours = np.array([r["scaledl_re"] for r in both])
    theirs = np.array([r["neusight_re"] for r in both])
    out: dict[str, Any] = {
        "n": len(both),
        "mre_scaledl": float(ours.mean()) if len(both) else None,
        "mre_neusight": float(theirs.mean()) if len(both) else None,
    }
    if len(both) < MIN_WORKLOADS:
        out["paired"] = {"skipped": f"{len(both)} paired row(s); an interval needs 2"}
    else:
        out["paired"] = paired_comparison(ours, theirs, "scaledl", "neusight").to_dict()
    return out


def layout_summary(rows: list[dict]) -> dict[str, Any]:
    """ScaleDL against NeuSight on the paired rows: overall and per layout kind.

    Args:
        rows: the ``rows`` of :func:`evaluate_layout_rows`.

    Returns:
        ``{"overall": ..., "per_layout": {kind: ...}}``, each ``{"n", "mre_scaledl",
        "mre_neusight", "paired"}`` (``paired``: the
        :class:`~scaledl.evaluation.significance.Comparison` as a dict, ScaleDL minus NeuSight,
        or ``{"skipped": reason}``).
    """
    kinds = sorted({r["layout"] for r in rows})
    return {
        "overall": _paired(rows),
        "per_layout": {k: _paired([r for r in rows if r["layout"] == k]) for k in kinds},
    }


def layout_targets(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's target: on NeuSight's 4-GPU rows, ScaleDL's MRE <= NeuSight's own.

    Args:
        summary: :func:`layout_summary`.

    Returns:
        Rows ``{"target", "measured", "reached"}``: overall, then per layout kind.
    """
    parts = [("all", summary["overall"])]
    parts += [(f"{k} rows", s) for k, s in summary["per_layout"].items()]
    rows = []
    for name, s in parts:
        target = f"NeuSight's 4-GPU rows ({name}): ScaleDL MRE <= NeuSight's own"
        if s["mre_scaledl"] is None:
            rows.append({"target": target, "measured": "no paired row", "reached": None})
            continue
        c = s["paired"]
        interval = (
            c["skipped"]
            if "skipped" in c
            else f"difference {100 * c['mre_difference']:+.1f} points, 95% CI "
            f"{100 * c['ci_low']:+.1f} to {100 * c['ci_high']:+.1f} ({c['verdict']})"
        )
        rows.append(
            {
                "target": target,
                "measured": f"{s['mre_scaledl']:.1%} vs {s['mre_neusight']:.1%} ({s['n']} rows); "
                f"{interval}",
                "reached": bool(s["mre_scaledl"] <= s["mre_neusight"]),
            }
        )
    return rows


def _label_name(path) -> str:
    """``<GPU folder>/<label file>``: the label below NeuSight's ``label/`` folder.

    The result file is committed; a path of the machine that wrote it would mean nothing
    elsewhere.
    """
    path = Path(path)
    return f"{path.parent.name}/{path.name}"
