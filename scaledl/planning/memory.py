"""Memory one rank needs for a workload, to tell whether a configuration fits on the device.

The estimate counts what a rank of ScaleDL's data-parallel training holds, as the profiler runs
it (:mod:`scaledl.profiling.worker`: the model built in the workload's precision, PyTorch DDP,
``torch.optim.AdamW``), with the breakdown of Rajbhandari et al., "ZeRO: Memory Optimizations
Toward Training Trillion Parameter Models" (SC 2020, Sec. 3.1) for the model states and of
Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (MLSys
2023, arXiv 2205.05198, Sec. 4.1, Eq. 1) for the activations. With ``p`` bytes per element of
the precision (4 for ``fp32``, 2 for ``bf16``/``fp16``) and ``P`` parameters:

* **weights** ``p * P``: each rank holds a full replica (data parallelism); no fp32 master copy
  (the profiler trains in the precision itself, not with mixed-precision autocast);
* **gradients** ``p * P``, plus ``p * P`` more for DDP's gradient buckets when the world size
  is above 1 (PyTorch's default ``gradient_as_bucket_view=False`` copies gradients into them);
* **optimizer states** ``2 p P``: AdamW's first and second moments, kept in the parameter
  dtype (ZeRO counts ``12 P`` bytes here for mixed precision, with fp32 master weights);
* **activations** saved for the backward pass, per transformer layer of width ``h``,
  ``a`` heads, feed-forward width ``i``, sequence ``s`` and per-rank batch ``b``:
  ``(p / 2) * (18 s b h + 4 s b i + 5 a s^2 b)`` bytes (Korthikanti's ``s b h (34 + 5 a s / h)``
  with the feed-forward generalised from ``4h`` to ``i``: ``34 = 18 + 4 * 4``; its constants
  count 16-bit values, hence the ``p / 2``); a decoder layer of an encoder-decoder model adds
  its cross-attention, ``(p / 2) * (11 s_d b h + 5 a s_d s b)``; text models add the logits
  and the fp32 loss softmax, ``(p + 4) s b V`` for a vocabulary of ``V`` (Korthikanti Sec. 4.3).

Layouts (:mod:`scaledl.workloads.parallelism`, :func:`estimate_layout_memory`): a rank holds its
pipeline stage's parameters, attention and feed-forward split over ``tp_size`` ranks, its model
states sharded over ``dp_size`` ranks by ZeRO / FSDP, and activations with Korthikanti's
tensor-parallel split (Eq. 2, no sequence parallelism: ``10 s b h`` replicated, the rest divided
by ``t``: ``(p / 2) * (10 s b h + (8 s b h + 4 s b i + 5 a s^2 b) / t)``; the cross-attention's
``11 s_d b h`` split the same way, 3 replicated and 8 sharded) for the micro-batches in flight on
its stage (:func:`in_flight_micro_batches`).

Inference holds the weights and one layer's activations at a time (the largest layer's term
above) plus the logits. What the estimate leaves out (the framework's workspace, allocator
fragmentation, the CUDA context, embedding dropout masks) is what the planner's memory
headroom is for (:func:`fits_memory`).
"""

from __future__ import annotations

from dataclasses import dataclass

