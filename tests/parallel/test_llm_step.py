"""compose_step on hand-computed cases with fake kernel and network models.

The fake kernels take FLOPs / 1e12 s (attention: ``4 b h s_q s_kv d``, halved when causal,
x2.5 backward) and ``bytes * inv_bw`` for memory-bound work; the fake network takes a constant
per collective kind, so every expected value below is a sum written out by hand.

Model: h=64, 4 heads (d=16), 4 KV heads, ffn=128 (SwiGLU), vocab 256, 4 layers; s=32, b=1.
Per layer forward GEMM FLOPs: QKV 2*32*192*64 = 786432, out 2*32*64*64 = 262144,
fc1 2*32*256*64 = 1048576, fc2 2*32*64*128 = 524288 (attention part 1048576, MLP 1572864);
causal attention 4*1*4*32*32*16/2 = 131072. Forward 2752512 per layer; backward: GEMMs twice
(5242880) + attention 2.5x (327680) = 5570560. Output layer 2*32*256*64 = 1048576 forward,
twice that backward.
"""

import math

import numpy as np
import pytest

from scaledl.parallel.llm_collectives import CommGroup
from scaledl.parallel.llm_step import (
    ADAM_BYTES_PER_PARAM,
    COMPONENTS,
    EDGE_TYPES,
    LORA_RANK,
    NODE_FEATURES,
    NODE_TYPES,
    compose_step,
    group,
)
from scaledl.workloads.training_job import TrainingJob

F = 1e12
GPU = "NVIDIA H100 80GB HBM3"
MODEL = dict(hidden_size=64, num_layers=4, num_heads=4, num_kv_heads=4, ffn_size=128,
             vocab_size=256)  # fmt: skip
LAYER_F = 2752512 / F
LAYER_B = 5570560 / F
ATTN_CORE_F = 131072 / F
HEAD_F = 1048576 / F
HEAD_B = 2097152 / F


class FakeKernels:
    """FLOP-proportional GEMMs and attention, memory at ``inv_bw`` seconds per byte."""

    def __init__(self, inv_bw: float = 0.0) -> None:
        self.inv_bw = inv_bw
        self.gemms: list[tuple] = []
        self.kernels: set[str] = set()

    def gemm_s(self, m, n, k, precision):
        self.gemms.append((m, n, k, precision))
        return 2.0 * m * n * k / F * (0.5 if precision == "fp8" else 1.0)

    def attention_s(self, batch, heads, seq_q, seq_kv, head_dim, causal, backward,
                    kernel="cudnn"):  # fmt: skip
        self.kernels.add(kernel)
        flops = 4.0 * batch * heads * seq_q * seq_kv * head_dim * (0.5 if causal else 1.0)
        return flops / F * (2.5 if backward else 1.0) * (2.0 if kernel != "cudnn" else 1.0)

    def memory_s(self, bytes_moved):
        return bytes_moved * self.inv_bw

    def linear_speedup(self, m, k, n, precision):
        return 2.0 if precision == "fp8_rowwise" else None


class FakeNetwork:
    """A constant time per collective kind; records every call."""

    def __init__(self, **seconds: float) -> None:
        self.seconds = {"all_reduce": 0.0, "all_gather": 0.0, "reduce_scatter": 0.0,
                        "send_recv": 0.0, **seconds}  # fmt: skip
        self.calls: list[tuple] = []

    def collective_s(self, op, message_bytes, group):
        self.calls.append((op, message_bytes, group))
        return self.seconds[op]


def job(**kw) -> TrainingJob:
    fields = dict(model=MODEL, seq_len=32, gpu=GPU, n_gpus=1, nvlink_domain_size=8,
                  global_batch=1, sharding="none")  # fmt: skip
    fields.update(kw)
    model = kw.get("model")
    if isinstance(model, dict):
        fields["model"] = {**MODEL, **model}
    return TrainingJob(**fields)


def step(j, kernels=None, network=None):
    r = compose_step(j, kernels or FakeKernels(), network or FakeNetwork())
    assert set(r.components_s) == set(COMPONENTS)
    assert r.iteration_s == pytest.approx(sum(r.components_s.values()), rel=1e-12)
    return r


