import pytest
import torch
import transformers
from tiny_specs import SPECS, TINY, gpt2_config, tiny_spec
from torch import nn

from scaledl.graph.tracing import trace_units
from scaledl.graph.units import LAYER_TYPES, classify, find_units
from scaledl.workloads.builders import build_model
from scaledl.workloads.spec import Workload


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.Linear(8, 8)
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
        self.ln = nn.LayerNorm(8)


class Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(8))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok_embed = nn.Embedding(10, 8)
        self.layers = nn.ModuleList([Block(), Block()])
        self.drop = nn.Dropout(0.1)
        self.scale = Scale()
        self.proj = nn.Linear(8, 4)
        self.again = self.proj  # the same module registered twice


def test_find_units_by_structure():
    units = find_units(Net())
    got = [(u.name, u.layer_type, u.block) for u in units]
    assert got == [
        ("tok_embed", "embedding", ""),
        ("layers.0.attn", "attention", "layers.0"),
        ("layers.0.mlp", "feed-forward", "layers.0"),
        ("layers.0.ln", "norm", "layers.0"),
        ("layers.1.attn", "attention", "layers.1"),
        ("layers.1.mlp", "feed-forward", "layers.1"),
        ("layers.1.ln", "norm", "layers.1"),
        ("scale", "other", ""),
        ("proj", "head", ""),
    ]
    assert [u.params for u in units] == [80, 72, 280, 16, 72, 280, 16, 8, 36]
    assert sum(u.params for u in units) == sum(p.numel() for p in Net().parameters())


def test_find_units_on_parameter_free_model_fails():
    with pytest.raises(ValueError, match="Sequential"):
        find_units(nn.Sequential(nn.ReLU(), nn.Dropout()))


@pytest.mark.parametrize(
    ("attr", "module", "expected"),
    [
        ("patch_embeddings", nn.Conv2d(3, 8, 4), "patch-embed"),
        ("embeddings", nn.Sequential(nn.Conv2d(3, 8, 4)), "patch-embed"),
        ("embed_tokens", nn.Embedding(4, 4), "embedding"),
        ("embedding_hidden_mapping_in", nn.Linear(4, 8), "projection"),
        ("embeddings_project", nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8)), "projection"),
        ("embeddings", nn.Sequential(nn.Embedding(4, 4), nn.Linear(4, 8)), "embedding"),
        ("rotary_emb", nn.Module(), "rotary-embedding"),
        ("input_layernorm", nn.LayerNorm(4), "norm"),
        ("EncDecAttention", nn.Linear(4, 4), "cross-attention"),
        ("self_attn", nn.Linear(4, 4), "attention"),
        ("mlp", nn.Linear(4, 4), "feed-forward"),
        ("pooler", nn.Linear(4, 4), "pooler"),
        ("classifier", nn.Linear(4, 4), "head"),
        ("proj", nn.Linear(4, 4), "head"),
        ("gate", nn.Conv1d(4, 4, 1), "other"),
        ("dropout", nn.Dropout(), None),
        ("blocks", nn.Sequential(nn.Linear(4, 4)), None),
    ],
)
def test_classify(attr, module, expected):
    assert classify(attr, module) == expected
    assert expected is None or expected in LAYER_TYPES


@pytest.mark.parametrize("family", [*SPECS, "hf"])
def test_units_cover_every_parameter_without_overlap(family, tmp_path):
    if family == "hf":
        spec = tiny_spec("hf", gpt2_config(tmp_path, n_layer=2))
    else:
        spec = SPECS[family]
    model = build_model(Workload.parse(spec), device="meta")
    units = find_units(model)
    assert {u.layer_type for u in units} <= set(LAYER_TYPES)
    # Units are disjoint modules ...
    modules = [id(m) for u in units for m in u.module.modules()]
    assert len(modules) == len(set(modules))
    # ... that together hold every parameter.
    covered = {id(p) for u in units for p in u.module.parameters()}
    assert covered == {id(p) for p in model.parameters()}
    # Two transformer blocks: every block unit names one of them.
    blocks = {u.block for u in units if u.block}
    assert len(blocks) >= 2
    assert {"attention", "feed-forward"} <= {u.layer_type for u in units if u.block}


