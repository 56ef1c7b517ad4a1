"""The per-family parts of the parallel layouts: Megatron tensor-parallel plans, pipeline stages.

Only the families named here are profiled with tensor or pipeline parallelism (``bert`` and
``llama``); any other family with ``tp_size > 1`` or ``pp_size > 1`` is refused by
:func:`check_supported` with an error naming the field, the value and the family. Sharded data
parallelism (``zero1``, ``zero2``, ``fsdp``) works on every family (it needs only the model's
repeated blocks, :func:`block_modules`).

**Tensor parallelism** (:func:`tensor_parallel_plan`; Shoeybi et al. 2019, Megatron-LM): in every
block, the query/key/value projections and the feed-forward up projections (Llama: gate and up)
are ``ColwiseParallel`` (output columns split, so each rank holds ``num_heads / tp_size`` heads:
transformers' attention reshapes with ``view(..., -1, head_dim)``, so it sees the local head
count), the attention output projection and the feed-forward down projection are
``RowwiseParallel`` (input rows split, outputs all-reduced). Embeddings, norms and the head are
replicated.

**Pipeline parallelism** (:func:`stage_module`): the model is split by hand into ``pp_size``
stages of ``num_layers / pp_size`` consecutive blocks; the first stage also holds the
embeddings (Llama: and the rotary embedding), the last the final norm (Llama), the head and the
loss. A Llama stage after the first computes the rotary embedding again from the sequence
length (an untimed call of a parameter-free module: the full model computes it once).
Attention runs without a padding mask (every synthetic token is real): BERT's bidirectional
attention, Llama's causal attention through ``is_causal`` of SDPA, as the full models do for an
all-ones mask.
"""

from __future__ import annotations

import torch
from torch import nn

#: Families with a tensor-parallel plan and a pipeline split.
MODEL_PARALLEL_FAMILIES = ("bert", "llama")


def check_supported(workload) -> None:
    """Refuse a layout this profiler cannot build for the workload's family.

    Raises:
        ValueError: ``tp_size > 1`` or ``pp_size > 1`` for a family without a plan, a layout
            combining two of data, tensor and pipeline parallelism, or inference with a
            layout other than plain data parallelism, or a 1F1B pipeline of fewer
            micro-batches than stages (``torch.distributed.pipelining.Schedule1F1B`` refuses
            it; Megatron-LM's 1F1B does not); the message names the field, its value and the
            family.
    """
    w = workload
    for name in ("tp_size", "pp_size"):
        value = getattr(w, name)
        if value > 1 and w.family not in MODEL_PARALLEL_FAMILIES:
            raise ValueError(
                f"field {name!r} (value {value}): layout not profiled for family={w.family!r}; "
                f"tensor and pipeline parallelism are profiled for {list(MODEL_PARALLEL_FAMILIES)}"
            )
    parallel = [n for n in ("dp_size", "tp_size", "pp_size") if getattr(w, n) > 1]
    if len(parallel) > 1:
        raise ValueError(
            f"field {parallel[1]!r} (value {getattr(w, parallel[1])}): 2-D layouts "
            f"({' x '.join(parallel)}) are not profiled (family={w.family!r}); profile one of "
            "dp_size, tp_size, pp_size > 1"
        )
    if w.pp_size > 1 and w.pipeline_schedule == "1f1b" and w.micro_batches < w.pp_size:
        raise ValueError(
            f"field 'pipeline_schedule' (value '1f1b'): torch.distributed.pipelining's "
            f"Schedule1F1B needs micro_batches >= pp_size, got micro_batches={w.micro_batches} "
            f"< pp_size={w.pp_size} (family={w.family!r}); use gpipe or more micro-batches"
        )
    if w.mode != "train" and (w.tp_size > 1 or w.pp_size > 1):
        raise ValueError(
            f"field 'mode' (value {w.mode!r}): tensor and pipeline parallelism are profiled "
            f"for training only (family={w.family!r})"
        )


