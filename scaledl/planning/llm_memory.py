"""Memory one rank of a large-language-model training job holds, to refuse layouts that do not fit.

The estimate follows Megatron-LM / torchtitan training a dense decoder-only transformer
(:class:`~scaledl.workloads.training_job.ModelShape`) in mixed precision. Symbols: ``s`` the
sequence (``s_l = s / cp`` on a rank of a context-parallel group), ``b`` the micro-batch, ``h``
the width, ``a`` the attention heads (``k`` key/value heads, ``d_h = h / a``), ``f`` the
feed-forward width, ``V`` the vocabulary, ``L`` the layers, ``t, p, v, c`` the tensor, pipeline,
virtual-pipeline and context-parallel sizes, ``m`` the micro-batches per step (grad accumulation).

**Activations** (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models", MLSys 2023, arXiv 2205.05198, Sec. 4, Table 2 and Eq. 1-6), bytes per layer for
16-bit activations, written term by term so that the paper's GPT (``f = 4h``, ``k = a``, GeLU,
dropout 0.1, the softmax materialised) gives its numbers exactly:

* split by ``t`` (``24 s b h`` in the paper): Q and K ``4 s b h`` (GQA: ``2 s b h (1 + k/a)``;
  ``k < t``: one replicated K/V head per rank), V ``2 s b h`` (GQA ``2 s b h k/a``), the output
  projection's input ``2 s b h``, the MLP ``16 s b h`` (GeLU input and second GEMM input,
  ``4 s b f``; SwiGLU keeps gate, up and their product, ``6 s b f``);
* the attention core, split by ``t``: softmax output ``2 a s^2 b``, its dropout mask ``a s^2 b``
  and output ``2 a s^2 b`` (``5 a s^2 b``; without dropout ``2 a s^2 b``). Flash attention
  (``attention="flash"``, what Transformer Engine and PyTorch SDPA run) stores no ``s^2`` term,
  only the fp32 log-sum-exp, ``4 a s b``;
* replicated over the tensor-parallel group (``10 s b h``): the two norms' inputs ``4 s b h``,
  the QKV and first MLP GEMMs' inputs ``4 s b h``, two dropout masks ``2 s b h`` (none without
  dropout). Sequence parallelism splits these by ``t`` too (Table 2: ``34/t``).

Bytes per element (``element_bytes``, ``gemm_input_bytes``): the paper's constants count
16-bit values (2 bytes) and 1-byte dropout masks; fp32 training stores 4 bytes; the fp8 recipes
(Transformer Engine, ``fp8``, ``fp8_blockwise``, ``mxfp8``) save each GEMM's input (QKV, output
projection, up and down projections) in fp8 for the weight gradient, 1 byte, and ``nvfp4`` in
4 bits plus an e4m3 scale per 16 values, 0.5625 bytes; everything else stays 16-bit, torchao's
``fp8_rowwise`` included (it keeps the 16-bit inputs, cast along the other axis in the backward).

Selective recomputation drops the attention core (Table 2: ``sbh (34/t)`` with SP); full
recomputation keeps each layer's input, ``2 s b h`` (``/t`` with SP, as Megatron checkpoints
the sequence-parallel hidden state), plus one layer's full activations while that layer is
recomputed in the backward pass (the working set; not in Table 2). With context parallelism
every ``s`` becomes ``s_l``, the attention core's ``s^2`` becomes ``s_l s``.

**In flight** (Eq. 5): the 1F1B stage ``i`` of ``p`` holds ``min(m, p - i)`` micro-batches of its
layers; Megatron's interleaved schedule runs ``(p - i - 1) * 2 + (v - 1) p + 1`` chunk forwards
before its first backward (``num_warmup_microbatches + 1`` in
``megatron/core/pipeline_parallel/schedules.py``), the ``j``-th on chunk ``(j // p) % v``, at most
``m v``; on stage 0 of an even split this is the paper's ``L (1 + (p - 1)/(p v))`` layers. The
first stage adds the embedding's dropout mask ``s b h`` per micro-batch in flight (Eq. 6; ``/t``
with SP, none without dropout); the last stage adds the output layer, ``4 s b h / t`` (final
norm and output GEMM inputs) plus the fp32 logits ``4 s b V / t`` (Sec. 4.3), for one
micro-batch. Without a pipeline one micro-batch is in flight (gradient accumulation runs them
one after the other).

**Model states**, per rank, for ``P`` the parameters of the rank's layers (attention and MLP
split by ``t``, norms replicated; the vocabulary-parallel embedding ``V h / t`` on the first
stage, the output layer ``V h / t`` and final norm on the last, the embedding repeated there
when tied and ``p > 1`` as Megatron does), bytes per parameter after the Megatron-LM
distributed-optimizer table (``docs/source/api-guide/dist_optimizer.md``: bf16 parameters with
fp32 gradients, 18 bytes without sharding, ``6 + 12/d`` with the distributed optimizer):

* 16-bit and lower precisions: weights 2, fp32 gradients 4, fp32 master weights + Adam moments
  12; ``zero1`` (Megatron's distributed optimizer) shards the 12 over ``d``; ``zero2`` the
  gradients too; ``fsdp``/``hsdp`` (FSDP2 with bf16 compute, fp32 reduction: torchtitan) shard
  the fp32 parameters (4), gradients (4) and moments (8) and add the working set of two
  gathered units (the one computing and the one prefetched, ``2 * 2 U``) and one unsharded
  gradient unit (``4 U``), ``U`` one layer's parameters on the rank;
* ``fp32``: weights 4, gradients 4, moments 8, no master copy;
* fp8 variants (``fp8``, ``fp8_blockwise``, ``mxfp8``) add 2 bytes per (gathered) parameter for
  Transformer Engine's row- and column-wise fp8 weight copies; ``nvfp4`` adds 1; ``fp8_rowwise``
  none (torchao casts each weight per use);
* LoRA (``task="lora"``): the frozen base weights only (16-bit: 2 bytes, sharded as above); the
  adapters' gradients and moments (a rank-16 adapter is < 1% of a 70B model's states) are left out.

``d``, the sharding group: ``dp * cp`` (Megatron shards the distributed optimizer and
torchtitan shards FSDP over the data- and context-parallel ranks); ``hsdp``:
``shard_group_size * cp``.

**Fitting**: what the estimate leaves out (CUDA context, NCCL and cuBLAS workspaces, allocator
fragmentation, communication buffers) is a headroom, a share of the device's memory kept free
(:data:`DEFAULT_HEADROOM` = 10%, 8 GiB of an 80 GiB H100: PyTorch's context and NCCL's
buffers take 1-3 GiB, fragmentation the rest in practice). The device's memory is the table's
``memory_gb`` read as the vendor's nominal capacity, which for HBM is binary: an "80 GB" H100
holds 80 GiB (85.9e9 bytes; PyTorch reports 79.1 GiB of it as total memory, the rest is
reserved), so the figures are in GiB (2**30 bytes). :func:`check_fits` raises
:class:`MemoryDoesNotFit` with every
figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # annotations only: the job module is a sibling layer, imported by callers
    from scaledl.workloads.training_job import ModelShape, TrainingJob

Attention = Literal["flash", "materialized"]


def attention_memory(attention_kernel: str) -> Attention:
    """What a job's ``attention_kernel`` stores: ``materialized`` scores for ``unfused``."""
    return "materialized" if attention_kernel == "unfused" else "flash"


