"""Closed-form size estimates of a workload: parameters, memory per rank, FLOPs per step.

These estimates only decide which candidate workloads are *feasible* (fit the memory budget,
stay cheap enough to profile); they are not runtime predictions. They are deliberately simple
and documented so that a constraint can be reasoned about by hand.

* Parameters: embeddings, per-layer attention (``4 h²`` plus biases; grouped-query key/value
  projections for ``llama``), feed-forward (``2 h f``; gated ``3 h f`` for ``llama``), norms and
  task heads, as in the Hugging Face implementations built by :mod:`scaledl.workloads.builders`.
* Memory per rank, training: ``16`` bytes per parameter (fp32 AdamW: weights, gradients, two
  moments; also the mixed-precision count of Rajbhandari et al. 2020, ZeRO, §3.1) plus activation
  memory, per layer ``s b h (34 + 5 a s / h)`` bytes for 16-bit activations without recomputation
  (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
  eq. 2), doubled for fp32 activations, plus the logits ``2 b s V`` elements of a language-model
  head (logits and their gradient).
  Inference: parameters at their precision plus one layer's activations and the logits.
* FLOPs per rank per step: ``6 N T`` for training, ``2 N T`` for inference (``N`` parameters,
  ``T`` tokens per step; Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1), plus
  attention scores ``12 L b s² h`` (training) or ``4 L b s² h`` (inference).

For ``t5`` the decoder layers use ``decoder_seq_len`` and count cross-attention as a second
attention block.
"""

from __future__ import annotations

from scaledl.workloads.spec import PRECISION_BYTES, Workload

TRAIN_BYTES_PER_PARAMETER = 16


def parameter_count(w: Workload) -> int:
    """Estimated number of parameters of a workload's model (task head included).

    Args:
        w: the workload (not ``family="hf"``).

    Returns:
        The parameter count.
    """
    h, f = w.hidden_size, w.intermediate_size
    layers = w.num_layers
    attention = 4 * h * h + 4 * h
    ffn = 2 * h * f + f + h
    norms = 4 * h
    if w.family == "bert":
        embeddings = (w.vocab_size + w.max_positions + 2) * h + 2 * h
        head = h * h + h + 2 * h + w.vocab_size  # transform + layer norm + decoder bias (tied)
        return embeddings + layers * (attention + ffn + norms) + head
    if w.family in ("vit", "deit"):
        channels = w.num_channels or 3
        patch = channels * w.patch_size**2 * h + h
        tokens = w.seq_len * h + (2 if w.family == "deit" else 1) * h
        heads = (2 if w.family == "deit" else 1) * (h * w.num_labels + w.num_labels)
        return patch + tokens + layers * (attention + ffn + norms) + 2 * h + heads
    if w.family == "t5":
        dec_layers = w.decoder_num_layers or layers
        enc = layers * (4 * h * h + 2 * h * f + 2 * h)
        dec = dec_layers * (8 * h * h + 2 * h * f + 3 * h)
        return w.vocab_size * h + enc + dec + 2 * h
    if w.family == "llama":
        kv = w.num_kv_heads or w.num_heads
        kv_dim = h // w.num_heads * kv
        attn = 2 * h * h + 2 * h * kv_dim
        layer = attn + 3 * h * f + 2 * h
        return 2 * w.vocab_size * h + layers * layer + h  # untied embedding and LM head
    raise ValueError(f"no parameter estimate for family={w.family!r}")


def tokens_per_step(w: Workload) -> int:
    """Tokens one rank processes per step: ``batch_size * seq_len`` (plus decoder for ``t5``)."""
    tokens = w.batch_size * w.seq_len
    if w.family == "t5":
        tokens += w.batch_size * (w.decoder_seq_len or w.seq_len)
    return tokens


def activation_bytes(w: Workload) -> float:
    """Estimated activation memory of all layers for one step on one rank (Korthikanti 2022).

    Returns:
        Bytes: ``sum over layers of s b h (34 + 5 a s / h)``, times 2 for fp32 activations,
        plus ``2 b s V`` logits elements for language-model heads.
    """
    scale = PRECISION_BYTES[w.precision] / 2
    b, h, a = w.batch_size, w.hidden_size, w.num_heads

    def per_layer(s: int, attention_blocks: int = 1) -> float:
        return s * b * h * (34 + attention_blocks * 5 * a * s / h) * scale

    total = w.num_layers * per_layer(w.seq_len)
    logits_len = w.seq_len
    if w.family == "t5":
        dec_s = w.decoder_seq_len or w.seq_len
        total += (w.decoder_num_layers or w.num_layers) * per_layer(dec_s, attention_blocks=2)
        logits_len = dec_s
    if w.vocab_size and w.family in ("bert", "t5", "llama"):
        total += 2 * b * logits_len * w.vocab_size * PRECISION_BYTES[w.precision]
    return total


def memory_bytes(w: Workload) -> float:
    """Estimated peak memory per rank in bytes (training: weights+grads+AdamW; see module doc)."""
    params = parameter_count(w)
    if w.mode == "train":
        return params * TRAIN_BYTES_PER_PARAMETER + activation_bytes(w)
    layers = w.num_layers + (w.decoder_num_layers or w.num_layers if w.family == "t5" else 0)
    return params * PRECISION_BYTES[w.precision] + activation_bytes(w) / max(layers, 1)


def flops_per_step(w: Workload) -> float:
    """Estimated floating-point operations per rank per step (Kaplan et al. 2020, §2.1)."""
    factor = 6 if w.mode == "train" else 2
    dense = factor * parameter_count(w) * tokens_per_step(w)
    s_terms = w.num_layers * w.seq_len**2
    if w.family == "t5":
        dec_s = w.decoder_seq_len or w.seq_len
        s_terms += (w.decoder_num_layers or w.num_layers) * (dec_s**2 + dec_s * w.seq_len)
    attention = 2 * factor * w.batch_size * w.hidden_size * s_terms
    return float(dense + attention)