def block_modules(model: nn.Module) -> list[nn.Module]:
    """The repeated transformer blocks of a model, in order (children of block ``ModuleList`` s).

    Raises:
        ValueError: the model has no repeated block.
    """
    blocks = []
    for module in model.modules():
        same = isinstance(module, nn.ModuleList) and len({type(m) for m in module}) == 1
        if same and len(module):
            blocks.extend(module)
    if not blocks:
        raise ValueError(f"{type(model).__name__}: no repeated block to shard")
    return blocks


def tensor_parallel_plan(model: nn.Module, family: str) -> dict[str, object]:
    """The Megatron plan of ``parallelize_module``: module name -> parallel style.

    Args:
        model: the built ``BertForMaskedLM`` or ``LlamaForCausalLM``.
        family: ``bert`` or ``llama``.

    Returns:
        Fully qualified module names mapped to ``ColwiseParallel()`` / ``RowwiseParallel()``.
    """
    # torch.distributed's tensor-parallel API: only a tensor-parallel layout needs it.
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    if family == "bert":
        prefix, layers = "bert.encoder.layer", model.bert.encoder.layer
        col = ("attention.self.query", "attention.self.key", "attention.self.value",
               "intermediate.dense")  # fmt: skip
        row = ("attention.output.dense", "output.dense")
    else:
        prefix, layers = "model.layers", model.model.layers
        col = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj",
               "mlp.up_proj")  # fmt: skip
        row = ("self_attn.o_proj", "mlp.down_proj")
    plan: dict[str, object] = {}
    for i in range(len(layers)):
        plan.update({f"{prefix}.{i}.{name}": ColwiseParallel() for name in col})
        plan.update({f"{prefix}.{i}.{name}": RowwiseParallel() for name in row})
    return plan


class _BertStage(nn.Module):
    def __init__(self, model: nn.Module, blocks: range, first: bool, last: bool) -> None:
        super().__init__()
        self.embeddings = model.bert.embeddings if first else None
        self.blocks = nn.ModuleList(model.bert.encoder.layer[i] for i in blocks)
        self.cls = model.cls if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embeddings(input_ids=x) if self.embeddings is not None else x
        for block in self.blocks:
            h = block(h)
        return self.cls(h) if self.cls is not None else h


class _LlamaStage(nn.Module):
    def __init__(self, model: nn.Module, blocks: range, first: bool, last: bool) -> None:
        super().__init__()
        inner = model.model
        self.embed_tokens = inner.embed_tokens if first else None
        self.rotary_emb = inner.rotary_emb
        self.blocks = nn.ModuleList(inner.layers[i] for i in blocks)
        self.norm = inner.norm if last else None
        self.lm_head = model.lm_head if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(x) if self.embed_tokens is not None else x
        positions = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
        rotary = self.rotary_emb(h, position_ids=positions)
        for block in self.blocks:
            h = block(h, attention_mask=None, position_embeddings=rotary, position_ids=positions)
        if self.lm_head is None:
            return h
        return self.lm_head(self.norm(h))


def stage_module(model: nn.Module, family: str, stage: int, stages: int) -> nn.Module:
    """The submodule of pipeline stage ``stage`` of ``stages`` (shares the model's modules).

    Args:
        model: the built full model.
        family: ``bert`` or ``llama``.
        stage: this stage's index (0-based).
        stages: ``pp_size``.

    Returns:
        A module whose ``forward`` takes token ids (first stage) or the hidden states of the
        previous stage, and returns hidden states or, on the last stage, the logits.
    """
    n = len(model.bert.encoder.layer) if family == "bert" else len(model.model.layers)
    per = n // stages
    blocks = range(stage * per, (stage + 1) * per)
    cls = _BertStage if family == "bert" else _LlamaStage
    return cls(model, blocks, first=stage == 0, last=stage == stages - 1)


def pipeline_loss(family: str, vocab_size: int):
    """The last stage's loss of ``(logits, labels)``, as the full model computes it.

    BERT's masked-LM loss is the cross-entropy of every position; Llama's causal-LM loss is
    that of the next token (logits shifted by one).
    """

    def bert_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.reshape(-1, vocab_size), labels.reshape(-1))

    def llama_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        shifted = logits[:, :-1].reshape(-1, vocab_size).float()
        return nn.functional.cross_entropy(shifted, labels[:, 1:].reshape(-1))

    return bert_loss if family == "bert" else llama_loss