def test_one_gpu_is_the_plain_sum_of_its_kernels():
    r = step(job())
    c = r.components_s
    assert c["forward_s"] == pytest.approx(4 * LAYER_F + HEAD_F, rel=1e-12)
    assert c["backward_s"] == pytest.approx(4 * LAYER_B + HEAD_B, rel=1e-12)
    assert r.iteration_s == pytest.approx(c["forward_s"] + c["backward_s"], rel=1e-12)
    others = set(COMPONENTS) - {"forward_s", "backward_s", "optimizer_s"}
    assert all(c[k] == 0.0 for k in others)


def test_the_job_attention_kernel_times_every_attention_call():
    # the fake's non-cuDNN kernels take twice as long: each layer's attention core, forward and
    # backward, costs twice as much and nothing else changes
    for cp in (1, 2):
        fields = dict(n_gpus=cp, cp_size=cp, activation_checkpointing="selective")
        fake = FakeKernels()
        base = step(job(**fields), fake).components_s
        assert fake.kernels == {"cudnn"}
        fake = FakeKernels()
        fa2 = step(job(attention_kernel="flash_attention_2", **fields), fake).components_s
        assert fake.kernels == {"flash_attention_2"}
        core = ATTN_CORE_F / cp
        assert fa2["forward_s"] - base["forward_s"] == pytest.approx(4 * core, rel=1e-9)
        assert fa2["backward_s"] - base["backward_s"] == pytest.approx(4 * 2.5 * core, rel=1e-9)
        assert fa2["recompute_s"] == pytest.approx(2 * base["recompute_s"], rel=1e-12)


def test_eager_elementwise_moves_the_unfused_operators_bytes():
    # per layer forward, 16-bit elements (T = 32 tokens, h = 64, 4 + 4 heads of 16, ffn 128):
    # RMSNorm 18 instead of 2 (two norms), rotary 10 instead of 2 on 32 * 128 Q/K elements,
    # SwiGLU 5 instead of 3 on 32 * 128; the final norm 18 instead of 2; backward twice
    layer = (2 * 16 * 32 * 64 + 8 * 32 * 128 + 2 * 32 * 128) * 2
    final = 16 * 32 * 64 * 2
    fused = step(job(), FakeKernels(1e-12)).components_s
    eager = step(job(elementwise="eager"), FakeKernels(1e-12)).components_s
    forward = (4 * layer + final) * 1e-12
    assert eager["forward_s"] - fused["forward_s"] == pytest.approx(forward, rel=1e-9)
    assert eager["backward_s"] - fused["backward_s"] == pytest.approx(2 * forward, rel=1e-9)
    # grouped-query attention (2 KV heads): the eager copy reads 2 x 32 x 2 x 16 KV elements
    # and writes 2 x 32 x 4 x 16; the rotary then covers 32 * (64 + 32) Q/K elements
    gqa = {"model": {"num_kv_heads": 2}}
    fused = step(job(**gqa), FakeKernels(1e-12)).components_s
    eager = step(job(elementwise="eager", **gqa), FakeKernels(1e-12)).components_s
    layer = (2 * 16 * 32 * 64 + 8 * 32 * 96 + 2 * 32 * 128 + 2 * 32 * 6 * 16) * 2
    forward = (4 * layer + final) * 1e-12
    assert eager["forward_s"] - fused["forward_s"] == pytest.approx(forward, rel=1e-9)
    # LayerNorm is one native kernel in eager PyTorch too
    ln = {"model": {"norm": "layernorm", "gated_mlp": False}}
    fused = step(job(**ln), FakeKernels(1e-12)).components_s
    eager = step(job(elementwise="eager", **ln), FakeKernels(1e-12)).components_s
    layer = 8 * 32 * 128 * 2
    assert eager["forward_s"] - fused["forward_s"] == pytest.approx(4 * layer * 1e-12, rel=1e-9)


def test_optimizer_reads_every_parameter_of_one_rank():
    j = job()
    r = step(j, FakeKernels(inv_bw=1e-12))
    assert r.components_s["optimizer_s"] == pytest.approx(
        ADAM_BYTES_PER_PARAM * j.model.n_params() * 1e-12, rel=1e-12
    )


def test_full_recompute_adds_one_forward_of_each_block_selective_the_attention_core():
    full = step(job(activation_checkpointing="full")).components_s
    assert full["recompute_s"] == pytest.approx(4 * LAYER_F, rel=1e-12)
    sel = step(job(activation_checkpointing="selective")).components_s
    assert sel["recompute_s"] == pytest.approx(4 * ATTN_CORE_F, rel=1e-12)
    assert sel["forward_s"] == full["forward_s"] == step(job()).components_s["forward_s"]


