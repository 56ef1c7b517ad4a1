import pytest

from scaledl.planning.llm_memory import (
    MemoryDoesNotFit,
    check_fits,
    in_flight_chunks,
    layer_activation_bytes,
    layer_parameters,
    rank_memory,
    stage_layers,
    usable_bytes,
)
from scaledl.workloads.training_job import ModelShape

#: GPT-3 175B as Korthikanti et al. 2022 Table 3 trains it: h 12288, 96 heads, 96 layers, s 2048.
GPT3 = {"seq_len": 2048, "micro_batch": 1, "hidden_size": 12288, "num_heads": 96}
SBH = 2048 * 1 * 12288
#: Llama-3-70B (Meta's config.json): 80 layers, width 8192, 64 heads, 8 KV heads, 28672, 128256.
LLAMA3_70B = ModelShape(hidden_size=8192, num_layers=80, num_heads=64, num_kv_heads=8,
                        ffn_size=28672, vocab_size=128256)  # fmt: skip
#: A small model whose figures are easy to follow by hand.
SMALL = ModelShape(hidden_size=64, num_layers=4, num_heads=4, num_kv_heads=4, ffn_size=256,
                   vocab_size=1000, gated_mlp=False)  # fmt: skip


@pytest.mark.parametrize(
    ("options", "per_sbh"),
    [
        ({}, 34 + 5 * 96 * 2048 / 12288),  # no parallelism: 34 + 5as/h = 114
        ({"tp_size": 8}, 10 + 24 / 8 + 5 * 96 * 2048 / (12288 * 8)),  # tensor parallel: 23
        ({"tp_size": 8, "sequence_parallel": True}, 34 / 8 + 5 * 96 * 2048 / (12288 * 8)),
        ({"tp_size": 8, "recompute": "selective"}, 10 + 24 / 8),  # TP + selective
        ({"tp_size": 8, "sequence_parallel": True, "recompute": "selective"}, 34 / 8),
        ({"tp_size": 8, "recompute": "full"}, 2),  # full: the layer's input
        ({"tp_size": 8, "sequence_parallel": True, "recompute": "full"}, 2 / 8),
    ],
)
def test_korthikanti_table_2_per_layer(options, per_sbh):
    """Table 2 of Korthikanti et al. for their GPT (materialised softmax, dropout, GeLU)."""
    assert layer_activation_bytes(**GPT3, **options) == pytest.approx(SBH * per_sbh, rel=1e-12)


def test_context_parallel_and_llama_terms_by_hand():
    s, b, h, a, k, f, t = 8192, 1, 8192, 64, 8, 28672, 8
    # Llama: SwiGLU (6 s b f), GQA (K, V of 8 heads: one head per rank at t = 8), flash
    # attention (4 a s b fp32 log-sum-exp), no dropout; SP splits the 8 s b h of norms and inputs.
    d = h // a
    by_hand = (2 * s * b * h / t + 4 * s * b * d * max(k / t, 1) + 2 * s * b * h / t
               + 6 * s * b * f / t + 4 * a * s * b / t + 8 * s * b * h / t)  # fmt: skip
    llama = {"seq_len": s, "micro_batch": b, "hidden_size": h, "num_heads": a,
             "num_kv_heads": k, "ffn_size": f, "gated_mlp": True, "dropout": False,
             "attention": "flash", "tp_size": t, "sequence_parallel": True}  # fmt: skip
    assert layer_activation_bytes(**llama) == pytest.approx(by_hand, rel=1e-12)
    # Context parallelism of 2 halves every term (flash keeps no s^2 term).
    assert layer_activation_bytes(**llama, cp_size=2) == pytest.approx(by_hand / 2, rel=1e-12)
    # The materialised softmax of a CP rank is its query chunk against the whole sequence.
    gpt = layer_activation_bytes(**GPT3, cp_size=2)
    assert gpt == pytest.approx(SBH / 2 * 34 + 5 * 96 * 1024 * 2048, rel=1e-12)


