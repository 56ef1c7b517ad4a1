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


def _layer_activation_bytes(w: Workload, seq: int, p: int) -> float:
    """Korthikanti Eq. 1, generalised to a feed-forward width ``i`` (module docstring)."""
    h = float(w.hidden_size or 0)
    i = float(w.intermediate_size or 4 * h)
    a = float(w.num_heads or 1)
    s, b = float(seq), float(w.batch_size)
    return (p / 2.0) * (18 * s * b * h + 4 * s * b * i + 5 * a * s * s * b)


def activation_bytes(w: Workload) -> float:
    """Activation bytes one rank holds (training: saved for backward; inference: peak layer).

    Args:
        w: the workload (per-rank ``batch_size``).

    Returns:
        Bytes.
    """
    p = PRECISION_BYTES[w.precision]
    s = int(w.seq_len or 1)
    layers = int(w.num_layers or 1)
    encoder = _layer_activation_bytes(w, s, p)
    decoder_layers = int(w.decoder_num_layers or 0) if w.decoder_seq_len else 0
    decoder = 0.0
    out_seq = s
    if decoder_layers:
        sd = int(w.decoder_seq_len)
        h, a, b = float(w.hidden_size or 0), float(w.num_heads or 1), float(w.batch_size)
        cross = (p / 2.0) * (11 * sd * b * h + 5 * a * sd * s * b)
        decoder = _layer_activation_bytes(w, sd, p) + cross
        out_seq = sd
    logits = (
        0.0
        if w.is_vision or not w.vocab_size
        else (p + 4.0) * out_seq * w.batch_size * (w.vocab_size)
    )
    if w.mode == "infer":
        return max(encoder, decoder) + logits
    return layers * encoder + decoder_layers * decoder + logits


def estimate_memory(w: Workload, parameters: float) -> MemoryEstimate:
    """The memory one rank of a workload needs (module docstring).

    Args:
        w: the workload.
        parameters: its parameter count (e.g. summed over its traced layer graph,
            :func:`scaledl.models.domain.range_features`).

    Returns:
        The :class:`MemoryEstimate`.
    """
    p = PRECISION_BYTES[w.precision]
    weights = p * parameters
    if w.mode == "infer":
        return MemoryEstimate(parameters, weights, 0.0, 0.0, activation_bytes(w))
    buckets = p * parameters if w.world_size > 1 else 0.0
    return MemoryEstimate(
        parameters=parameters,
        weights_bytes=weights,
        gradients_bytes=p * parameters + buckets,
        optimizer_bytes=2 * p * parameters,
        activations_bytes=activation_bytes(w),
    )


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