from scaledl.workloads.spec import PRECISION_BYTES, Workload


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one rank holds, by kind (see the module docstring for the formulas).

    Attributes:
        parameters: the model's parameters.
        weights_bytes: the weights.
        gradients_bytes: gradients, DDP buckets included.
        optimizer_bytes: AdamW's moments.
        activations_bytes: activations saved for backward (inference: the peak layer's).
    """

    parameters: float
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float

    @property
    def total_bytes(self) -> float:
        """Everything, bytes."""
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
        )


def _layer_activation_bytes(w: Workload, seq: int, p: int, batch: float, tp: int = 1) -> float:
    """Korthikanti Eq. 1 / Eq. 2 (tensor parallel), feed-forward width ``i`` (module docstring)."""
    h = float(w.hidden_size or 0)
    i = float(w.intermediate_size or 4 * h)
    a = float(w.num_heads or 1)
    s, b = float(seq), float(batch)
    return (p / 2.0) * (10 * s * b * h + (8 * s * b * h + 4 * s * b * i + 5 * a * s * s * b) / tp)


def _cross_activation_bytes(w: Workload, p: int, batch: float, tp: int = 1) -> float:
    """A decoder layer's cross-attention: ``(p/2)(3 s_d b h + (8 s_d b h + 5 a s_d s b) / t)``."""
    h, a, b = float(w.hidden_size or 0), float(w.num_heads or 1), float(batch)
    sd, s = float(w.decoder_seq_len), float(w.seq_len or 1)
    return (p / 2.0) * (3 * sd * b * h + (8 * sd * b * h + 5 * a * sd * s * b) / tp)


def _logits_bytes(w: Workload, p: int, batch: float) -> float:
    if w.is_vision or not w.vocab_size:
        return 0.0
    out_seq = int(w.decoder_seq_len) if w.decoder_num_layers and w.decoder_seq_len else w.seq_len
    return (p + 4.0) * float(out_seq or 1) * batch * w.vocab_size


def in_flight_micro_batches(w: Workload, stage: int) -> int:
    """Micro-batches whose activations stage ``stage`` holds at its peak.

    GPipe runs every forward before the first backward: ``m``; 1F1B starts its first backward
    after ``p - stage`` forwards: ``min(m, p - stage)`` (Narayanan et al. 2021, Sec. 2.2).
    """
    m, p = w.micro_batches, w.pp_size
    return m if w.pipeline_schedule == "gpipe" else min(m, p - stage)


def stage_activation_bytes(w: Workload, stage: int = 0) -> float:
    """Activation bytes one rank of pipeline stage ``stage`` holds (module docstring).

    The stage holds its blocks' activations (``num_layers`` encoder then decoder blocks, split
    evenly over ``pp_size`` stages) for :func:`in_flight_micro_batches` micro-batches of
    ``batch_size / micro_batches`` samples, sharded by ``tp_size`` as Korthikanti Eq. 2; the
    last stage adds the logits. Inference holds the largest layer's of one micro-batch.

    Args:
        w: the workload (``batch_size`` per data-parallel replica).
        stage: ``0 <= stage < pp_size``.

    Returns:
        Bytes.

    Raises:
        ValueError: ``stage`` outside the pipeline.
    """
    if not 0 <= stage < w.pp_size:
        raise ValueError(f"stage={stage} outside the {w.pp_size} pipeline stages")
    p, tp = PRECISION_BYTES[w.precision], w.tp_size
    b = w.batch_size / w.micro_batches
    encoder = _layer_activation_bytes(w, int(w.seq_len or 1), p, b, tp)
    enc_layers = int(w.num_layers or 1)
    dec_layers = int(w.decoder_num_layers or 0) if w.decoder_seq_len else 0
    decoder = 0.0
    if dec_layers:
        sd = int(w.decoder_seq_len)
        decoder = _layer_activation_bytes(w, sd, p, b, tp) + _cross_activation_bytes(w, p, b, tp)
    last = stage == w.pp_size - 1
    logits = _logits_bytes(w, p, b) if last else 0.0
    if w.mode == "infer":
        return max(encoder, decoder) + logits
    per_stage = (enc_layers + dec_layers) // w.pp_size
    blocks = range(stage * per_stage, (stage + 1) * per_stage)
    n_enc = sum(1 for k in blocks if k < enc_layers)
    held = n_enc * encoder + (per_stage - n_enc) * decoder + logits
    return in_flight_micro_batches(w, stage) * held


def activation_bytes(w: Workload) -> float:
    """Activation bytes one rank holds (training: saved for backward; inference: peak layer).

    Args:
        w: the workload (per-rank ``batch_size``); with a layout, its most loaded stage.

    Returns:
        Bytes.
    """
    return max(stage_activation_bytes(w, s) for s in range(w.pp_size))


def estimate_memory(w: Workload, parameters: float) -> MemoryEstimate:
    """The memory one rank of a data-parallel workload needs (module docstring).

    Args:
        w: the workload.
        parameters: its parameter count (e.g. summed over its traced layer graph,
            :func:`scaledl.models.domain.range_features`).

    Returns:
        The :class:`MemoryEstimate`.
    """
    return estimate_layout_memory(w, [parameters], 0.0, stage=0)


def estimate_layout_memory(
    w: Workload,
    stage_parameters: list[float],
    largest_unit_parameters: float,
    stage: int | None = None,
) -> MemoryEstimate:
    """The memory one rank of a layout needs: its stage's states and activations.

    With ``P`` the parameters one rank of the stage holds (its stage's, attention and
    feed-forward divided by ``tp_size``), ``p`` bytes per element, ``d = dp_size`` and ``U`` the
    largest sharding unit's parameters (one rank's):

    * ``none``: weights ``p P``, gradients ``p P`` (+ ``p P`` of DDP buckets when ``d > 1``),
      optimizer ``2 p P``;
    * ``zero1`` (ZeRO stage 1, optimizer states sharded): optimizer ``2 p P / d``;
    * ``zero2`` (+ gradients sharded): gradients ``p P / d`` (no buckets);
    * ``fsdp`` (ZeRO-3, + parameters sharded): weights ``p P / d + 2 p U`` (the unit computing
      and the one prefetched, gathered in full; Zhao et al., VLDB 2023).

    (Rajbhandari et al. 2020, Sec. 5, Fig. 1, in the precision itself as the profiler trains.)

    Args:
        w: the workload.
        stage_parameters: per pipeline stage, the parameters one of its ranks holds.
        largest_unit_parameters: ``U`` (read for ``fsdp`` only).
        stage: the stage (``None``: the stage needing the most memory).

    Returns:
        The :class:`MemoryEstimate` of that stage's ranks.

    Raises:
        ValueError: ``stage_parameters`` does not have ``pp_size`` entries.
    """
    if len(stage_parameters) != w.pp_size:
        raise ValueError(
            f"stage_parameters has {len(stage_parameters)} entries, pp_size={w.pp_size}"
        )
    if stage is None:
        estimates = [estimate_layout_memory(w, stage_parameters, largest_unit_parameters, s)
                     for s in range(w.pp_size)]  # fmt: skip
        return max(estimates, key=lambda e: e.total_bytes)
    p, d, params = PRECISION_BYTES[w.precision], w.dp_size, float(stage_parameters[stage])
    weights = p * params
    activations = stage_activation_bytes(w, stage)
    if w.mode == "infer":
        return MemoryEstimate(params, weights, 0.0, 0.0, activations)
    sharding = w.sharding
    gradients = p * params / d if sharding in ("zero2", "fsdp") else p * params
    if sharding in ("none", "zero1") and d > 1:
        gradients += p * params  # DDP's bucket copies
    optimizer = 2 * p * params / (d if sharding != "none" else 1)
    if sharding == "fsdp":
        weights = p * params / d + 2 * p * float(largest_unit_parameters)
    return MemoryEstimate(params, weights, gradients, optimizer, activations)


def fits_memory(total_bytes: float, memory_bytes: float, headroom: float = 0.1) -> bool:
    """Whether an estimate fits in a device's memory, keeping a headroom free.

    Args:
        total_bytes: the estimate (:attr:`MemoryEstimate.total_bytes`).
        memory_bytes: memory available to the rank, bytes.
        headroom: share of it kept for what the estimate leaves out, in [0, 1).

    Returns:
        ``total_bytes <= (1 - headroom) * memory_bytes``.

    Raises:
        ValueError: ``headroom`` outside [0, 1).
    """
    if not 0.0 <= headroom < 1.0:
        raise ValueError(f"memory headroom must lie in [0, 1), got {headroom!r}")
    return total_bytes <= (1.0 - headroom) * memory_bytes