def test_in_flight_micro_batches_match_korthikanti_eq_5():
    # 1F1B: stage i holds min(m, p - i) micro-batches; with m < p, all m.
    assert in_flight_chunks(0, 8, 1, 64) == [0] * 8
    assert in_flight_chunks(5, 8, 1, 64) == [0] * 3
    assert in_flight_chunks(0, 8, 1, 2) == [0] * 2
    assert in_flight_chunks(0, 1, 1, 64) == [0]
    # Interleaved (p = 8, v = 2): 2 (p - 1) + (v - 1) p + 1 = 23 chunk forwards on stage 0, the
    # first 8 on chunk 0, then 8 on chunk 1, then 7 on chunk 0.
    chunks = in_flight_chunks(0, 8, 2, 64)
    assert chunks == [0] * 8 + [1] * 8 + [0] * 7
    # Eq. 5: stage 0 holds L (1 + (p - 1) / (p v)) layers' activations: 96 * 23 / 16 = 138.
    assert len(chunks) * 96 // 16 == 96 * (1 + 7 / 16)
    memory = rank_memory(SMALL, seq_len=128, micro_batch=1, grad_accum=8, pp_size=2, vp_size=2,
                         stage=0, attention="materialized", dropout=True)  # fmt: skip
    # 2 (2 - 1) + 2 + 1 = 5 chunk forwards of one layer each, plus the embedding's dropout mask.
    per_layer = layer_activation_bytes(seq_len=128, micro_batch=1, hidden_size=64, num_heads=4,
                                       ffn_size=256)  # fmt: skip
    assert memory.in_flight == 5
    assert memory.activations_bytes == pytest.approx(5 * per_layer + 5 * 128 * 64, rel=1e-12)


def test_last_stage_adds_output_layer_and_fp32_logits():
    kw = {"seq_len": 128, "micro_batch": 2, "grad_accum": 4, "pp_size": 2}
    last = rank_memory(SMALL, stage=1, **kw)
    per_layer = layer_activation_bytes(seq_len=128, micro_batch=2, hidden_size=64, num_heads=4,
                                       ffn_size=256, dropout=False, attention="flash")  # fmt: skip
    sb = 128 * 2
    # Stage 1 of 2: one micro-batch of its 2 layers; 4 s b h (final norm, output GEMM inputs)
    # and 4 s b V of fp32 logits (Korthikanti Sec. 4.3).
    assert last.activations_bytes == pytest.approx(2 * per_layer + 4 * sb * 64 + 4 * sb * 1000)


def test_parameters_per_rank_add_up_to_the_model():
    n = LLAMA3_70B.n_params()
    assert n == pytest.approx(70.55e9, rel=1e-3)
    whole = rank_memory(LLAMA3_70B, seq_len=8192, micro_batch=1, grad_accum=1)
    assert whole.parameters == pytest.approx(n, rel=1e-9)
    # Eight tensor-parallel ranks hold an eighth, but for the replicated norms and K/V heads
    # (8 KV heads over 8 ranks: one each, so K/V split evenly too).
    tp8 = rank_memory(LLAMA3_70B, seq_len=8192, micro_batch=1, grad_accum=1, tp_size=8)
    norms = (2 * 80 + 1) * 8192
    assert tp8.parameters == pytest.approx((n - norms) / 8 + norms, rel=1e-9)
    # More ranks than KV heads: each rank keeps one KV head (replicated), not 8/16 of one.
    per_layer_16 = layer_parameters(LLAMA3_70B, 16)
    kv_rank = 2 * 8192 * 128
    assert per_layer_16 == pytest.approx((2 * 8192**2 + 3 * 8192 * 28672) / 16 + kv_rank + 2 * 8192)


@pytest.mark.parametrize(
    ("options", "bytes_per_param"),
    [
        ({"sharding": "none"}, 2 + 4 + 12),  # Megatron: bf16 weights, fp32 grads, 12 of Adam
        ({"sharding": "zero1", "dp_size": 8}, 6 + 12 / 8),  # distributed optimizer: 6 + 12/d
        ({"sharding": "zero1", "dp_size": 4, "cp_size": 2}, 6 + 12 / 8),  # over dp x cp
        ({"sharding": "zero2", "dp_size": 8}, 2 + 16 / 8),
        ({"sharding": "none", "precision": "fp32"}, 16),
        ({"sharding": "none", "precision": "fp8"}, 20),  # + row/column-wise fp8 copies
        ({"sharding": "zero1", "dp_size": 8, "task": "lora"}, 2),  # frozen base weights only
    ],
)
def test_model_states_per_parameter(options, bytes_per_param):
    memory = rank_memory(SMALL, seq_len=128, micro_batch=1, grad_accum=1, **options)
    assert memory.states_bytes == pytest.approx(bytes_per_param * memory.parameters, rel=1e-12)