def test_grad_accumulation_repeats_the_micro_batch_and_steps_once():
    one = step(job(), FakeKernels(1e-12)).components_s
    four = step(job(global_batch=4), FakeKernels(1e-12)).components_s
    for k in ("forward_s", "backward_s"):
        assert four[k] == pytest.approx(4 * one[k], rel=1e-12)
    assert four["optimizer_s"] == one["optimizer_s"]


def test_interleaved_bubble_and_p2p_by_hand():
    # pp=2, 4 micro-batches: rank 0 holds 2 layers (+ the free embedding), rank 1 2 layers and
    # the output layer, so rank 1 sets the pace; the bubble is rank 0's time / v.
    net = FakeNetwork(send_recv=1e-3)
    rank0 = 2 * (LAYER_F + LAYER_B)
    rank1 = rank0 + HEAD_F + HEAD_B
    plain = step(job(n_gpus=2, pp_size=2, global_batch=4), network=net).components_s
    assert plain["pp_bubble_s"] == pytest.approx(rank0, rel=1e-12)
    assert plain["forward_s"] == pytest.approx(4 * (2 * LAYER_F + HEAD_F), rel=1e-12)
    # blocking 1F1B: 2 transfers per micro-batch plus fill and drain, 2 (m + p - 2)
    assert plain["pp_p2p_s"] == pytest.approx(2 * 1e-3 * (4 + 2 - 2))
    inter = step(job(n_gpus=2, pp_size=2, vp_size=2, global_batch=4), network=net)
    assert inter.components_s["pp_bubble_s"] == pytest.approx(rank0 / 2, rel=1e-12)
    assert inter.components_s["pp_p2p_s"] == pytest.approx(2 * 1e-3 * (2 - 1))  # fill, drain
    steady = 4 * rank1
    assert inter.iteration_s == pytest.approx(steady + rank0 / 2 + 2e-3, rel=1e-12)
    op, nbytes, g = net.calls[-1]
    assert (op, nbytes, g) == ("send_recv", 1 * 32 * 64 * 2, CommGroup(2, 2))


def test_uneven_stages_the_slowest_rank_sets_the_pace():
    # layers_per_stage (3, 1): rank 0 has three blocks, rank 1 one block and the output layer
    j = job(n_gpus=2, pp_size=2, global_batch=4, layers_per_stage=(3, 1))
    r = step(j)
    rank0 = 3 * (LAYER_F + LAYER_B)
    rank1 = LAYER_F + LAYER_B + HEAD_F + HEAD_B
    assert rank0 > rank1
    assert r.components_s["forward_s"] == pytest.approx(4 * 3 * LAYER_F, rel=1e-12)
    assert r.components_s["pp_bubble_s"] == pytest.approx(rank1, rel=1e-12)
    assert r.iteration_s > step(job(n_gpus=2, pp_size=2, global_batch=4)).iteration_s


def test_tensor_parallel_collectives_with_and_without_sequence_parallel():
    net = FakeNetwork(all_reduce=1.0, all_gather=10.0, reduce_scatter=100.0)
    no_sp = step(job(n_gpus=2, tp_size=2, sequence_parallel=False), network=net)
    # 2 all-reduces per block forward and 2 backward; the embedding's and the output layer's
    assert no_sp.components_s["tp_exposed_s"] == pytest.approx(4 * 4 * 1.0 + 2 * 1.0)
    assert {g for _, _, g in net.calls} == {CommGroup(2, 2)}
    assert {b for _, b, _ in net.calls} == {32 * 64 * 2}
    sp = step(job(n_gpus=2, tp_size=2), network=net)
    assert sp.components_s["tp_exposed_s"] == pytest.approx((4 * 4 + 2) * 110.0)
    # GEMMs split over 2 ranks: half the forward FLOPs of the single GPU
    assert no_sp.components_s["forward_s"] == pytest.approx((4 * LAYER_F + HEAD_F) / 2, 1e-12)
    # sequence parallelism runs norms and residual adds on half the tokens: per block
    # 2 x (5 x 16 x 64 x 2) bytes fewer forward, plus the final norm's 2 x 16 x 64 x 2
    k = FakeKernels(inv_bw=1e-9)
    saved = step(job(n_gpus=2, tp_size=2, sequence_parallel=False), k).components_s["forward_s"]
    saved -= step(job(n_gpus=2, tp_size=2), k).components_s["forward_s"]
    assert saved == pytest.approx((4 * 2 * 5 * 16 * 64 * 2 + 2 * 16 * 64 * 2) * 1e-9, 1e-9)


