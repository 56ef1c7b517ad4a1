import pytest

from scaledl.models.domain import range_features
from scaledl.planning.memory import activation_bytes, estimate_memory, fits_memory
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
