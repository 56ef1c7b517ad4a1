import pytest
from tiny_specs import tiny

from scaledl.models.domain import range_features
from scaledl.planning.memory import (
    activation_bytes,
    estimate_layout_memory,
    estimate_memory,
    fits_memory,
    stage_activation_bytes,
)
from scaledl.workloads.spec import Workload

#: BERT-base (Devlin et al. 2019): 12 layers, width 768, 12 heads, feed-forward 3072.
BERT_BASE = {
    "family": "bert",
    "hidden_size": 768,
    "num_layers": 12,
    "num_heads": 12,
    "intermediate_size": 3072,
    "vocab_size": 30522,
    "seq_len": 512,
    "batch_size": 8,
}


def bert_base(**fields):
    return Workload.parse({**BERT_BASE, **fields})


def test_activations_of_bert_base_by_hand():
    # Korthikanti et al. Eq. 1: s b h (34 + 5 a s / h) 16-bit bytes per layer; 5 a s / h = 40.
    per_layer_16bit = 512 * 8 * 768 * (34 + 40)
    logits_fp32 = (4 + 4) * 512 * 8 * 30522
    assert activation_bytes(bert_base()) == 12 * 2 * per_layer_16bit + logits_fp32
    logits_bf16 = (2 + 4) * 512 * 8 * 30522
    assert activation_bytes(bert_base(precision="bf16")) == 12 * per_layer_16bit + logits_bf16
    # Inference keeps one layer's activations at a time.
    assert activation_bytes(bert_base(mode="infer")) == 2 * per_layer_16bit + logits_fp32


def test_model_states_of_bert_base_by_hand():
    p = 110e6
    single = estimate_memory(bert_base(), p)
    assert (single.weights_bytes, single.gradients_bytes, single.optimizer_bytes) == (
        4 * p,
        4 * p,
        8 * p,
    )
    assert single.total_bytes == 16 * p + activation_bytes(bert_base())
    ddp = estimate_memory(bert_base(world_size=2), p)
    assert ddp.gradients_bytes == 8 * p  # DDP's buckets copy the gradients
    infer = estimate_memory(bert_base(mode="infer"), p)
    assert infer.gradients_bytes == infer.optimizer_bytes == 0
    # 1.76 GB of model states + 6.59 GB of activations: fits 16 GB, not 8 GB.
    assert single.total_bytes / 1e9 == pytest.approx(8.35, abs=0.01)
    assert fits_memory(single.total_bytes, 16e9) and not fits_memory(single.total_bytes, 8e9)
    with pytest.raises(ValueError, match="headroom"):
        fits_memory(1.0, 2.0, headroom=1.0)


def test_traced_parameters_of_bert_base_match_the_published_count():
    """BERT-base has 110M parameters (Devlin et al. 2019); the masked-LM head adds its
    transform (0.6M) and shares the embedding matrix."""
    parameters = range_features([bert_base()])["parameters"].iloc[0]
    assert parameters == pytest.approx(110e6, rel=0.05)


def test_t5_decoder_adds_cross_attention():
    t5 = Workload.parse(
        {
            "family": "t5",
            "hidden_size": 64,
            "num_layers": 2,
            "num_heads": 4,
            "intermediate_size": 128,
            "vocab_size": 100,
            "seq_len": 32,
            "decoder_seq_len": 16,
            "batch_size": 2,
        }
    )
    p, s, sd, b, h, a, i = 4, 32, 16, 2, 64, 4, 128
    layer = lambda seq: (p / 2) * (18 * seq * b * h + 4 * seq * b * i + 5 * a * seq**2 * b)  # noqa: E731
    cross = (p / 2) * (11 * sd * b * h + 5 * a * sd * s * b)
    expected = 2 * layer(s) + 2 * (layer(sd) + cross) + (p + 4) * sd * b * 100
    assert activation_bytes(t5) == pytest.approx(expected)


# --- layouts (hand-computed; tiny BERT: h=32, i=64, a=2, s=16, V=100, fp32) -------------------
def _layout(**fields):
    return tiny("bert", num_layers=2, **fields)


def test_tensor_parallel_activations_and_states_by_hand():
    w = _layout(batch_size=4, tp_size=2, world_size=2)
    # per layer 2 * (10*16*4*32 + (8*16*4*32 + 4*16*4*64 + 5*2*256*4) / 2) = 83968; two layers
    # and logits (4 + 4) * 16 * 4 * 100 = 51200
    e = estimate_layout_memory(w, [1000.0], 0.0)
    assert e.activations_bytes == 2 * 83968 + 51200
    assert (e.weights_bytes, e.gradients_bytes, e.optimizer_bytes) == (4000, 4000, 8000)


@pytest.mark.parametrize(
    ("sharding", "expected"),
    [
        ("none", (4000, 8000, 8000)),
        ("zero1", (4000, 8000, 2000)),
        ("zero2", (4000, 1000, 2000)),
        ("fsdp", (1000 + 2 * 4 * 300, 1000, 2000)),
    ],
)
def test_zero_stages_by_hand(sharding, expected):
    w = _layout(batch_size=4, world_size=4, sharding=sharding)
    e = estimate_layout_memory(w, [1000.0], 300.0)
    assert (e.weights_bytes, e.gradients_bytes, e.optimizer_bytes) == expected


@pytest.mark.parametrize(
    ("schedule", "stage0", "stage1"),
    [("1f1b", 2 * 63488, 63488 + 25600), ("gpipe", 4 * 63488, 4 * (63488 + 25600))],
)
def test_pipeline_stage_activations_by_hand(schedule, stage0, stage1):
    # batch 8 in 4 micro-batches of 2: per layer 2 * (18*16*2*32 + 4*16*2*64 + 5*2*256*2)
    # = 63488; logits of a micro-batch 8 * 16 * 2 * 100 = 25600 on the last stage; 1F1B holds
    # min(4, 2 - s) micro-batches, GPipe 4.
    w = _layout(batch_size=8, pp_size=2, world_size=2, micro_batches=4,
                pipeline_schedule=schedule)  # fmt: skip
    assert stage_activation_bytes(w, 0) == stage0
    assert stage_activation_bytes(w, 1) == stage1
    peak = estimate_layout_memory(w, [10.0, 10.0], 0.0)
    assert peak.activations_bytes == max(stage0, stage1)
    with pytest.raises(ValueError, match="stage_parameters has 1"):
        estimate_layout_memory(w, [10.0], 0.0)