TINY_TOKENS = TINY["batch_size"] * 16  # tiny_spec's hf sequence length is 16


def _calls(tmp_path, config, **fields):
    """Trace a tiny Hugging Face config on the meta device: its unit calls in order."""
    config.to_json_file(tmp_path / "config.json")
    workload = Workload.parse(tiny_spec("hf", tmp_path / "config.json", **fields))
    return trace_units(workload)[0]


def _ops(call) -> set[str]:
    return {op.name for op in call.operators}


def test_albert_factorised_embedding_and_shared_stack_typed_by_computation(tmp_path):
    config = transformers.AlbertConfig(
        vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=3,
        num_attention_heads=2, intermediate_size=64, max_position_embeddings=32,
        architectures=["AlbertForMaskedLM"],
    )  # fmt: skip
    calls = _calls(tmp_path, config)
    by_name = {}
    for c in calls:
        by_name.setdefault(c.unit.name, []).append(c)
    lookup = by_name["albert.embeddings"][0]
    assert lookup.unit.layer_type == "embedding"
    assert "embedding" in _ops(lookup)  # a table lookup
    (mapping,) = by_name["albert.encoder.embedding_hidden_mapping_in"]
    # named "embedding" but a 16 -> 32 matrix product on hidden states: no lookup
    assert mapping.unit.layer_type == "projection"
    assert "embedding" not in _ops(mapping)
    assert _ops(mapping) & {"addmm", "mm"}
    assert mapping.fwd_flops == 2 * 16 * 32 * TINY_TOKENS
    # the one shared AlbertLayer is called once per layer: one unit, three calls, same types
    shared = [n for n in by_name if ".albert_layers.0." in n]
    assert {by_name[n][0].unit.layer_type for n in shared} == {"attention", "feed-forward", "norm"}
    for name in shared:
        assert [c.call_index for c in by_name[name]] == [0, 1, 2]
        assert [c.params > 0 for c in by_name[name]] == [True, False, False]


@pytest.mark.parametrize(
    "config",
    [
        transformers.GPTJConfig(
            vocab_size=100,
            n_embd=32,
            n_layer=2,
            n_head=2,
            rotary_dim=8,
            n_positions=32,
            architectures=["GPTJForCausalLM"],
        ),
        transformers.FalconConfig(
            vocab_size=100,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            parallel_attn=True,
            new_decoder_architecture=False,
            max_position_embeddings=32,
            architectures=["FalconForCausalLM"],
        ),
    ],
    ids=["gptj", "falcon"],
)
def test_parallel_attention_mlp_block_typed_by_computation(tmp_path, config):
    calls = _calls(tmp_path, config)
    types = [c.unit.layer_type for c in calls]
    assert types[0] == "embedding" and "embedding" in _ops(calls[0])
    attention = [c for c in calls if c.unit.layer_type == "attention"]
    mlp = [c for c in calls if c.unit.layer_type == "feed-forward"]
    assert len(attention) == len(mlp) == 2  # one of each per block, both on the block input
    for c in attention:  # scores: a softmax (or the fused attention kernel)
        assert _ops(c) & {
            "_softmax",
            "softmax",
            "_scaled_dot_product_flash_attention_for_cpu",
            "scaled_dot_product_attention",
            "_scaled_dot_product_efficient_attention",
        }
    for c in mlp:  # two projections and an activation, no attention
        assert _ops(c) & {"addmm", "mm"} and _ops(c) & {"gelu", "tanh", "pow", "mul"}
        assert not _ops(c) & {"_softmax", "softmax"}
    # the attention and the MLP of a block read the same normed input (parallel, not chained)
    for block in ("0", "1"):
        a = next(c for c in attention if f".{block}." in c.unit.name)
        m = next(c for c in mlp if f".{block}." in c.unit.name)
        assert a.input_shape == m.input_shape
    assert "projection" not in types