def test_context_parallel_ring_exposes_what_attention_does_not_hide():
    # cp=2: the causal diagonal on 16 tokens (4*4*16*16*16/2 FLOPs) and half a chunk against
    # it (4*4*16*8*16): together half the causal attention of 32 tokens
    diag_f, half_f = 32768 / F, 32768 / F
    net = FakeNetwork(send_recv=1.0)
    r = step(job(n_gpus=2, cp_size=2), network=net).components_s
    per_layer = (1.0 - diag_f) + (1.0 - 2.5 * diag_f)  # one transfer each way, hidden by diag
    assert r["cp_exposed_s"] == pytest.approx(4 * per_layer, rel=1e-12)
    attn = 4 * (diag_f + half_f)
    assert r["forward_s"] == pytest.approx((4 * (LAYER_F - ATTN_CORE_F) + HEAD_F) / 2 + attn)
    sends = {(b, g) for op, b, g in net.calls if op == "send_recv"}
    kv = 2 * 16 * 4 * 16 * 2  # K and V of 16 tokens, 4 heads of 16, 2 bytes
    assert sends == {(kv, CommGroup(2, 2)), (2 * kv, CommGroup(2, 2))}
    fast = step(job(n_gpus=2, cp_size=2), network=FakeNetwork(send_recv=1e-12)).components_s
    assert fast["cp_exposed_s"] == 0.0


def test_fsdp_exposes_only_what_the_neighbouring_layer_does_not_hide():
    # 2 GPUs fsdp, 1 micro-batch: all-gather before each forward and backward, reduce-scatter
    # after each backward; the root (embedding, norm, output layer) gathered and reduced once.
    small = step(job(n_gpus=2, global_batch=2, sharding="fsdp"),
                 network=FakeNetwork(all_gather=1e-15, reduce_scatter=2e-15))  # fmt: skip
    # hidden layers contribute 0; first gather, last reduction and the root's two are exposed
    assert small.components_s["fsdp_exposed_s"] == pytest.approx(1e-15 + 2e-15 + 1e-15 + 2e-15)
    ag, rs = 1e-3, 2e-3
    big = step(job(n_gpus=2, global_batch=2, sharding="fsdp"),
               network=FakeNetwork(all_gather=ag, reduce_scatter=rs))  # fmt: skip
    expected = ag + 3 * (ag - LAYER_F) + 3 * (ag + rs - LAYER_B) + rs + ag + rs
    assert big.components_s["fsdp_exposed_s"] == pytest.approx(expected, rel=1e-12)
    zero2 = step(job(n_gpus=2, global_batch=2, sharding="zero2"),
                 network=FakeNetwork(all_gather=ag, reduce_scatter=rs))  # fmt: skip
    expected = ag + 3 * (ag - LAYER_F) + 3 * (rs - LAYER_B) + rs + ag + rs
    assert zero2.components_s["fsdp_exposed_s"] == pytest.approx(expected, rel=1e-12)


def test_hsdp_shards_inside_the_node_and_all_reduces_across():
    net = FakeNetwork(all_gather=1e-15, reduce_scatter=1e-15, all_reduce=1e-15)
    j = job(n_gpus=16, global_batch=16, sharding="hsdp", shard_group_size=8)
    r = step(j, FakeKernels(inv_bw=1e-12), net)
    groups = {(op, g) for op, _, g in net.calls}
    assert groups == {("all_gather", CommGroup(8, 8)), ("reduce_scatter", CommGroup(8, 8)),
                      ("all_reduce", CommGroup(2, 1))}  # fmt: skip
    layer_params = j.model.layer_params()
    ar = {b for op, b, _ in net.calls if op == "all_reduce"}
    assert layer_params * 4 / 8 in ar  # the shard of one layer's FP32 gradients
    assert r.components_s["optimizer_s"] == pytest.approx(
        ADAM_BYTES_PER_PARAM * j.model.n_params() / 8 * 1e-12, rel=1e-12
    )
    fsdp16 = compose_step(job(n_gpus=16, global_batch=16, sharding="fsdp"), FakeKernels(), net)
    assert fsdp16.components_s["optimizer_s"] == 0.0
    assert net.calls[-1][2] == CommGroup(16, 8)