def test_fsdp_shards_states_and_gathers_two_units():
    unit = layer_parameters(SMALL)
    for sharding, group, extra in (("fsdp", 16, {}), ("hsdp", 4, {"shard_group_size": 4})):
        memory = rank_memory(SMALL, seq_len=128, micro_batch=1, grad_accum=1, dp_size=16,
                             sharding=sharding, **extra)  # fmt: skip
        p = memory.parameters
        # fp32 parameters, gradients and moments sharded (16 bytes / d); two bf16 units gathered
        # (computing and prefetched) and one fp32 gradient unit unsharded.
        assert memory.weights_bytes == pytest.approx(4 * p / group + 4 * unit)
        assert memory.gradients_bytes == pytest.approx(4 * p / group + 4 * unit)
        assert memory.optimizer_bytes == pytest.approx(8 * p / group)


def test_full_recompute_keeps_inputs_plus_one_layer():
    kw = {"seq_len": 128, "micro_batch": 1, "grad_accum": 1, "tp_size": 2,
          "sequence_parallel": True}  # fmt: skip
    full = rank_memory(SMALL, recompute="full", **kw)
    shape = {"seq_len": 128, "micro_batch": 1, "hidden_size": 64, "num_heads": 4,
             "ffn_size": 256, "tp_size": 2, "sequence_parallel": True, "dropout": False,
             "attention": "flash"}  # fmt: skip
    logits = 4 * 128 * 64 / 2 + 4 * 128 * 1000 / 2
    assert full.activations_bytes == pytest.approx(
        4 * 2 * 128 * 64 / 2 + layer_activation_bytes(**shape) + logits
    )
    none = rank_memory(SMALL, recompute="none", **kw)
    assert none.activations_bytes == pytest.approx(4 * layer_activation_bytes(**shape) + logits)


def test_uneven_split_and_the_most_loaded_stage():
    assert stage_layers(80, 4, 5) == (4,) * 20
    with pytest.raises(ValueError, match="layers_per_stage"):
        stage_layers(80, 3, 1)
    with pytest.raises(ValueError, match="summing to num_layers=4"):
        stage_layers(4, 2, 1, (1, 2))
    kw = {"seq_len": 128, "micro_batch": 1, "grad_accum": 4, "pp_size": 2}
    heavy_last = rank_memory(SMALL, layers_per_stage=(1, 3), **kw)
    assert heavy_last.stage == 1
    assert heavy_last.total_bytes == max(
        rank_memory(SMALL, layers_per_stage=(1, 3), stage=s, **kw).total_bytes for s in (0, 1)
    )


def test_a_layout_that_does_not_fit_is_refused_with_its_figures():
    # Llama-3-70B on 8 H100s with tensor parallelism only and no optimizer sharding: a rank
    # holds (70,553,706,496 - 161 norms x 8192) / 8 + 161 x 8192 = 8,820,367,360 parameters,
    # 18 bytes each (2 + 4 + 12: 16.4 + 32.9 + 98.6 GiB), and 80 layers of 281.3 MB of
    # activations (SP, SwiGLU, flash) plus 0.56 GB for the output layer and logits: 21.5 GiB.
    memory = rank_memory(LLAMA3_70B, seq_len=8192, micro_batch=1, grad_accum=64, tp_size=8,
                         sequence_parallel=True, sharding="none")  # fmt: skip
    assert memory.parameters == 8_820_367_360
    assert memory.states_bytes == pytest.approx(18 * 8_820_367_360)
    with pytest.raises(MemoryDoesNotFit) as refused:
        check_fits(memory, 80.0)
    message = str(refused.value)
    assert "weights 16.4 + grads 32.9 + optimizer 98.6 + activations 21.5 = 169.3 GiB" in message
    # An "80 GB" H100 holds 80 GiB; 10% headroom leaves 72 GiB.
    assert "> 72.0 GiB usable (80 GiB less 10% headroom" in message
    assert refused.value.usable_bytes == 72 * 2**30
    # Distributed optimizer over 16 data-parallel ranks, pipeline of 8, full recompute: fits.
    fits = rank_memory(LLAMA3_70B, seq_len=8192, micro_batch=1, grad_accum=64, tp_size=8,
                       pp_size=8, dp_size=16, sequence_parallel=True, sharding="zero1",
                       recompute="full")  # fmt: skip
    check_fits(fits, 80.0)
    assert usable_bytes(80.0, 0.25) == 60 * 2**30
    with pytest.raises(ValueError, match="headroom"):
        usable_bytes(80.0, 1.0)


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="sharding 'zero3'"):
        rank_memory(SMALL, seq_len=8, micro_batch=1, grad_accum=1, sharding="zero3")
    with pytest.raises(ValueError, match="recompute 'some'"):
        layer_activation_bytes(**GPT3, recompute="some")
    with pytest.raises(ValueError, match="precision 'int4'"):
        rank_memory(SMALL, seq_len=8, micro_batch=1, grad_accum=1, precision="int4")
    with pytest.raises(ValueError, match="stage=2 outside"):
        rank_memory(SMALL, seq_len=8, micro_batch=1, grad_accum=1, pp_size=2, stage=2)