#: Bytes per GiB (the unit of every figure here).
GIB = float(2**30)
#: Share of the device's memory kept free for what the estimate leaves out (module docstring).
DEFAULT_HEADROOM = 0.10
#: Bytes per parameter (weights, gradients, optimizer states) before sharding, by precision.
_STATE_BYTES = {"fp32": (4.0, 4.0, 8.0)}
_MIXED = (2.0, 4.0, 12.0)
#: Bytes of a GEMM input saved for the backward pass, by precision (module docstring).
_GEMM_INPUT_BYTES = {"fp32": 4.0, "fp8": 1.0, "fp8_blockwise": 1.0, "mxfp8": 1.0, "nvfp4": 0.5625}
#: Extra bytes per gathered parameter for the low-precision weight copies (module docstring).
_LOW_PRECISION_COPY_BYTES = {"fp8": 2.0, "fp8_blockwise": 2.0, "mxfp8": 2.0, "nvfp4": 1.0}
PRECISIONS = ("fp32", "bf16", "fp16", "fp8", "fp8_blockwise", "fp8_rowwise", "mxfp8", "nvfp4")
SHARDINGS = ("none", "zero1", "zero2", "fsdp", "hsdp")
RECOMPUTES = ("none", "selective", "full")


class MemoryDoesNotFit(ValueError):
    """A layout's memory per rank exceeds the device's usable memory (the message has figures)."""

    def __init__(self, message: str, memory: RankMemory, usable_bytes: float) -> None:
        super().__init__(message)
        self.memory = memory
        self.usable_bytes = usable_bytes