def test_distributed_optimizer_overlaps_with_the_last_backward_and_first_forward():
    j = job(n_gpus=2, global_batch=2, sharding="zero1")
    hidden = step(j, network=FakeNetwork(reduce_scatter=1e-15, all_gather=1e-15))
    assert hidden.components_s["dp_exposed_s"] == 0.0
    net = FakeNetwork(reduce_scatter=1.0, all_gather=0.5)
    r = step(j, network=net).components_s
    fwd, bwd = 4 * LAYER_F + HEAD_F, 4 * LAYER_B + HEAD_B
    assert r["dp_exposed_s"] == pytest.approx((1.0 - bwd) + (0.5 - fwd), rel=1e-12)
    n = j.model.n_params()
    assert sorted((op, b) for op, b, _ in net.calls) == [("all_gather", n * 2),
                                                        ("reduce_scatter", n * 4)]  # fmt: skip
    ddp = step(job(n_gpus=2, global_batch=2), network=FakeNetwork(all_reduce=1.0)).components_s
    assert ddp["dp_exposed_s"] == pytest.approx(1.0 - bwd, rel=1e-12)


def test_lora_drops_base_weight_gradients_and_reduces_only_the_adapters():
    k = FakeKernels(inv_bw=1e-12)
    net = FakeNetwork(all_reduce=1e-15)
    r = step(job(n_gpus=2, global_batch=2, task="lora"), k, net).components_s
    # adapters on qkv (64->192), proj (64->64), fc1 (64->256), fc2 (128->64), rank 32
    adapters = 4 * LORA_RANK * ((64 + 192) + (64 + 64) + (64 + 256) + (128 + 64))
    assert [b for op, b, _ in net.calls] == [adapters * 4]
    assert r["optimizer_s"] == pytest.approx(ADAM_BYTES_PER_PARAM * adapters * 1e-12, 1e-12)
    full = step(job(n_gpus=2, global_batch=2), FakeKernels()).components_s
    lora = step(job(n_gpus=2, global_batch=2, task="lora"), FakeKernels()).components_s
    weight_grads = 4 * 2621440 / F + 1048576 / F  # blocks' and output layer's
    r32 = LORA_RANK
    per_linear = [(32, 192, 64), (32, 64, 64), (32, 256, 64), (32, 64, 128)]
    adapter_b = 4 * sum(2 * (m * r32 * n + m * k * r32 + r32 * n * m + k * r32 * m)
                        for m, n, k in per_linear) / F  # fmt: skip
    assert lora["backward_s"] == pytest.approx(full["backward_s"] - weight_grads + adapter_b)


def test_fp8_runs_block_gemms_in_fp8_and_keeps_the_output_layer_16_bit():
    k = FakeKernels()
    r = step(job(precision="fp8"), k)
    bf16 = {(m, n, kk) for m, n, kk, p in k.gemms if p != "fp8"}
    assert bf16 == {(32, 256, 64), (32, 64, 256), (64, 256, 32)}  # the output layer's three
    assert r.components_s["forward_s"] == pytest.approx(
        4 * (2621440 / 2 + 131072) / F + HEAD_F, rel=1e-12
    )


def test_fp8_rowwise_divides_the_16_bit_linears_by_the_measured_speedup_and_casts_nothing():
    k = FakeKernels()  # its row-wise speedup is 2.0 for every linear
    r = step(job(precision="fp8_rowwise"), k)
    assert {p for *_, p in k.gemms} == {"bf16"}  # row-wise GEMMs are never composed one by one
    assert r.components_s["forward_s"] == pytest.approx(
        4 * (2621440 / 2 + 131072) / F + HEAD_F, rel=1e-12
    )
    slow_memory = FakeKernels(inv_bw=1e-12)
    assert step(job(precision="fp8_rowwise"), slow_memory).components_s["weight_cast_s"] == 0.0
    assert step(job(precision="fp8"), slow_memory).components_s["weight_cast_s"] > 0.0


