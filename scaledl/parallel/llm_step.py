"""One optimizer step of a dense LLM training job, composed from kernel and collective times.

:func:`compose_step` times one rank's step the way Megatron-LM (Megatron-Core, NeMo,
Megatron-Bridge) and torchtitan run a decoder-only transformer, from a
:class:`~scaledl.models.llm_kernels.KernelModel` (GEMM, flash attention and memory-bound times
on one GPU) and a :class:`~scaledl.parallel.llm_collectives.NetworkModel` (NCCL collectives on
hierarchical groups). It returns the step's exposed components, which add up to the step, and a
small :class:`StepGraph` of what was composed, on which a learned correction is trained
(:mod:`scaledl.models.step_correction`). Every choice below is fixed from the frameworks' code
and papers, never fitted to published step times.

**One transformer layer on one rank, one micro-batch** (``b`` samples of ``s`` tokens; ``t``
tensor-, ``c`` context-parallel ranks; ``T = b s / c`` tokens on the rank):

* GEMMs split by tensor parallelism as Megatron does (Shoeybi et al. 2019, Sec. 3): QKV
  ``[T, (H/t + 2 max(1, K/t)) d, h]`` (grouped-query KV heads ``K``; fewer KV heads than ``t``
  are replicated, one per rank), output projection ``[T, h, H d / t]``, MLP ``fc1``
  ``[T, 2 f / t, h]`` (SwiGLU's gate and up fused, Megatron's ``linear_fc1``; GELU: ``f / t``)
  and ``fc2`` ``[T, h, f / t]``, at the job's precision (FP8 recipes run the block linears in
  FP8; the output layer stays 16-bit, a plain ``ColumnParallelLinear`` outside Transformer
  Engine, and attention is 16-bit). A GEMM's backward is its data gradient ``[m, k, n]`` plus
  its weight gradient ``[k, n, m]``.
* Flash attention over ``H / t`` heads, with the job's ``attention_kernel``; with context
  parallelism, ring attention with load-balanced causal chunks (Transformer Engine's
  ``AttnFuncWithCPAndKVP2P``, torchtitan's ``context_parallel``): a causal step on the rank's
  own ``s / c`` tokens, then ``c - 1`` steps against half a chunk (``s / 2c`` keys), together
  ``1 / c`` of the causal attention. Each step's KV chunk (``2 b (s / c) K d`` elements;
  backward: KV and its gradient, twice as many bytes) is sent to the ring neighbour while the
  previous step computes; only what a step does not hide is exposed (``cp_exposed_s``).
* Memory-bound work (:meth:`KernelModel.memory_s`): per layer two norms (read and write
  ``T h``), two residual adds (two reads, one write), the activation (SwiGLU reads ``2 T f / t``
  and writes ``T f / t``; GELU reads and writes ``T f / t``), rotary embedding of Q and K;
  backward moves twice the forward's bytes. An ``eager`` job (``TrainingJob.elementwise``)
  runs them as PyTorch's separate operators, each reading and writing its tensor, in units of
  the 16-bit element: RMSNorm 18 (upcast 3, square 4, mean 2, scale 4, downcast 3, weight 2:
  torchtitan's FP32 RMSNorm) instead of 2 (LayerNorm is one native kernel either way), rotary
  10 per Q and K element (upcast, complex product, downcast) instead of 2, SwiGLU 5 (SiLU, then
  the product) instead of 3, and grouped-query KV heads expanded to the query heads (read the
  KV, write the copy) before attention. With sequence parallelism (Korthikanti et al.,
  "Reducing Activation Recomputation in Large Transformer Models", MLSys 2023 / arXiv
  2205.05198, Sec. 4.2) norms and residuals run on ``T / t`` tokens.
* Tensor-parallel collectives on the critical path (Megatron's default, ``tp_comm_overlap``
  off): without sequence parallelism one all-reduce of ``T h`` after attention and one after
  the MLP in the forward, two in the backward; with it an all-gather and a reduce-scatter of
  ``T h`` in their place, in both directions (Korthikanti Sec. 4.2.2). The embedding's output
  is all-reduced (reduce-scattered with SP); with SP the output layer's input is all-gathered
  forward and reduce-scattered backward, without SP its input gradient is all-reduced.
* Output layer and loss on the last pipeline rank: final norm, the vocabulary-parallel GEMM
  ``[T, V / t, h]`` and the cross entropy over FP32 logits (three passes forward, two backward
  over ``T V / t`` floats); the embedding lookup on the first (its backward accumulates into the
  table: twice the bytes).

**Recompute** (Korthikanti Sec. 5): ``full`` runs each block's forward once more before its
backward (compute, TP collectives and CP ring again; Megatron's ``uniform`` method, every
layer); ``selective`` runs the attention core (softmax, dropout, the ``Q K^T`` and ``A V``
products: the flash-attention forward) once more. Both are ``recompute_s``; the TP and CP
parts of a full recompute are in ``tp_exposed_s`` / ``cp_exposed_s``.

**Pipeline** (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", SC 2021, Sec. 2.2): 1F1B with ``v`` model chunks per rank; rank ``r``'s
chunk ``k`` is virtual stage ``k p + r`` (Megatron's interleaved order), so ``layers_per_stage``
(``p v`` entries) gives each rank the sum of its chunks; the embedding is on virtual stage 0
(rank 0), the output layer on the last (rank ``p - 1``). Each rank's micro-batch time (compute,
exposed TP/CP/FSDP parts) gives the step by
:func:`scaledl.parallel.schedule.one_f_one_b_ms`: the slowest rank sets the pace ``m t_max``,
the bubble ``(sum t - t_max) / v`` (``(p - 1) / (v m)`` of the ideal time with equal ranks).
Point-to-point transfers of the activation cost the NetworkModel's ``send_recv`` of
``b (s / c) h / t`` elements over two ranks ``t c d`` apart: with SP the scattered tensor, without
it Megatron's scatter/gather optimisation (Narayanan Sec. 4.1: each TP rank sends ``1 / t`` of
the activation, the receivers all-gather it over NVLink, which is added to the transfer):
non-interleaved 1F1B blocks on ``send_forward_recv_backward`` / ``send_backward_recv_forward``,
so each micro-batch exposes two transfers in the steady state plus the fill and the drain,
``2 (m + p - 2)`` in all; interleaved 1F1B overlaps them (``overlap_p2p_comm``, on by default
with interleaving), leaving the fill and the drain, ``2 (p - 1)``.

**Groups and placement.** Megatron's rank order ``tp-cp-dp-pp`` (``parallel_state``'s
``order="tp-cp-ep-dp-pp"``; torchtitan's mesh is the same, innermost ``tp``): TP ranks are
consecutive, CP ranks ``t`` apart, DP ranks ``t c`` apart, pipeline neighbours ``t c d`` apart.
A group of ``n`` ranks ``stride`` apart has ``min(n, max(1, D // stride))`` ranks in one NVLink
domain of ``D`` GPUs (:class:`~scaledl.parallel.llm_collectives.CommGroup`; ``D`` the job's
``nvlink_domain_size``: 8 on an HGX board, 72 on NVL72). Context-parallel ranks hold the same
weights, so gradients are reduced and states sharded over ``d c`` ranks (Megatron's ``dp-cp``
group, torchtitan's ``dp_shard_cp`` mesh).

**Data parallelism and sharding** (gradients reduced in FP32, parameters gathered at 16 bits,
or 32 for an FP32 job):

* ``none`` (DDP) and ``zero1`` (Megatron's distributed optimizer, Rajbhandari et al., ZeRO,
  SC 2020, stage 1): gradients are accumulated over the ``m`` micro-batches and reduced once,
  bucketed over the backward of the last micro-batch (``overlap_grad_reduce``, on in the
  NeMo / Megatron-Bridge performance recipes): all-reduce, or reduce-scatter for ``zero1``;
  what outlasts that backward (and its recompute) is exposed. ``zero1`` then all-gathers the
  updated parameters, overlapped with the first micro-batch's forward of the next step
  (``overlap_param_gather``); what outlasts it is exposed. Both in ``dp_exposed_s``.
* ``fsdp`` (ZeRO-3; PyTorch FSDP2 ``fully_shard`` per block, Megatron-FSDP), ``zero2`` and
  ``hsdp``: every micro-batch all-gathers each layer's parameters before its forward, prefetched
  one layer ahead (FSDP2's implicit forward prefetch: layer ``i + 1``'s all-gather runs during
  layer ``i``), again before its backward (``fsdp``/``hsdp``; ``zero2`` keeps them,
  ``reshard_after_forward=False``), and reduce-scatters its gradients after its backward
  (FSDP2 reduces every micro-batch unless told not to). A layer's exposed part is what its
  collectives take beyond the neighbouring layer's compute; the first all-gather of the forward
  and the last reduction of the backward are exposed whole. The root unit (embedding, final
  norm, output layer) is gathered before the first layer and reduced after the backward, and
  not resharded after the forward (FSDP2's root). ``hsdp`` shards over a group of
  ``shard_group_size c`` ranks and all-reduces the ``1 / shard`` gradient shards over the
  ``d / shard_group_size`` replicas after each reduce-scatter (FSDP2 ``HSDP``). All in
  ``fsdp_exposed_s``, which is part of each micro-batch's time.
* The step ends when the slowest pipeline rank has reduced its gradients and stepped
  (``dp_exposed_s`` and ``optimizer_s`` of that rank).

**Optimizer**: Adam, memory-bound on the rank's share of the states (all of them for
``none``; ``1 / (d c)`` for ``zero1``/``zero2``/``fsdp``; ``1 / (shard_group_size c)`` for
``hsdp``): :data:`ADAM_BYTES_PER_PARAM` bytes per parameter.

**Low-precision weights**: Transformer Engine casts each block weight to FP8 (or FP4) once
per step, the weight and its transpose for the backward's data gradient, and caches them over
the micro-batches (``is_first_microbatch``): ``2 + 2 e`` bytes per block parameter on the rank
(``e`` the narrow element's bytes), memory-bound (``weight_cast_s``, the step's serial tail
with the optimizer; the kernel model charges each GEMM only its activation's cast).

**LoRA** (Hu et al. 2021; NeMo's defaults: rank :data:`LORA_RANK` adapters on ``linear_qkv``,
``linear_proj``, ``linear_fc1``, ``linear_fc2``): the base weights get no weight-gradient GEMMs
and no gradient reduction; the embedding gets no backward; each adapted linear adds its two
adapter GEMMs forward and four backward (16-bit); gradients, their reduction and the optimizer
cover the adapters only. FSDP still gathers the frozen base weights.

**The graph** (:class:`StepGraph`): one node per layer type of the pacing pipeline rank with a
repeat count (embedding, attention, mlp, head, recompute; not one node per layer), one per
collective kind, the pipeline transfers, the bubble and the optimizer, only those the job has
(5 nodes for one GPU, at most 13). Features (:data:`NODE_FEATURES`) are ``log1p`` of the
node's time and exposed time in microseconds, GFLOP, MiB and count, ``log2`` of the group
size, whether the group leaves an NVLink domain, precision bits / 32 and the exposed share of
the step. Edges (:data:`EDGE_TYPES`): ``data_flow`` (forward order, gradients to the optimizer,
optimizer to the parameter gather), ``overlaps`` (a collective to the compute that hides it),
``on_path`` (TP collectives, recompute and the bubble in series with the compute).

**Not modelled** (left to the learned correction): TP communication overlap (userbuffers),
the tied embedding's gradient all-reduce between the first and the last pipeline rank, the
cross entropy's scalar all-reduces, FP8 parameter all-gathers (torchtitan's float8
all-gather), FSDP keeping parameters gathered under a pipeline, kernel launch gaps, CUDA
graphs, data loading, stragglers.

Speed: per-shape kernel and collective times and whole per-layer costs are cached per
(kernel model, network model) pair, and the path is plain Python floats (no torch, no pandas),
so the planner can compose many candidates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache, partial
from typing import TYPE_CHECKING

import numpy as np

from scaledl.parallel.llm_collectives import CommGroup
from scaledl.parallel.schedule import one_f_one_b_ms
from scaledl.workloads.training_job import PRECISION_BYTES

if TYPE_CHECKING:
    from scaledl.models.llm_kernels import KernelModel
    from scaledl.parallel.llm_collectives import NetworkModel
    from scaledl.workloads.training_job import TrainingJob  # noqa: F401 (annotations)

#: Node types of a :class:`StepGraph` (the vocabulary a learned correction one-hot encodes).
NODE_TYPES = (
    "embedding",
    "attention",
    "mlp",
    "head",
    "recompute",
    "tp_collective",
    "cp_p2p",
    "pp_p2p",
    "bubble",
    "dp_collective",
    "param_gather",
    "fsdp_collective",
    "optimizer",
)
#: Columns of :attr:`StepGraph.node_features` (``log1p`` of scaled quantities, module docs).
NODE_FEATURES = (
    "log_time_us",  # log1p of the node's work in the step, microseconds (count included)
    "log_exposed_us",  # log1p of what of it is on the critical path, microseconds
    "log_gflop",  # log1p of its FLOPs in the step, GFLOP
    "log_mib",  # log1p of its bytes (weights on the rank; one message), MiB
    "log2_group_size",  # log2 of the ranks of its group (0 for compute)
    "spans_domains",  # 1 when its group leaves one NVLink domain
    "log_count",  # log1p of how many times it runs in the step
    "precision_bits",  # bits of its arithmetic / 32
    "exposed_share",  # exposed time / iteration
)
#: Edge types of a :class:`StepGraph`: ``data_flow`` (forward order and the step),
#: ``overlaps`` (a collective to the compute that hides it), ``on_path`` (a collective or the
#: bubble in series with the compute it belongs to).
EDGE_TYPES = ("data_flow", "overlaps", "on_path")
#: Keys of :attr:`StepBreakdown.components_s`, always all present; they add up to the step.
COMPONENTS = (
    "forward_s",
    "backward_s",
    "recompute_s",
    "tp_exposed_s",
    "cp_exposed_s",
    "fsdp_exposed_s",
    "pp_p2p_s",
    "pp_bubble_s",
    "dp_exposed_s",
    "optimizer_s",
    "weight_cast_s",
)
#: Adam with mixed precision (Megatron's distributed optimizer): reads the FP32 main parameter,
#: gradient and both moments (16 B), writes the parameter and moments (12 B) and the 16-bit
#: model copy (2 B), and the gradient-norm clipping reads the gradient again (4 B). An FP32 job
#: has no 16-bit copy: 32 B (:data:`scaledl.parallel.megatron.OPTIMIZER_BYTES_PER_PARAM`).
ADAM_BYTES_PER_PARAM = 34.0
ADAM_BYTES_PER_PARAM_FP32 = 32.0
#: LoRA adapter rank (NeMo ``LoRA(dim=32)``, the PEFT recipes' default).
LORA_RANK = 32
#: Precisions whose block GEMMs run below 16 bits; the output layer stays 16-bit for them.
LOW_PRECISIONS = frozenset({"fp8", "fp8_blockwise", "fp8_rowwise", "mxfp8", "nvfp4"})
#: Eager elements read + written per element (module docstring): FP32 RMSNorm, complex rotary,
#: SwiGLU as SiLU then a product.
EAGER_RMSNORM, EAGER_ROTARY, EAGER_SWIGLU = 18, 10, 5
_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "fp8_blockwise": 8, "fp8_rowwise": 8,
         "mxfp8": 8, "nvfp4": 4}  # fmt: skip
_MAX_CACHES = 32


@dataclass(frozen=True)
class StepGraph:
    """What :func:`compose_step` composed, as a small graph for a learned correction.

    Nodes are the pacing pipeline rank's layer types (one node per type with a repeat count,
    not one per layer), the embedding and the output layer, and the step's collectives,
    transfers, bubble and optimizer; only what the job has.

    Attributes:
        node_types: one of :data:`NODE_TYPES` per node.
        node_features: shape ``(n_nodes, len(NODE_FEATURES))``, float32.
        edges: shape ``(2, n_edges)``, int64, source and target node indices.
        edge_types: one of :data:`EDGE_TYPES` per edge.
    """

    node_types: list[str]
    node_features: np.ndarray
    edges: np.ndarray
    edge_types: list[str]


@dataclass(frozen=True)
class StepBreakdown:
    """One optimizer step (the global batch) of a training job.

    Attributes:
        iteration_s: seconds per step; equals the sum of ``components_s``.
        components_s: exposed seconds per part, every key of :data:`COMPONENTS`.
        graph: the :class:`StepGraph`, built on first access (the planner's time-only path
            never pays for it).
    """

    iteration_s: float
    components_s: dict[str, float]
    _build_graph: Callable[[], StepGraph] = field(repr=False, compare=False)

    @cached_property
    def graph(self) -> StepGraph:
        """The :class:`StepGraph` of this step."""
        return self._build_graph()


class _Cached:
    """Per-shape kernel and collective times and per-layer costs of one model pair."""

    __slots__ = ("kernels", "network", "times", "speedups", "layers")

    def __init__(self, kernels: KernelModel, network: NetworkModel) -> None:
        self.kernels = kernels
        self.network = network
        self.times: dict[tuple, float] = {}
        self.speedups: dict[tuple, float | None] = {}
        self.layers: dict[tuple, _Layer] = {}

    def _check(self, key: tuple, value: float) -> float:
        value = float(value)
        if not value >= 0.0 or math.isinf(value):
            raise ValueError(f"compose_step: {key[0]}{key[1:]} returned {value!r} s")
        self.times[key] = value
        return value

    def gemm(self, m: int, n: int, k: int, precision: str) -> float:
        key = ("gemm_s", m, n, k, precision)
        t = self.times.get(key)
        return t if t is not None else self._check(key, self.kernels.gemm_s(m, n, k, precision))

    def linear_speedup(self, m: int, k: int, n: int, precision: str) -> float | None:
        key = (m, k, n, precision)
        if key not in self.speedups:
            self.speedups[key] = self.kernels.linear_speedup(m, k, n, precision)
        return self.speedups[key]

    def attention(self, b: int, heads: int, sq: int, skv: int, d: int, causal: bool,
                  backward: bool, kernel: str) -> float:  # fmt: skip
        key = ("attention_s", b, heads, sq, skv, d, causal, backward, kernel)
        t = self.times.get(key)
        if t is None:
            t = self._check(
                key, self.kernels.attention_s(b, heads, sq, skv, d, causal, backward, kernel)
            )
        return t

    def memory(self, nbytes: float) -> float:
        key = ("memory_s", nbytes)
        t = self.times.get(key)
        return t if t is not None else self._check(key, self.kernels.memory_s(nbytes))

    def coll(self, op: str, nbytes: float, group: CommGroup) -> float:
        if group.size <= 1:
            return 0.0
        key = ("collective_s", op, nbytes, group.size, group.ranks_per_domain)
        t = self.times.get(key)
        if t is None:
            t = self._check(key, self.network.collective_s(op, nbytes, group))
        return t


_CACHES: dict[tuple[int, int], _Cached] = {}


def _cached(kernels: KernelModel, network: NetworkModel) -> _Cached:
    """The cache of a model pair (it holds both, so their ids stay theirs while cached)."""
    key = (id(kernels), id(network))
    c = _CACHES.get(key)
    if c is None:
        if len(_CACHES) >= _MAX_CACHES:
            _CACHES.clear()
        c = _CACHES[key] = _Cached(kernels, network)
    return c


@lru_cache(maxsize=4096)
def group(size: int, stride: int, domain: int) -> CommGroup:
    """A group of ``size`` ranks ``stride`` apart placed on NVLink domains of ``domain`` GPUs.

    Args:
        size: ranks in the group.
        stride: rank distance between its members (Megatron's order, module docstring).
        domain: GPUs per NVLink domain.

    Returns:
        The :class:`CommGroup` with ``ranks_per_domain = min(size, max(1, domain // stride))``
        (a 72-GPU domain holds 18 of 32 ranks 4 apart; the group spans two domains).
    """
    return CommGroup(size, min(size, max(1, domain // stride)))


@dataclass(frozen=True)
class _Layer:
    """One transformer layer on one rank, one micro-batch (seconds, FLOPs, elements)."""

    attn_f: float
    attn_b: float
    mlp_f: float
    mlp_b: float
    core_f: float  # attention core forward (selective recompute)
    tp_f: float  # TP collectives of the forward
    tp_b: float
    tp_count: int  # TP collectives per direction
    tp_bytes: float
    cp_f: float  # exposed CP ring transfers
    cp_b: float
    cp_total: float  # all CP transfers, forward and backward
    cp_bytes: float
    attn_flops: float  # forward + backward
    mlp_flops: float
    core_flops_f: float
    attn_params: float  # base parameters on the rank
    mlp_params: float
    lora_params: float  # adapter parameters on the rank


def _layer(c: _Cached, key: tuple) -> _Layer:
    """The cost of one transformer layer (key: shapes, layout, precision; module docstring)."""
    (h, heads, kv, ffn, gated, bias, norm_p, s, b, tp, cp, sp, prec, lora, domain, kernel,
     eager, rmsnorm) = key  # fmt: skip
    a = 4 if prec == "fp32" else 2  # activation bytes
    d = h // heads
    hr, kvr = heads // tp, max(1, kv // tp)
    tokens = b * s // cp
    norm_tokens = tokens / tp if sp else tokens
    fc1_n = (2 if gated else 1) * ffn // tp
    shapes_attn = ((tokens, (hr + 2 * kvr) * d, h), (tokens, h, hr * d))
    shapes_mlp = ((tokens, fc1_n, h), (tokens, h, ffn // tp))
    # a linear-level recipe (fp8_rowwise): the 16-bit GEMMs over the measured speedup (casts in)
    rowwise = c.linear_speedup(1024, 1024, 1024, prec) is not None
    gemm_prec = "bf16" if rowwise else prec
    lora_prec = prec if prec in ("fp32", "fp16") else "bf16"  # adapters stay 16/32-bit

    def linear(shapes) -> tuple[float, float, float, float]:
        fwd = bwd = flops = lora_p = 0.0
        for m, n, k in shapes:
            speedup = c.linear_speedup(m, k, n, prec) if rowwise else 1.0
            fwd += c.gemm(m, n, k, gemm_prec) / speedup
            bwd += c.gemm(m, k, n, gemm_prec) / speedup
            flops += 2.0 * m * n * k * (2 if lora else 3)
            if lora:
                r = LORA_RANK
                fwd += c.gemm(m, r, k, lora_prec) + c.gemm(m, n, r, lora_prec)
                bwd += c.gemm(m, r, n, lora_prec) + c.gemm(m, k, r, lora_prec)
                bwd += c.gemm(r, n, m, lora_prec) + c.gemm(k, r, m, lora_prec)
                flops += 2.0 * m * r * (k + n) * 3
                lora_p += r * (k + n)
            else:
                bwd += c.gemm(k, n, m, gemm_prec) / speedup
        return fwd, bwd, flops, lora_p

    qkv_f, qkv_b, attn_flops, lora_attn = linear(shapes_attn)
    mlp_f, mlp_b, mlp_flops, lora_mlp = linear(shapes_mlp)
    # attention core (module docstring: ring attention with load-balanced causal chunks)
    cp_f = cp_b = cp_total = cp_bytes = 0.0
    if cp == 1:
        core_f = c.attention(b, hr, s, s, d, True, False, kernel)
        core_b = c.attention(b, hr, s, s, d, True, True, kernel)
    else:
        sc = s // cp
        diag_f, diag_b = (c.attention(b, hr, sc, sc, d, True, bw, kernel) for bw in (False, True))
        half_f, half_b = (
            c.attention(b, hr, sc, sc // 2, d, False, bw, kernel) for bw in (False, True)
        )
        core_f = diag_f + (cp - 1) * half_f
        core_b = diag_b + (cp - 1) * half_b
        cp_group = group(cp, tp, domain)
        cp_bytes = 2.0 * b * sc * kvr * d * a
        kv_f = c.coll("send_recv", cp_bytes, cp_group)
        kv_b = c.coll("send_recv", 2.0 * cp_bytes, cp_group)
        cp_f = max(0.0, kv_f - diag_f) + (cp - 2) * max(0.0, kv_f - half_f)
        cp_b = max(0.0, kv_b - diag_b) + (cp - 2) * max(0.0, kv_b - half_b)
        cp_total = (cp - 1) * (kv_f + kv_b)
    core_flops_f = 2.0 * b * hr * d * (s // cp) * (s // cp) * cp
    attn_flops += core_flops_f * 3.5  # flash backward: five products to the forward's two
    # memory-bound work (bytes forward; backward twice)
    norm_rw = EAGER_RMSNORM if eager and rmsnorm else 2  # elements read + written per element
    rope_rw = EAGER_ROTARY if eager else 2
    act_rw = (EAGER_SWIGLU if eager else 3) if gated else 2
    attn_bytes = ((norm_rw + 3) * norm_tokens * h + rope_rw * tokens * (hr + kvr) * d) * a
    if eager and kvr < hr:  # KV heads expanded to the query heads: read K, V; write the copies
        attn_bytes += 2 * tokens * (kvr + hr) * d * a
    mlp_bytes = ((norm_rw + 3) * norm_tokens * h + act_rw * tokens * (ffn // tp)) * a
    attn_f = qkv_f + core_f + c.memory(attn_bytes)
    attn_b = qkv_b + core_b + c.memory(2 * attn_bytes)
    mlp_f += c.memory(mlp_bytes)
    mlp_b += c.memory(2 * mlp_bytes)
    # tensor-parallel collectives
    tp_bytes = float(tokens * h * a)
    tp_f = tp_b = 0.0
    tp_count = 0
    if tp > 1:
        tp_group = group(tp, 1, domain)
        if sp:
            one = c.coll("all_gather", tp_bytes, tp_group) + c.coll(
                "reduce_scatter", tp_bytes, tp_group
            )
            tp_count = 4
        else:
            one = c.coll("all_reduce", tp_bytes, tp_group)
            tp_count = 2
        tp_f = tp_b = 2 * one
    # column-parallel biases are split, row-parallel ones (after the all-reduce) are not
    attn_params = h * (hr + 2 * kvr) * d + hr * d * h + norm_p
    mlp_params = h * fc1_n + (ffn // tp) * h + norm_p
    if bias:
        attn_params += (hr + 2 * kvr) * d + h
        mlp_params += fc1_n + h
    return _Layer(
        attn_f, attn_b, mlp_f, mlp_b, core_f, tp_f, tp_b, tp_count, tp_bytes, cp_f, cp_b,
        cp_total, cp_bytes, attn_flops, mlp_flops, core_flops_f, float(attn_params),
        float(mlp_params), float(lora_attn + lora_mlp),
    )  # fmt: skip


def _ends(c: _Cached, job: TrainingJob, sp: bool, domain: int, norm_p: int) -> tuple:
    """Embedding and output layer of one micro-batch: times, TP collectives, params, FLOPs."""
    m = job.model
    h, v, tp, prec = m.hidden_size, m.vocab_size, job.tp_size, job.precision
    a = 4 if prec == "fp32" else 2
    tokens = job.micro_batch * job.seq_len // job.cp_size
    norm_tokens = tokens / tp if sp else tokens
    lora = job.task == "lora"
    norm_rw = EAGER_RMSNORM if job.elementwise == "eager" and m.norm == "rmsnorm" else 2
    key = ("ends", h, v, tokens, tp, sp, prec, lora, domain, m.tied_embeddings, job.pp_size,
           norm_p, norm_rw)  # fmt: skip
    hit = c.layers.get(key)
    if hit is not None:
        return hit
    vr = -(-v // tp)
    emb_bytes = 2.0 * tokens * h * a
    emb_f = c.memory(emb_bytes)
    emb_b = 0.0 if lora else c.memory(2 * emb_bytes)
    head_prec = "bf16" if prec in LOW_PRECISIONS else prec
    head_gemm = (tokens, vr, h)
    loss_bytes = 4.0 * tokens * vr
    head_f = c.memory(norm_rw * norm_tokens * h * a) + c.gemm(*head_gemm, head_prec)
    head_f += c.memory(3 * loss_bytes)
    head_b = c.memory(2 * norm_rw * norm_tokens * h * a) + c.memory(2 * loss_bytes)
    head_b += c.gemm(tokens, h, vr, head_prec)
    head_flops = 2.0 * tokens * vr * h * (2 if lora else 3)
    if not lora:
        head_b += c.gemm(h, vr, tokens, head_prec)
    tp_bytes = float(tokens * h * a)
    emb_tp = head_tp = 0.0
    if tp > 1:
        g = group(tp, 1, domain)
        if sp:
            emb_tp = c.coll("reduce_scatter", tp_bytes, g) + c.coll("all_gather", tp_bytes, g)
            head_tp = c.coll("all_gather", tp_bytes, g) + c.coll("reduce_scatter", tp_bytes, g)
        else:
            emb_tp = c.coll("all_reduce", tp_bytes, g)
            head_tp = c.coll("all_reduce", tp_bytes, g)
    emb_params = float(vr * h)
    shared = m.tied_embeddings and job.pp_size == 1
    head_params = float(norm_p + (0 if shared else vr * h))
    out = (emb_f, emb_b, emb_tp, emb_params, head_f, head_b, head_tp, head_params, head_flops)
    c.layers[key] = out
    return out


def compose_step(job: TrainingJob, kernels: KernelModel, network: NetworkModel) -> StepBreakdown:
    """Compose one optimizer step of ``job`` (module docstring).

    Args:
        job: the training job (model shape, layout, sharding, recompute, batch; validated by
            :class:`~scaledl.workloads.training_job.TrainingJob`).
        kernels: kernel times of the job's GPU, seconds.
        network: collective times of the job's GPU systems, built for its
            ``nvlink_domain_size`` (the groups are placed on domains of that size), seconds.

    Returns:
        The :class:`StepBreakdown`.

    Raises:
        ValueError: a kernel or network model returning a negative or non-finite time (the
            message names the call and its arguments).
    """
    c = _cached(kernels, network)
    m = job.model
    tp, pp, cp, vp, dp = job.tp_size, job.pp_size, job.cp_size, job.vp_size, job.dp_size
    sp = bool(job.sequence_parallel)
    domain = job.nvlink_domain_size
    prec, lora, n_mb = job.precision, job.task == "lora", job.grad_accum
    recompute, sharding = job.activation_checkpointing, job.sharding
    norm_p = m.hidden_size * (2 if m.norm == "layernorm" else 1)
    key = (m.hidden_size, m.num_heads, m.num_kv_heads, m.ffn_size, m.gated_mlp, m.linear_bias,
           norm_p, job.seq_len, job.micro_batch, tp, cp, sp, prec, lora, domain,
           job.attention_kernel, job.elementwise == "eager", m.norm == "rmsnorm")  # fmt: skip
    L = c.layers.get(key)
    if L is None:
        L = c.layers[key] = _layer(c, key)
    emb_f, emb_b, emb_tp, emb_p, head_f, head_b, head_tp, head_p, head_flops = _ends(
        c, job, sp, domain, norm_p
    )
    if job.layers_per_stage is None:  # TrainingJob.rank_layers, without its generator
        layers = [m.num_layers // pp] * pp
    else:
        layers = list(job.rank_layers)
    a_param = 4 if prec == "fp32" else 2
    full, selective = recompute == "full", recompute == "selective"
    layer_f = L.attn_f + L.mlp_f
    layer_b = L.attn_b + L.mlp_b
    layer_p = L.attn_params + L.mlp_params
    layer_g = L.lora_params if lora else layer_p  # parameters with gradients
    rec_layer = layer_f if full else (L.core_f if selective else 0.0)
    tp_layer = L.tp_f * (2 if full else 1) + L.tp_b
    cp_layer = L.cp_f * (2 if full else 1) + L.cp_b

    # sharding groups (module docstring): over d*c ranks, hsdp over shard_group_size*c
    dp_cp = dp * cp
    if sharding == "hsdp":
        g = job.shard_group_size or dp
        shard, replicas = g * cp, dp // g
    elif sharding == "none":
        shard, replicas = 1, dp_cp
    else:
        shard, replicas = dp_cp, 1
    fsdp_like = sharding in ("fsdp", "zero2", "hsdp")
    shard_group = group(shard, tp, domain)
    rep_group = group(replicas, tp * shard, domain)
    ag_l = rs_l = ar_l = cb_l = 0.0
    if fsdp_like:
        ag_l = c.coll("all_gather", layer_p * a_param, shard_group)
        rs_l = c.coll("reduce_scatter", layer_g * 4.0, shard_group)
        ar_l = c.coll("all_reduce", layer_g * 4.0 / shard, rep_group)
        cb_l = (0.0 if sharding == "zero2" else ag_l) + rs_l + ar_l

    rank_t, parts = [], {}  # parts: per distinct (layers, first rank, last rank)
    for r, n in enumerate(layers):
        first, last = r == 0, r == pp - 1
        hit = parts.get((n, first, last))
        if hit is not None:
            rank_t.append(hit[0])
            continue
        f = n * layer_f + (emb_f if first else 0.0) + (head_f if last else 0.0)
        b = n * layer_b + (emb_b if first else 0.0) + (head_b if last else 0.0)
        rec = n * rec_layer
        tpx = n * tp_layer + (emb_tp if first else 0.0) + (head_tp if last else 0.0)
        cpx = n * cp_layer
        params = n * layer_p + (emb_p if first else 0.0) + (head_p if last else 0.0)
        root_p = (emb_p if first else 0.0) + (head_p if last else 0.0)
        if lora:
            grads = n * L.lora_params
            root_g = 0.0
        else:
            grads, root_g = params, root_p
        fs = 0.0
        if fsdp_like and (shard > 1 or replicas > 1):
            ag_root = c.coll("all_gather", root_p * a_param, shard_group) if root_p else 0.0
            red_root = 0.0
            if root_g:
                red_root = c.coll("reduce_scatter", root_g * 4.0, shard_group)
                red_root += c.coll("all_reduce", root_g * 4.0 / shard, rep_group)
            if n:
                fwd_hide = L.attn_f + L.mlp_f + L.tp_f + L.cp_f
                bwd_hide = layer_b + rec_layer + L.tp_b + L.cp_b + (L.tp_f + L.cp_f if full else 0)
                fs = ag_l + (n - 1) * max(0.0, ag_l - fwd_hide)
                fs += (n - 1) * max(0.0, cb_l - bwd_hide) + rs_l + ar_l
            fs += ag_root + red_root
        total = f + b + rec + tpx + cpx + fs
        rank_t.append(total)
        parts[(n, first, last)] = (total, f, b, rec, tpx, cpx, fs, grads)
    steady, bubble = one_f_one_b_ms(rank_t, n_mb, vp)
    pace = max(parts.values(), key=lambda part: part[0])
    n_p = max((key[0] for key, part in parts.items() if part is pace))

    # pipeline transfers
    p2p_one = p2p_s = 0.0
    p2p_bytes = 0.0
    if pp > 1:
        a = 4 if prec == "fp32" else 2
        p2p_bytes = job.micro_batch * (job.seq_len // cp) * m.hidden_size * a / tp
        p2p_one = c.coll("send_recv", p2p_bytes, group(2, tp * cp * dp, domain))
        if not sp:  # scatter/gather: the receiver all-gathers the activation over NVLink
            p2p_one += c.coll("all_gather", p2p_bytes * tp, group(tp, 1, domain))
        p2p_s = 2 * p2p_one * ((n_mb + pp - 2) if vp == 1 else (pp - 1))

    # gradient reduction, parameter gather and optimizer: the latest-finishing rank
    opt_bytes = ADAM_BYTES_PER_PARAM_FP32 if prec == "fp32" else ADAM_BYTES_PER_PARAM
    # low-precision block weights: read 16-bit, write the weight and its transpose (module doc)
    # (none for a linear-level recipe: torchao casts each weight per GEMM, inside its speedup)
    low = prec in LOW_PRECISIONS and c.linear_speedup(1024, 1024, 1024, prec) is None
    cast_per_param = 2.0 + 2.0 * PRECISION_BYTES[prec] if low else 0.0
    tail_best = None
    dp_group = group(dp_cp, tp, domain)
    for (n, _, _), (_, f, b, rec, _, _, _, grads) in parts.items():
        red = gather = red_x = gather_x = 0.0
        if sharding in ("none", "zero1") and dp_cp > 1:
            hide = b + rec
            if sharding == "none":
                red = c.coll("all_reduce", grads * 4.0, dp_group)
            else:
                red = c.coll("reduce_scatter", grads * 4.0, dp_group)
                gather = c.coll("all_gather", grads * a_param, dp_group)
                gather_x = max(0.0, gather - f)
            red_x = max(0.0, red - hide)
        opt = c.memory(opt_bytes * grads / shard)
        cast = c.memory(cast_per_param * n * layer_p) if cast_per_param else 0.0
        tail = red_x + gather_x + opt + cast
        if tail_best is None or tail > tail_best[0]:
            tail_best = (tail, red, gather, red_x, gather_x, opt, cast, grads)
    tail, red, gather, red_x, gather_x, opt, cast, grads_tail = tail_best

    _, f, b, rec, tpx, cpx, fs, _ = pace
    comp = {
        "forward_s": n_mb * f,
        "backward_s": n_mb * b,
        "recompute_s": n_mb * rec,
        "tp_exposed_s": n_mb * tpx,
        "cp_exposed_s": n_mb * cpx,
        "fsdp_exposed_s": n_mb * fs,
        "pp_p2p_s": p2p_s,
        "pp_bubble_s": bubble,
        "dp_exposed_s": red_x + gather_x,
        "optimizer_s": opt,
        "weight_cast_s": cast,
    }
    iteration = steady + bubble + p2p_s + tail
    inputs = (
        L, n_mb, n_p, prec, emb_f, emb_b, emb_p, a_param, head_f, head_b, head_p, head_flops,
        rec, selective, lora, full, tp, tpx, domain, cp, cpx, pp, vp, dp, p2p_one, p2p_s,
        p2p_bytes, bubble, red, red_x, grads_tail, dp_cp, gather, gather_x, fs, fsdp_like,
        shard, replicas, sharding, ag_l, cb_l, layer_p, opt, cast, opt_bytes, iteration,
    )  # fmt: skip
    return StepBreakdown(iteration, comp, partial(_step_graph, inputs))


def _step_graph(inputs: tuple) -> StepGraph:
    """The graph of a step from :func:`compose_step`'s values (:class:`StepGraph`)."""
    (
        L, n_mb, n_p, prec, emb_f, emb_b, emb_p, a_param, head_f, head_b, head_p, head_flops,
        rec, selective, lora, full, tp, tpx, domain, cp, cpx, pp, vp, dp, p2p_one, p2p_s,
        p2p_bytes, bubble, red, red_x, grads_tail, dp_cp, gather, gather_x, fs, fsdp_like,
        shard, replicas, sharding, ag_l, cb_l, layer_p, opt, cast, opt_bytes, iteration,
    ) = inputs  # fmt: skip
    # ---- the graph (pacing rank's layers; module docstring of StepGraph) ----
    bits = _BITS.get(prec, 16)
    head_bits = 16 if prec in LOW_PRECISIONS else bits
    spans = _spans
    rows: list[tuple] = []  # (type, time, exposed, flops, bytes, group, spans, count, bits)

    def add(*row) -> None:
        rows.append(row)

    add("embedding", n_mb * (emb_f + emb_b), n_mb * (emb_f + emb_b), 0.0, emb_p * a_param,
        1, 0, n_mb, bits)  # fmt: skip
    if n_p:
        t_attn = n_mb * n_p * (L.attn_f + L.attn_b)
        t_mlp = n_mb * n_p * (L.mlp_f + L.mlp_b)
        add("attention", t_attn, t_attn, n_mb * n_p * L.attn_flops, n_p * L.attn_params *
            a_param, 1, 0, n_mb * n_p, bits)  # fmt: skip
        add("mlp", t_mlp, t_mlp, n_mb * n_p * L.mlp_flops, n_p * L.mlp_params * a_param, 1, 0,
            n_mb * n_p, bits)  # fmt: skip
    t_head = n_mb * (head_f + head_b)
    add("head", t_head, t_head, n_mb * head_flops, head_p * a_param, 1, 0, n_mb, head_bits)
    if rec:
        fwd_share = 1.0 / (2.0 if lora else 3.0)  # forward FLOPs of forward + backward
        rec_flops = L.core_flops_f if selective else (L.attn_flops + L.mlp_flops) * fwd_share
        add("recompute", n_mb * rec, n_mb * rec, n_mb * n_p * rec_flops, 0.0, 1, 0, n_mb * n_p,
            bits)  # fmt: skip
    if tp > 1:
        count = n_mb * (n_p * L.tp_count * (3 if full else 2) + 2)
        add("tp_collective", n_mb * tpx, n_mb * tpx, 0.0, L.tp_bytes, tp,
            spans(tp, 1, domain), count, bits)  # fmt: skip
    if cp > 1:
        add("cp_p2p", n_mb * n_p * L.cp_total * (1.5 if full else 1.0), n_mb * cpx, 0.0,
            L.cp_bytes, cp, spans(cp, tp, domain), n_mb * n_p * 2 * (cp - 1), 16)  # fmt: skip
    if pp > 1:
        add("pp_p2p", 2 * p2p_one * n_mb * vp, p2p_s, 0.0, p2p_bytes, 2,
            spans(2, tp * cp * dp, domain), 2 * n_mb * vp, bits)  # fmt: skip
        add("bubble", bubble, bubble, 0.0, 0.0, pp, 0, pp * vp, bits)
    if red:
        add("dp_collective", red, red_x, 0.0, grads_tail * 4.0, dp_cp,
            spans(dp_cp, tp, domain), 1, 32)  # fmt: skip
    if gather:
        add("param_gather", gather, gather_x, 0.0, grads_tail * a_param, dp_cp,
            spans(dp_cp, tp, domain), 1, bits)  # fmt: skip
    if fs or (fsdp_like and (shard > 1 or replicas > 1)):
        per_dir = 3 if sharding != "zero2" else 2
        fs_total = n_mb * n_p * (ag_l + cb_l)
        add("fsdp_collective", fs_total, n_mb * fs, 0.0, layer_p * a_param, shard * replicas,
            spans(shard * replicas, tp, domain), n_mb * n_p * per_dir, bits)  # fmt: skip
    add("optimizer", opt + cast, opt + cast, 0.0, opt_bytes * grads_tail / shard, 1, 0, 1, 32)

    return _graph(rows, iteration)


#: The graph's edges ``(source type, target type, edge type)``, kept where both nodes exist.
_EDGES = (
    ("embedding", "attention", "data_flow"),
    ("attention", "mlp", "data_flow"),
    ("mlp", "attention", "data_flow"),
    ("mlp", "head", "data_flow"),
    ("head", "optimizer", "data_flow"),
    ("recompute", "attention", "on_path"),
    ("recompute", "mlp", "on_path"),
    ("tp_collective", "attention", "on_path"),
    ("tp_collective", "mlp", "on_path"),
    ("cp_p2p", "attention", "overlaps"),
    ("pp_p2p", "bubble", "on_path"),
    ("bubble", "attention", "on_path"),
    ("bubble", "mlp", "on_path"),
    ("dp_collective", "attention", "overlaps"),
    ("dp_collective", "mlp", "overlaps"),
    ("fsdp_collective", "attention", "overlaps"),
    ("fsdp_collective", "mlp", "overlaps"),
    ("dp_collective", "optimizer", "data_flow"),
    ("fsdp_collective", "optimizer", "data_flow"),
    ("optimizer", "param_gather", "data_flow"),
    ("param_gather", "embedding", "overlaps"),
    ("param_gather", "attention", "overlaps"),
)


def _graph(rows: list[tuple], iteration: float) -> StepGraph:
    """The :class:`StepGraph` of node rows (:data:`NODE_FEATURES`).

    Args:
        rows: ``(type, time_s, exposed_s, flops, bytes, group size, spans, count, bits)``.
        iteration: the step, seconds.
    """
    types = [r[0] for r in rows]
    idx = {t: i for i, t in enumerate(types)}
    kept = [(idx[a], idx[b], e) for a, b, e in _EDGES if a in idx and b in idx]
    log1p, log2 = math.log1p, math.log2
    inv = 1.0 / iteration if iteration > 0 else 0.0
    feats = np.array(
        [(log1p(t * 1e6), log1p(x * 1e6), log1p(fl * 1e-9), log1p(nb / 1048576.0), log2(size),
          span, log1p(count), nbits / 32.0, x * inv)
         for _, t, x, fl, nb, size, span, count, nbits in rows],
        dtype=np.float32,
    )  # fmt: skip
    edges = np.array(([k[0] for k in kept], [k[1] for k in kept]), dtype=np.int64)
    return StepGraph(types, feats, edges, [k[2] for k in kept])


def _spans(size: int, stride: int, domain: int) -> int:
    """1 when the group of :func:`group` leaves one NVLink domain."""
    return int(group(size, stride, domain).ranks_per_domain < size)
