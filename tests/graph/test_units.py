import pytest
import torch
from tiny_specs import SPECS, gpt2_config, tiny_spec
from torch import nn

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