def test_uneven_interleaved_stage_counts_its_chunks_in_flight():
    # p = 2, v = 3 (6 virtual stages) over 9 layers: stage 0 holds chunks of 1, 2 and 1 layers
    # (virtual stages 0, 2, 4); 2 (2 - 1) + 2 * 2 + 1 = 7 forwards at most m v = 12: chunks
    # 0, 0, 1, 1, 2, 2, 0 -> 3 x 1 + 2 x 2 + 2 x 1 = 9 layers held.
    split = (1, 2, 2, 1, 1, 2)
    assert in_flight_chunks(0, 2, 3, 6) == [0, 0, 1, 1, 2, 2, 0]
    kw = {"seq_len": 64, "micro_batch": 1, "grad_accum": 6, "pp_size": 2, "vp_size": 3}
    shape = {"seq_len": 64, "micro_batch": 1, "hidden_size": 64, "num_heads": 4,
             "ffn_size": 256, "dropout": False, "attention": "flash"}  # fmt: skip
    stage0 = rank_memory(SMALL.model_copy(update={"num_layers": 9}), layers_per_stage=split,
                         stage=0, **kw)  # fmt: skip
    assert stage0.activations_bytes == pytest.approx(9 * layer_activation_bytes(**shape))


def test_the_most_loaded_stage_is_the_most_loaded_of_all():
    """The stages rank_memory compares (module docstring) give the maximum over every stage."""
    model = SMALL.model_copy(update={"num_layers": 13})
    for pp, vp, split in ((4, 1, (2, 4, 4, 3)), (4, 2, (1, 2, 2, 2, 2, 2, 1, 1)),
                          (5, 1, (1, 3, 3, 3, 3)), (3, 1, (5, 4, 4))):  # fmt: skip
        for sharding in ("none", "zero1", "fsdp"):
            kw = {"seq_len": 256, "micro_batch": 1, "grad_accum": 8, "pp_size": pp,
                  "vp_size": vp, "layers_per_stage": split, "dp_size": 2,
                  "sharding": sharding}  # fmt: skip
            every = max(rank_memory(model, stage=s, **kw).total_bytes for s in range(pp))
            assert rank_memory(model, **kw).total_bytes == every


def test_fp8_keeps_gemm_inputs_in_one_byte_and_fp32_doubles():
    s, h, a, f, t = 1024, 64, 4, 256, 2
    sb, d = s * 1, h // a
    shape = {"seq_len": s, "micro_batch": 1, "hidden_size": h, "num_heads": a, "ffn_size": f,
             "gated_mlp": True, "dropout": False, "attention": "flash", "tp_size": t,
             "sequence_parallel": True}  # fmt: skip
    # Q 2, K and V 2 each (4 heads / 2 ranks), output projection input 1, gate and up 2 each
    # and the down projection's input 1 per element; norms 2 x 2, QKV and up inputs 1 x 2.
    by_hand = (2 * sb * h / t + 4 * sb * d * 2 + 1 * sb * h / t + 5 * sb * f / t
               + 4 * a * sb / t + 6 * sb * h / t)  # fmt: skip
    assert layer_activation_bytes(**shape, gemm_input_bytes=1.0) == pytest.approx(by_hand)
    kw = {"seq_len": s, "micro_batch": 1, "grad_accum": 1, "tp_size": t,
          "sequence_parallel": True}  # fmt: skip
    logits = 4 * sb * h / t + 4 * sb * 1000 / t
    fp8 = rank_memory(SMALL.model_copy(update={"gated_mlp": True}), precision="fp8", **kw)
    assert fp8.activations_bytes == pytest.approx(4 * by_hand + logits)
    bf16 = layer_activation_bytes(**shape)
    fp32 = layer_activation_bytes(**shape, element_bytes=4.0, gemm_input_bytes=4.0)
    assert fp32 - 4 * a * sb / t == pytest.approx(2 * (bf16 - 4 * a * sb / t))  # LSE is fp32