@dataclass(frozen=True)
class RankMemory:
    """Bytes one rank of one pipeline stage holds at its peak (module docstring).

    Attributes:
        stage: the pipeline stage (0-based).
        parameters: parameters the rank holds before sharding (its layers, ``/tp``).
        weights_bytes: weights (sharded ones plus gathered units; fp8 weight copies).
        gradients_bytes: gradients (fp32 main gradients; sharded ones plus an unsharded unit).
        optimizer_bytes: fp32 master weights and Adam moments on this rank.
        activations_bytes: activations saved for the backward pass, in-flight micro-batches
            included, with the output layer's logits on the last stage.
        in_flight: micro-batch chunks whose activations the stage holds at its peak.
    """

    stage: int
    parameters: float
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    in_flight: int

    @property
    def states_bytes(self) -> float:
        """Weights, gradients and optimizer states, bytes."""
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes

    @property
    def total_bytes(self) -> float:
        """Everything, bytes."""
        return self.states_bytes + self.activations_bytes

    def describe(self) -> str:
        """One line of the figures in GiB: ``weights 16.4 + grads ... = 71.2 GiB``."""
        parts = (
            ("weights", self.weights_bytes),
            ("grads", self.gradients_bytes),
            ("optimizer", self.optimizer_bytes),
            ("activations", self.activations_bytes),
        )
        terms = " + ".join(f"{name} {value / GIB:.1f}" for name, value in parts)
        return f"stage {self.stage}: {terms} = {self.total_bytes / GIB:.1f} GiB"


def layer_activation_bytes(
    *,
    seq_len: int,
    micro_batch: int,
    hidden_size: int,
    num_heads: int,
    tp_size: int = 1,
    cp_size: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    ffn_size: int | None = None,
    num_kv_heads: int | None = None,
    gated_mlp: bool = False,
    dropout: bool = True,
    attention: Attention = "materialized",
    element_bytes: float = 2.0,
    gemm_input_bytes: float = 2.0,
) -> float:
    """Activation bytes one transformer layer saves for backward on one rank (module docstring).

    The defaults are Korthikanti et al.'s GPT (``ffn_size = 4 h``, ``num_kv_heads = num_heads``,
    GeLU, dropout, softmax materialised), for which this is Table 2: e.g. ``sbh (34 + 5as/h)``
    without parallelism, ``sbh (10 + 24/t + 5as/(ht))`` with tensor parallelism,
    ``sbh (34/t)`` with sequence parallelism and selective recomputation.

    Args:
        seq_len: tokens per sample (the whole sequence; ``cp_size`` splits it).
        micro_batch: samples per micro-batch.
        hidden_size: ``h``.
        num_heads: ``a``.
        tp_size: tensor-parallel size.
        cp_size: context-parallel size (splits the sequence).
        sequence_parallel: Megatron's sequence parallelism (norms, dropout split by ``tp``).
        recompute: ``none``, ``selective`` (attention core) or ``full`` (layer input kept).
        ffn_size: feed-forward width (default ``4 h``).
        num_kv_heads: key/value heads (default ``num_heads``).
        gated_mlp: SwiGLU (gate, up and their product kept) instead of GeLU.
        dropout: whether dropout masks are kept (1 byte per element).
        attention: ``materialized`` softmax or ``flash`` attention (log-sum-exp only).
        element_bytes: bytes of a stored activation (2; fp32 training 4).
        gemm_input_bytes: bytes of a stored GEMM input (fp8 recipes keep it in fp8: 1).

    Returns:
        Bytes; for ``full`` recomputation the kept layer input only (the working set of one
        layer is added once per rank by :func:`rank_memory`).

    Raises:
        ValueError: an unknown ``recompute`` or ``attention``.
    """
    if recompute not in RECOMPUTES:
        raise ValueError(f"recompute {recompute!r}: expected one of {RECOMPUTES}")
    if attention not in ("flash", "materialized"):
        raise ValueError(f"attention {attention!r}: expected 'flash' or 'materialized'")
    t = float(tp_size)
    s_l = float(seq_len) / cp_size
    sbh = s_l * micro_batch * hidden_size
    if recompute == "full":
        return element_bytes * sbh / (t if sequence_parallel else 1.0)
    f = float(ffn_size if ffn_size is not None else 4 * hidden_size)
    a = float(num_heads)
    k = float(num_kv_heads if num_kv_heads is not None else num_heads)
    head_dim = hidden_size / a
    kv_heads_rank = max(k / t, 1.0)  # fewer KV heads than ranks: one replicated head per rank
    sb = s_l * micro_batch
    e, g = float(element_bytes), float(gemm_input_bytes)
    split = (
        e * sbh / t  # Q
        + 2.0 * e * sb * head_dim * kv_heads_rank  # K and V
        + g * sbh / t  # output projection's input
        + ((2.0 * e if gated_mlp else e) + g) * sb * f / t  # MLP: gate/up (GeLU) in, down in
    )
    if recompute == "none":
        if attention == "flash":
            split += 4.0 * a * sb / t  # fp32 log-sum-exp
        else:
            core = 2.0 * e + 1.0 if dropout else e  # softmax (+ mask + dropout output)
            split += core * a * sb * float(seq_len) / t
    replicated = (2.0 * e + 2.0 * g + (2.0 if dropout else 0.0)) * sbh  # norms, GEMM ins, masks
    return split + replicated / (t if sequence_parallel else 1.0)