def test_groups_follow_megatron_rank_order_on_nvlink_domains():
    assert group(8, 1, 8) == CommGroup(8, 8)  # tp inside a node
    assert group(4, 8, 8) == CommGroup(4, 1)  # dp of tp=8 replicas: one rank per node
    assert group(4, 4, 8) == CommGroup(4, 2)  # cp=4 over tp=4: two per node
    assert group(16, 4, 72) == CommGroup(16, 16)  # NVL72 holds it
    assert group(32, 4, 72) == CommGroup(32, 18)  # 18 in the first domain, 14 in the next


def test_graph_is_small_typed_and_finite():
    j = job(n_gpus=16, tp_size=2, pp_size=2, vp_size=2, cp_size=2, global_batch=8,
            activation_checkpointing="full", sharding="zero1")  # fmt: skip
    net = FakeNetwork(all_reduce=1e-4, all_gather=1e-4, reduce_scatter=1e-4, send_recv=1e-4)
    g = step(j, FakeKernels(1e-12), net).graph
    assert set(g.node_types) <= set(NODE_TYPES)
    assert {"attention", "mlp", "tp_collective", "cp_p2p", "pp_p2p", "bubble", "recompute",
            "dp_collective", "param_gather", "optimizer"} <= set(g.node_types)  # fmt: skip
    assert g.node_features.shape == (len(g.node_types), len(NODE_FEATURES))
    assert g.node_features.dtype == np.float32 and np.isfinite(g.node_features).all()
    assert g.edges.dtype == np.int64 and g.edges.shape == (2, len(g.edge_types))
    assert g.edges.max() < len(g.node_types) and set(g.edge_types) <= set(EDGE_TYPES)
    share = g.node_features[:, NODE_FEATURES.index("exposed_share")]
    assert 0.0 <= share.min() and share.max() <= 1.0
    plain = step(job()).graph
    assert plain.node_types == ["embedding", "attention", "mlp", "head", "optimizer"]
    count = plain.node_features[plain.node_types.index("attention"), NODE_FEATURES.index(
        "log_count")]  # fmt: skip
    assert count == pytest.approx(math.log1p(4))


def test_the_graph_is_built_on_first_access_from_the_composed_values():
    j = job(n_gpus=4, tp_size=2, pp_size=2, global_batch=4)
    r = compose_step(j, FakeKernels(1e-12), FakeNetwork(all_reduce=1e-4, send_recv=1e-4))
    assert "graph" not in r.__dict__
    g = r.graph
    assert r.graph is g
    bubble = g.node_features[g.node_types.index("bubble"), NODE_FEATURES.index("log_time_us")]
    assert bubble == pytest.approx(math.log1p(r.components_s["pp_bubble_s"] * 1e6), rel=1e-6)


def test_a_negative_kernel_time_is_refused_naming_the_call():
    class Broken(FakeKernels):
        def gemm_s(self, m, n, k, precision):
            return -1.0

    with pytest.raises(ValueError, match="gemm_s.*-1.0"):
        compose_step(job(), Broken(), FakeNetwork())


def test_pipeline_transfers_send_a_tensor_parallel_slice():
    # tp=2 x pp=2: each TP rank sends 1/2 of the activation; without SP the receivers then
    # all-gather it (Megatron's scatter/gather), with SP the scattered tensor is what is needed
    net = FakeNetwork(send_recv=1.0, all_gather=10.0)
    j = dict(n_gpus=4, tp_size=2, pp_size=2, global_batch=2)
    sp = step(job(**j), network=net).components_s
    sends = {(b, g) for op, b, g in net.calls if op == "send_recv"}
    assert sends == {(32 * 64 * 2 / 2, CommGroup(2, 2))}
    assert sp["pp_p2p_s"] == pytest.approx(2 * 1.0 * (2 + 2 - 2))
    no_sp = step(job(**j, sequence_parallel=False), network=net).components_s
    assert no_sp["pp_p2p_s"] == pytest.approx(2 * 11.0 * (2 + 2 - 2))


def test_fp16_lora_on_a_gpu_without_bf16_keeps_its_adapters_in_fp16():
    fake = FakeKernels()
    step(job(gpu="Tesla V100-SXM3-32GB", precision="fp16", task="lora"), fake)
    assert {p for *_, p in fake.gemms} == {"fp16"}
