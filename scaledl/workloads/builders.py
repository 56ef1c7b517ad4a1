"""Build the PyTorch model and a synthetic batch of a :class:`Workload`, offline.

Models come from ``transformers`` configuration classes with random weights: nothing is
downloaded. Each family gets the task head a real training job would use, chosen so that the loss
touches every parameter (DDP refuses unused parameters):

* ``bert``: ``BertForMaskedLM`` (masked-LM loss, labels = inputs).
* ``vit``: ``ViTForImageClassification`` (cross-entropy over ``num_labels``).
* ``t5``: ``T5ForConditionalGeneration`` (sequence-to-sequence loss).
* ``llama``: ``LlamaForCausalLM`` (causal-LM loss).
* ``deit``: ``DeiTForImageClassificationWithTeacher`` (class + distillation heads).
* ``hf``: ``AutoModel.from_config`` of the JSON at ``config_path`` (any ``model_type``
  transformers knows); the loss is the mean of every floating output, so pooler and heads count.

The loss of a batch is computed by :func:`training_loss`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from scaledl.workloads.spec import Workload, WorkloadError

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def torch_dtype(workload: Workload) -> torch.dtype:
    """The parameter dtype of ``workload.precision``."""
    return _DTYPES[workload.precision]


def hf_config(workload: Workload) -> Any:
    """The ``transformers`` configuration object of a workload.

    Raises:
        WorkloadError: the ``config_path`` of an ``hf`` workload is unreadable or its
            ``model_type`` is unknown to transformers.
    """
    import transformers

    w = workload
    common = {"attn_implementation": "eager"}
    if w.family == "bert":
        return transformers.BertConfig(
            vocab_size=w.vocab_size,
            hidden_size=w.hidden_size,
            num_hidden_layers=w.num_layers,
            num_attention_heads=w.num_heads,
            intermediate_size=w.intermediate_size,
            max_position_embeddings=w.max_positions,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            **common,
        )
    if w.family in ("vit", "deit"):
        cls = transformers.ViTConfig if w.family == "vit" else transformers.DeiTConfig
        return cls(
            hidden_size=w.hidden_size,
            num_hidden_layers=w.num_layers,
            num_attention_heads=w.num_heads,
            intermediate_size=w.intermediate_size,
            image_size=w.image_size,
            patch_size=w.patch_size,
            num_channels=w.num_channels,
            num_labels=w.num_labels,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            **common,
        )
    if w.family == "t5":
        return transformers.T5Config(
            vocab_size=w.vocab_size,
            d_model=w.hidden_size,
            d_kv=w.hidden_size // w.num_heads,
            d_ff=w.intermediate_size,
            num_layers=w.num_layers,
            num_decoder_layers=w.decoder_num_layers,
            num_heads=w.num_heads,
            dropout_rate=0.0,
            decoder_start_token_id=0,
            pad_token_id=0,
            **common,
        )
    if w.family == "llama":
        return transformers.LlamaConfig(
            vocab_size=w.vocab_size,
            hidden_size=w.hidden_size,
            intermediate_size=w.intermediate_size,
            num_hidden_layers=w.num_layers,
            num_attention_heads=w.num_heads,
            num_key_value_heads=w.num_kv_heads,
            max_position_embeddings=w.max_positions,
            **common,
        )
    path = Path(w.config_path)
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise WorkloadError(f"{path}: field 'config_path': cannot read config: {exc}") from exc
    model_type = raw.pop("model_type", None)
    try:
        config = transformers.AutoConfig.for_model(model_type, **raw)
    except (ValueError, KeyError) as exc:
        raise WorkloadError(
            f"{path}: field 'model_type' (value {model_type!r}): unknown to transformers"
        ) from exc
    config._attn_implementation = "eager"
    return config


def build_model(workload: Workload, device: str | torch.device = "cpu") -> torch.nn.Module:
    """Instantiate the workload's model with random weights.

    Args:
        workload: the workload.
        device: where to allocate; ``"meta"`` allocates no memory (layer graphs).

    Returns:
        The model in ``train()`` mode for training workloads, ``eval()`` otherwise, with the
        dtype of ``workload.precision``.
    """
    import transformers

    config = hf_config(workload)
    classes = {
        "bert": transformers.BertForMaskedLM,
        "vit": transformers.ViTForImageClassification,
        "t5": transformers.T5ForConditionalGeneration,
        "llama": transformers.LlamaForCausalLM,
        "deit": transformers.DeiTForImageClassificationWithTeacher,
    }
    with torch.device(device):
        if workload.family == "hf":
            model = transformers.AutoModel.from_config(config)
        else:
            model = classes[workload.family](config)
    model = model.to(dtype=torch_dtype(workload))
    return model.train() if workload.mode == "train" else model.eval()


def make_batch(
    workload: Workload, device: str | torch.device = "cpu", generator: torch.Generator | None = None
) -> dict[str, torch.Tensor]:
    """A synthetic batch of ``workload.batch_size`` samples (the model's keyword inputs).

    Shapes:
        text: ``input_ids`` and ``labels`` of shape (batch_size, seq_len), int64;
        t5 adds ``labels`` of shape (batch_size, decoder_seq_len);
        vision: ``pixel_values`` of shape (batch_size, channels, image_size, image_size) and
        ``labels`` of shape (batch_size,) (not for DeiT with teacher, which takes none).
    """
    w = workload
    b = w.batch_size
    kw = {"device": device, "generator": generator}
    if w.is_vision:
        pixels = torch.randn(b, w.num_channels, w.image_size, w.image_size, **kw)
        batch = {"pixel_values": pixels.to(torch_dtype(w))}
        if w.family == "vit":
            batch["labels"] = torch.randint(0, w.num_labels, (b,), **kw)
        return batch
    vocab = w.vocab_size if w.family != "hf" else hf_config(w).vocab_size
    ids = torch.randint(0, vocab, (b, w.seq_len), **kw)
    if w.family == "t5":
        return {"input_ids": ids, "labels": torch.randint(0, vocab, (b, w.decoder_seq_len), **kw)}
    if w.family == "hf":
        config = hf_config(w)
        if getattr(config, "is_encoder_decoder", False):
            return {"input_ids": ids, "decoder_input_ids": ids}
        return {"input_ids": ids}
    return {"input_ids": ids, "labels": ids}


def training_loss(outputs: Any) -> torch.Tensor:
    """The scalar loss of a model output.

    Uses the model's own ``loss`` when it computed one; otherwise the sum of the means of every
    floating-point output tensor (so every head and pooler receives a gradient).

    Raises:
        ValueError: the output holds no floating-point tensor.
    """
    loss = getattr(outputs, "loss", None)
    if loss is not None:
        return loss
    values = outputs.values() if hasattr(outputs, "values") else outputs
    terms = [t.float().mean() for t in _tensors(values) if t.is_floating_point()]
    if not terms:
        raise ValueError("model output holds no floating-point tensor to build a loss from")
    return torch.stack(terms).sum()


def _tensors(values: Any):
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (tuple, list)):
            yield from _tensors(v)