def layer_parameters(model: ModelShape, tp_size: int = 1) -> float:
    """Parameters of one transformer layer on one tensor-parallel rank.

    The layer's parameters (:meth:`~scaledl.workloads.training_job.ModelShape.layer_params`)
    split by ``tp``, except the two norms and the biases added after a row-parallel GEMM
    (output projection, down projection), which every rank keeps, and K and V, of which a rank
    keeps ``max(k / tp, 1)`` heads (fewer KV heads than ranks: one replicated head each).
    """
    h, t, k = float(model.hidden_size), float(tp_size), float(model.num_kv_heads)
    norms = 2.0 * h * (2.0 if model.norm == "layernorm" else 1.0)
    replicated = norms + (2.0 * h if model.linear_bias else 0.0)
    kv = 2.0 * h * model.kv_size + (2.0 * model.kv_size if model.linear_bias else 0.0)
    rest = model.layer_params() - replicated - kv
    return rest / t + kv * max(k / t, 1.0) / k + replicated


def stage_layers(num_layers: int, pp_size: int, vp_size: int = 1,
                 layers_per_stage: tuple[int, ...] | None = None) -> tuple[int, ...]:  # fmt: skip
    """Layers of each virtual stage in Megatron's order.

    Virtual stage ``j * pp + i`` is chunk ``j`` of pipeline stage ``i``.

    Args:
        num_layers: ``L``.
        pp_size: pipeline stages.
        vp_size: virtual-pipeline chunks per stage.
        layers_per_stage: an uneven split (``pp * vp`` entries summing to ``L``); ``None``: even.

    Returns:
        ``pp * vp`` layer counts.

    Raises:
        ValueError: an even split that does not divide, or a bad uneven one (named).
    """
    n = pp_size * vp_size
    if layers_per_stage is not None:
        split = tuple(int(x) for x in layers_per_stage)
        if len(split) != n or sum(split) != num_layers or min(split) < 0:
            raise ValueError(
                f"layers_per_stage {split}: needs pp_size*vp_size={n} entries >= 0 summing to "
                f"num_layers={num_layers}"
            )
        return split
    if num_layers % n:
        raise ValueError(
            f"pp_size*vp_size={n} does not divide num_layers={num_layers}: give layers_per_stage"
        )
    return (num_layers // n,) * n


def in_flight_chunks(stage: int, pp_size: int, vp_size: int, micro_batches: int) -> list[int]:
    """The chunks (virtual stages of ``stage``) of the forwards in flight at the stage's peak.

    1F1B: ``min(m, p - stage)`` forwards of chunk 0; interleaved: Megatron's warm-up plus one,
    ``(p - stage - 1) * 2 + (v - 1) p + 1`` at most ``m v``, the ``j``-th on chunk
    ``(j // p) % v`` (module docstring). Without a pipeline: one.

    Returns:
        Chunk index per in-flight forward.
    """
    p, v, m = pp_size, vp_size, micro_batches
    if p == 1:
        return [0]
    if v == 1:
        return [0] * min(m, p - stage)
    n = min(m * v, (p - stage - 1) * 2 + (v - 1) * p + 1)
    return [(j // p) % v for j in range(n)]


def _in_flight_count(stage: int, p: int, v: int, m: int) -> int:
    """``len(in_flight_chunks(stage, p, v, m))`` without the list."""
    if p == 1:
        return 1
    if v == 1:
        return min(m, p - stage)
    return min(m * v, (p - stage - 1) * 2 + (v - 1) * p + 1)


@lru_cache(maxsize=65536)
def _layer_terms(model: ModelShape, seq_len: int, micro_batch: int, tp: int, cp: int,
                 sp: bool, recompute: str, attention: str, dropout: bool,
                 precision: str) -> tuple[float, float, float]:  # fmt: skip
    """A layer's kept activations, its full activations and its parameters on one rank.

    Cached: a plan asks for the same few shapes thousands of times.
    """
    shape = dict(seq_len=seq_len, micro_batch=micro_batch, hidden_size=model.hidden_size,
                 num_heads=model.num_heads, tp_size=tp, cp_size=cp, sequence_parallel=sp,
                 ffn_size=model.ffn_size, num_kv_heads=model.num_kv_heads,
                 gated_mlp=model.gated_mlp, dropout=dropout, attention=attention,
                 element_bytes=4.0 if precision == "fp32" else 2.0,
                 gemm_input_bytes=_GEMM_INPUT_BYTES.get(precision, 2.0))  # fmt: skip
    kept = layer_activation_bytes(recompute=recompute, **shape)
    full = kept if recompute == "none" else layer_activation_bytes(recompute="none", **shape)
    return kept, full, layer_parameters(model, tp)


def rank_memory(
    model: ModelShape,
    *,
    seq_len: int,
    micro_batch: int,
    grad_accum: int,
    tp_size: int = 1,
    pp_size: int = 1,
    vp_size: int = 1,
    cp_size: int = 1,
    dp_size: int = 1,
    sequence_parallel: bool = False,
    layers_per_stage: tuple[int, ...] | None = None,
    sharding: str = "zero1",
    shard_group_size: int | None = None,
    recompute: str = "none",
    precision: str = "bf16",
    task: str = "pretrain",
    stage: int | None = None,
    attention: Attention = "flash",
    dropout: bool = False,
) -> RankMemory:
    """Memory of one rank of a layout (module docstring); the most loaded stage by default.

    Args:
        model: the transformer's shape.
        seq_len: tokens per sample.
        micro_batch: samples per micro-batch.
        grad_accum: micro-batches per optimizer step (``m``).
        tp_size: tensor-parallel size.
        pp_size: pipeline stages.
        vp_size: virtual-pipeline chunks per stage.
        cp_size: context-parallel size.
        dp_size: data-parallel size.
        sequence_parallel: Megatron's sequence parallelism.
        layers_per_stage: an uneven split (:func:`stage_layers`).
        sharding: ``none``, ``zero1``, ``zero2``, ``fsdp`` or ``hsdp``.
        shard_group_size: ``hsdp``'s shard group (data-parallel ranks; default ``dp_size``).
        recompute: ``none``, ``selective`` or ``full``.
        precision: the job's precision (``fp32``, ``bf16``, ``fp16``, fp8 and fp4 variants).
        task: ``pretrain``, ``sft`` or ``lora``.
        stage: a pipeline stage; ``None``: the stage with the largest total.
        attention: ``flash`` (default, the frameworks' kernel) or ``materialized``.
        dropout: whether dropout masks are kept (Llama-style pretraining uses none).

    Returns:
        The :class:`RankMemory`.

    Raises:
        ValueError: an unknown sharding, recompute or precision, a stage outside the pipeline,
            a split that does not divide (named).
    """
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding {sharding!r}: expected one of {SHARDINGS}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: no memory rule for it")
    split = stage_layers(model.num_layers, pp_size, vp_size, layers_per_stage)
    if stage is None:
        # A middle stage holds what an earlier middle stage with the same chunks holds, with
        # no more forwards in flight: only the first of each kind can be the most loaded (even
        # splits: stage 0 or the last).
        stages = _candidate_stages(split, pp_size, vp_size)
        return max(
            (_stage_memory(model, split, s, seq_len, micro_batch, grad_accum, tp_size, pp_size,
                           vp_size, cp_size, dp_size, sequence_parallel, sharding,
                           shard_group_size, recompute, precision, task, attention, dropout)
             for s in stages),
            key=lambda e: e.total_bytes,
        )  # fmt: skip
    if not 0 <= stage < pp_size:
        raise ValueError(f"stage={stage} outside the {pp_size} pipeline stages")
    return _stage_memory(model, split, stage, seq_len, micro_batch, grad_accum, tp_size, pp_size,
                         vp_size, cp_size, dp_size, sequence_parallel, sharding, shard_group_size,
                         recompute, precision, task, attention, dropout)  # fmt: skip


@lru_cache(maxsize=4096)
def _candidate_stages(split: tuple[int, ...], pp: int, vp: int) -> tuple[int, ...]:
    """The first and last stage, and each middle stage whose chunks no earlier one has."""
    seen, stages = set(), [0]
    for stage in range(1, pp - 1):
        chunks = tuple(split[j * pp + stage] for j in range(vp))
        if chunks not in seen:
            seen.add(chunks)
            stages.append(stage)
    return (*stages, pp - 1) if pp > 1 else (0,)


def _stage_memory(model, split, stage, seq_len, micro_batch, grad_accum, tp, pp, vp, cp, dp, sp,
                  sharding, shard_group_size, recompute, precision, task, attention,
                  dropout) -> RankMemory:  # fmt: skip
    params, unit = _stage_parameters(model, split, stage, tp, pp, vp)
    activations, n_in_flight = _stage_activations(model, split, stage, seq_len, micro_batch,
                                                  grad_accum, tp, pp, vp, cp, sp, recompute,
                                                  attention, dropout, precision)  # fmt: skip
    copy_bytes = _LOW_PRECISION_COPY_BYTES.get(precision, 0.0)
    group = float(dp * cp) if sharding != "hsdp" else float((shard_group_size or dp) * cp)
    lora = task == "lora"
    compute_bytes = 4.0 if precision == "fp32" else 2.0
    if sharding in ("fsdp", "hsdp"):
        # Sharded fp32 parameters (LoRA: the frozen weights in the compute dtype), two gathered
        # units in the compute dtype; fp32 gradients sharded plus one unsharded unit; moments.
        master = compute_bytes if lora else 4.0
        weights = master * params / group + (2.0 * compute_bytes + 2.0 * copy_bytes) * unit
        gradients = 0.0 if lora else 4.0 * params / group + 4.0 * unit
        optimizer = 0.0 if lora else 8.0 * params / group
    else:
        w_bytes, g_bytes, o_bytes = _STATE_BYTES.get(precision, _MIXED)
        if lora:
            w_bytes, g_bytes, o_bytes = compute_bytes, 0.0, 0.0
        weights = (w_bytes + copy_bytes) * params
        gradients = g_bytes * params / (group if sharding == "zero2" else 1.0)
        optimizer = o_bytes * params / (group if sharding in ("zero1", "zero2") else 1.0)
    return RankMemory(stage, params, weights, gradients, optimizer, activations, n_in_flight)


@lru_cache(maxsize=65536)
def _stage_parameters(model: ModelShape, split: tuple[int, ...], stage: int, tp: int, pp: int,
                      vp: int) -> tuple[float, float]:  # fmt: skip
    """(parameters of a rank of ``stage``, one layer's parameters on a rank), cached."""
    h, unit = model.hidden_size, layer_parameters(model, tp)
    embedding = model.vocab_size * h / float(tp)
    params = sum(split[j * pp + stage] for j in range(vp)) * unit
    if stage == 0:
        params += embedding
    if stage == pp - 1:
        final_norm = h * (2.0 if model.norm == "layernorm" else 1.0)
        params += final_norm + (embedding if (not model.tied_embeddings or pp > 1) else 0.0)
    return params, unit


@lru_cache(maxsize=262144)
def _stage_activations(model: ModelShape, split: tuple[int, ...], stage: int, seq_len: int,
                       micro_batch: int, grad_accum: int, tp: int, pp: int, vp: int, cp: int,
                       sp: bool, recompute: str, attention: str, dropout: bool,
                       precision: str) -> tuple[float, int]:  # fmt: skip
    """(activation bytes of a rank of ``stage``, chunk forwards in flight), cached."""
    h, t = model.hidden_size, float(tp)
    chunks = [split[j * pp + stage] for j in range(vp)]
    per_layer, working_set, _ = _layer_terms(model, seq_len, micro_batch, tp, cp, sp, recompute,
                                             attention, dropout, precision)  # fmt: skip
    n_in_flight = _in_flight_count(stage, pp, vp, grad_accum)
    if vp == 1 or len(set(chunks)) == 1:
        held_layers = n_in_flight * chunks[0]
    else:  # forwards per chunk of in_flight_chunks, counted: p per chunk per cycle of p v
        cycles, rest = divmod(n_in_flight, pp * vp)
        held_layers = sum(layers * (cycles * pp + min(pp, max(0, rest - c * pp)))
                          for c, layers in enumerate(chunks))  # fmt: skip
    activations = per_layer * held_layers
    if recompute == "full" and held_layers:
        activations += working_set  # one layer recomputed in full during its backward
    sbh = float(seq_len) / cp * micro_batch * h
    if stage == 0 and dropout:
        activations += n_in_flight * sbh / (t if sp else 1.0)  # embedding dropout mask
    if stage == pp - 1:
        s_b = float(seq_len) / cp * micro_batch
        e = 4.0 if precision == "fp32" else 2.0  # output layer's inputs, fp32 logits
        activations += 2.0 * e * sbh / t + 4.0 * s_b * model.vocab_size / t
    return activations, n_in_flight


def job_memory(job: TrainingJob, stage: int | None = None, **options) -> RankMemory:
    """:func:`rank_memory` of a :class:`~scaledl.workloads.training_job.TrainingJob`.

    Args:
        job: the job (its layout, sharding, recompute, precision, task).
        stage: a pipeline stage; ``None``: the most loaded.
        **options: ``attention`` (default: :func:`attention_memory` of the job's kernel) and
            ``dropout`` (:func:`rank_memory`).
    """
    options.setdefault("attention", attention_memory(job.attention_kernel))
    return rank_memory(
        job.model,
        seq_len=job.seq_len,
        micro_batch=job.micro_batch,
        grad_accum=job.grad_accum,
        tp_size=job.tp_size,
        pp_size=job.pp_size,
        vp_size=job.vp_size,
        cp_size=job.cp_size,
        dp_size=job.dp_size,
        sequence_parallel=bool(job.sequence_parallel),
        layers_per_stage=job.layers_per_stage,
        sharding=job.sharding,
        shard_group_size=job.shard_group_size,
        recompute=job.activation_checkpointing,
        precision=job.precision,
        task=job.task,
        stage=stage,
        **options,
    )


def usable_bytes(memory_gib: float, headroom: float = DEFAULT_HEADROOM) -> float:
    """The memory a rank may plan for: ``memory_gib * 2**30 * (1 - headroom)`` bytes.

    Raises:
        ValueError: ``headroom`` outside [0, 1) or a non-positive memory.
    """
    if not 0.0 <= headroom < 1.0:
        raise ValueError(f"memory headroom must lie in [0, 1), got {headroom!r}")
    if not (math.isfinite(memory_gib) and memory_gib > 0):
        raise ValueError(f"device memory must be > 0 GiB, got {memory_gib!r}")
    return memory_gib * GIB * (1.0 - headroom)


def check_fits(memory: RankMemory, memory_gib: float, headroom: float = DEFAULT_HEADROOM) -> None:
    """Refuse a rank whose memory exceeds the device's usable memory.

    Args:
        memory: the estimate.
        memory_gib: the device's memory, GiB (the device table's ``memory_gb``).
        headroom: share kept free (module docstring).

    Raises:
        MemoryDoesNotFit: with the figures (each kind, the total, the usable memory, why the
            headroom).
    """
    usable = usable_bytes(memory_gib, headroom)
    if memory.total_bytes > usable:
        raise MemoryDoesNotFit(
            f"does not fit: {memory.describe()} > {usable / GIB:.1f} GiB usable "
            f"({memory_gib:g} GiB less {headroom:.0%} headroom for the CUDA context, NCCL and "
            f"cuBLAS workspaces and allocator fragmentation)",
            memory,
            usable,
        )
