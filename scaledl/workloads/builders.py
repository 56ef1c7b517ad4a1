"""Build the PyTorch model and a synthetic batch of a :class:`Workload`, offline.

Models come from ``transformers`` configuration classes with random weights: nothing is
downloaded. Each family gets the task head a real training job would use, chosen so that the loss
touches every parameter (DDP refuses unused parameters):

* ``bert``: ``BertForMaskedLM`` (masked-LM loss, labels = inputs).
* ``vit``: ``ViTForImageClassification`` (cross-entropy over ``num_labels``).
* ``t5``: ``T5ForConditionalGeneration`` (sequence-to-sequence loss).
* ``llama``: ``LlamaForCausalLM`` (causal-LM loss).
* ``deit``: ``DeiTForImageClassificationWithTeacher`` (class + distillation heads).
* ``hf``: the class the config's ``architectures`` names, built by the matching Auto class's
  ``from_config`` (causal-LM, masked-LM and seq2seq-LM heads get ``labels`` = inputs,
  classification heads class labels); a config without ``architectures`` builds the bare
  model (``AutoModel``), whose loss is the mean of every floating output, so pooler and heads
  count. See :mod:`scaledl.workloads.hf` for what is checked first.

The loss of a batch is computed by :func:`training_loss`. Any failure to build a model is a
:class:`~scaledl.workloads.fields.WorkloadError` naming the family, config and architecture fields.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from scaledl.workloads.fields import ARCHITECTURE_FIELDS, WorkloadError
from scaledl.workloads.hf import read_hf_config
from scaledl.workloads.spec import Workload

#: Workload fields named when a model cannot be built or traced.
_DESCRIBED_FIELDS = (*ARCHITECTURE_FIELDS, "seq_len")

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def torch_dtype(workload: Workload) -> torch.dtype:
    """The parameter dtype of ``workload.precision``."""
    return _DTYPES[workload.precision]


def hf_config(workload: Workload) -> Any:
    """The ``transformers`` configuration object of a workload (a private copy for ``hf``).

    ``hf`` configs get eager attention, and a ``pad_token_id`` of 0 when a
    sequence-classification head has none (transformers needs one for batches of several
    sequences; the cost does not depend on it).

    Raises:
        WorkloadError: the ``config_path`` of an ``hf`` workload is unreadable or unusable
            (:func:`scaledl.workloads.hf.read_hf_config`).
    """
    # transformers: seconds of imports, only for an HF architecture.
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
    info = read_hf_config(w.config_path)
    config = copy.deepcopy(info.config)
    config._attn_implementation = "eager"
    if info.task == "sequence-classification" and config.pad_token_id is None:
        config.pad_token_id = 0
    return config


def describe_workload(workload: Workload) -> str:
    """The family, config and architecture fields of a workload, for error messages."""
    w = workload
    fields = ", ".join(
        f"{n}={getattr(w, n)}" for n in _DESCRIBED_FIELDS if getattr(w, n) is not None
    )
    if w.family != "hf":
        return f"family {w.family!r} ({fields})"
    info = read_hf_config(w.config_path)
    return f"family 'hf', config {w.config_path} ({info.model_type}, {info.architecture}; {fields})"


def build_model(workload: Workload, device: str | torch.device = "cpu") -> torch.nn.Module:
    """Instantiate the workload's model with random weights.

    Args:
        workload: the workload.
        device: where to allocate; ``"meta"`` allocates no memory (layer graphs).

    Returns:
        The model in ``train()`` mode for training workloads, ``eval()`` otherwise, with the
        dtype of ``workload.precision``.

    Raises:
        WorkloadError: the config is unusable or transformers cannot build the model; the
            message names the family, config and architecture fields (:func:`describe_workload`).
    """
    # transformers: seconds of imports, only for an HF architecture.
    import transformers

    config = hf_config(workload)
    classes = {
        "bert": transformers.BertForMaskedLM,
        "vit": transformers.ViTForImageClassification,
        "t5": transformers.T5ForConditionalGeneration,
        "llama": transformers.LlamaForCausalLM,
        "deit": transformers.DeiTForImageClassificationWithTeacher,
    }
    try:
        with torch.device(device):
            if workload.family == "hf":
                auto_class = getattr(transformers, read_hf_config(workload.config_path).auto_class)
                model = auto_class.from_config(config)
            else:
                model = classes[workload.family](config)
    except Exception as exc:
        raise WorkloadError(
            f"{describe_workload(workload)}: cannot build the model: {type(exc).__name__}: {exc}"
        ) from exc
    _refuse_empty_parameters(model, config, workload)
    if torch.device(device).type == "meta":
        _skip_padding_warnings(model)
    model = model.to(dtype=torch_dtype(workload))
    return model.train() if workload.mode == "train" else model.eval()


def _refuse_empty_parameters(model: torch.nn.Module, config: Any, workload: Workload) -> None:
    """Refuse a model transformers builds but cannot run: a parameter with a zero-sized shape.

    A size field set to 0 (BERT's ``type_vocab_size: 0``) builds an empty embedding table that
    every forward pass indexes out of range.

    Raises:
        WorkloadError: naming the workload, the empty parameter and the config's zero sizes.
    """
    empty = [(n, tuple(p.shape)) for n, p in model.named_parameters() if p.numel() == 0]
    if not empty:
        return
    zeros = [
        f"{k}=0"
        for k, v in vars(config).items()
        if v == 0
        and isinstance(v, int)
        and ("size" in k or k.startswith(("num_", "n_")))
        and not k.startswith("chunk_")  # 0: no chunking
    ]
    raise WorkloadError(
        f"{describe_workload(workload)}: the model cannot run: parameter {empty[0][0]!r} has "
        f"shape {empty[0][1]} (empty)"
        + (f", from {', '.join(zeros)}" if zeros else "")
        + ": set that size to at least 1"
    )


def _skip_padding_warnings(model: torch.nn.Module) -> None:
    """Turn off transformers' "padding without attention mask" warning on a meta model.

    The warning (``PreTrainedModel.warn_if_padding_and_no_attention_mask``, called by GPT-2,
    DeBERTa, Longformer and some 30 other models when the config has a ``pad_token_id``) looks
    at token values, which meta tensors do not have; it computes nothing the model uses.
    """
    for module in model.modules():
        if hasattr(module, "warn_if_padding_and_no_attention_mask"):
            module.warn_if_padding_and_no_attention_mask = _no_warning


def _no_warning(*_args: Any, **_kwargs: Any) -> None:
    return None


def make_batch(
    workload: Workload, device: str | torch.device = "cpu", generator: torch.Generator | None = None
) -> dict[str, torch.Tensor]:
    """A synthetic batch of ``workload.batch_size`` samples (the model's keyword inputs).

    Shapes:
        text: ``input_ids`` and ``labels`` of shape (batch_size, seq_len), int64;
        t5 and hf seq2seq-LM heads: ``labels`` of shape (batch_size, decoder_seq_len);
        hf bare encoder-decoder models: ``decoder_input_ids`` of that shape instead;
        hf sequence-classification heads: ``labels`` of shape (batch_size,);
        hf bare models: ``input_ids`` only;
        vision: ``pixel_values`` of shape (batch_size, channels, image_size, image_size) and
        ``labels`` of shape (batch_size,) (not for DeiT with teacher nor hf bare models).
    """
    w = workload
    b = w.batch_size
    kw = {"device": device, "generator": generator}
    task = read_hf_config(w.config_path).task if w.family == "hf" else None
    if w.is_vision:
        pixels = torch.randn(b, w.num_channels, w.image_size, w.image_size, **kw)
        batch = {"pixel_values": pixels.to(torch_dtype(w))}
        if w.family == "vit" or task == "image-classification":
            batch["labels"] = torch.randint(0, w.num_labels, (b,), **kw)
        return batch
    ids = torch.randint(0, w.vocab_size, (b, w.seq_len), **kw)
    if w.family == "t5" or task == "seq2seq-lm":
        labels = torch.randint(0, w.vocab_size, (b, w.decoder_seq_len), **kw)
        return {"input_ids": ids, "labels": labels}
    if task == "sequence-classification":
        return {"input_ids": ids, "labels": torch.randint(0, w.num_labels, (b,), **kw)}
    if task == "base":
        if w.decoder_seq_len is not None:
            decoder_ids = torch.randint(0, w.vocab_size, (b, w.decoder_seq_len), **kw)
            return {"input_ids": ids, "decoder_input_ids": decoder_ids}
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
