import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from scaledl.design import (
    PresetError,
    candidate_workloads,
    cost,
    enumerate_candidates,
    generate_design,
    load_preset,
)
from scaledl.design.presets import validate_preset

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

FAMILIES = {"bert", "vit", "t5", "llama", "deit"}


def test_quick_preset_has_enough_cheap_candidates_of_every_family():
    preset = load_preset("quick")
    cands = candidate_workloads(preset, "cpu")
    assert len(cands) >= 60
    assert {(w.family, w.world_size) for w in cands} >= {(f, ws) for f in FAMILIES for ws in (1, 2)}
    assert len({w.workload_id for w in cands}) == len(cands)
    for w in cands:
        assert w.hidden_size <= 256 and w.num_layers <= 4
        assert w.batch_size * w.seq_len <= preset["design"]["max_tokens_per_step"]
        assert cost.flops_per_step(w) <= preset["design"]["max_flops_per_step"]
        steps = preset["design"]["steps_per_epoch"]
        assert w.dataset_size == steps * w.batch_size * w.world_size
        assert w.steps_per_epoch == preset["design"]["steps_per_epoch"]


def test_smoke_preset_is_tiny_and_covers_families_world_sizes_and_infer():
    preset = load_preset("smoke")
    cands = candidate_workloads(preset, "cpu")
    assert {w.family for w in cands} == FAMILIES
    assert {w.world_size for w in cands} == {1, 2}
    assert {w.mode for w in cands} == {"train", "infer"}
    assert max(w.hidden_size for w in cands) <= 64
    result = generate_design(preset, preset["design"]["n_workloads"], n_starts=3)
    assert len(result.table) == 10
    assert np.isfinite(result.metadata["matched_criterion"])
    assert set(result.table["family"]) == set(FAMILIES)  # the GNN's cells are covered first


def test_paper_preset_is_gpu_scale():
    preset = load_preset("paper")
    space = enumerate_candidates(preset, "cuda:H100", "nccl")
    ws = space.workloads
    assert set(space.per_family) == FAMILIES
    assert max(w.world_size for w in ws) == 64
    assert min(w.hidden_size for w in ws if w.family != "deit") >= 512
    assert all(w.backend == "nccl" and w.num_nodes == math.ceil(w.world_size / 8) for w in ws)
    assert all(cost.memory_bytes(w) <= 8e10 for w in ws)
    assert space.rejected["memory_budget_bytes"] > 0  # llama-7B training does not fit DDP


def _preset(**design):
    return validate_preset(
        {
            "name": "tiny",
            "design": {"steps_per_epoch": 3, **design},
            "families": {
                "bert": {
                    "hidden_size": [32, 48, 64],
                    "num_layers": [1, 2],
                    "head_dim": 32,
                    "ffn_ratio": 2,
                    "seq_len": [16, 32, 64],
                    "batch_size": [1, 2, 4],
                    "world_size": [1, 2],
                    "vocab_size": 128,
                },
                "vit": {
                    "hidden_size": [32, 64],
                    "num_layers": [1, 2],
                    "head_dim": 16,
                    "ffn_ratio": 2,
                    "image_size": [16, 32],
                    "patch_size": [8, 16, 12],
                    "batch_size": [1, 2, 4],
                    "world_size": [1, 2],
                },
            },
        },
        source="tiny.yaml",
    )


def test_constraints_reject_candidates_and_samplers_never_choose_them():
    preset = _preset(max_tokens_per_step=64, memory_budget_bytes=3.0e6)
    space = enumerate_candidates(preset, "cpu")
    assert space.rejected["divisibility"] > 0  # head_dim 32 vs hidden 48, patch 12
    assert space.rejected["max_tokens_per_step"] > 0
    assert space.rejected["memory_budget_bytes"] > 0
    ok = {w.workload_id for w in space.workloads}
    for w in space.workloads:
        assert w.hidden_size % w.num_heads == 0
        assert w.family != "vit" or w.image_size % w.patch_size == 0
        assert w.batch_size * w.seq_len <= 64
        assert cost.memory_bytes(w) <= 3.0e6
    for sampler in ("doptimal", "random", "lhs"):
        table = generate_design(preset, 25, sampler=sampler, n_starts=2).table
        assert set(table["workload_id"]) <= ok


def test_family_without_feasible_candidates_is_named():
    preset = _preset(max_tokens_per_step=1)
    with pytest.raises(PresetError, match=r"tiny.yaml: families.bert: no feasible candidate"):
        candidate_workloads(preset, "cpu")


def test_invalid_workload_combinations_are_rejected_not_raised():
    preset = _preset()
    preset["families"]["bert"]["max_positions"] = 32  # seq_len 64 > max_positions
    space = enumerate_candidates(preset, "cpu")
    assert space.rejected["invalid_workload"] > 0
    assert "max_positions" in space.examples["invalid_workload"]
    assert all(w.seq_len <= 32 for w in space.workloads if w.family == "bert")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def test_bad_yaml_names_the_file(tmp_path):
    path = _write(tmp_path, "families: [unclosed\n")
    with pytest.raises(PresetError, match=r"p.yaml: invalid YAML"):
        load_preset(path)


@pytest.mark.parametrize(
    "change, match",
    [
        ({"design": {"n_workload": 3}}, r"field 'design.n_workload' \(value 3\): unknown field"),
        (
            {"design": {"sampler": "sobol"}},
            r"field 'design.sampler' \(value 'sobol'\): Input should be",
        ),
        (
            {"design": {"memory_budget_bytes": "lots"}},
            r"field 'design.memory_budget_bytes' \(value 'lots'\): must be a positive number",
        ),
        (
            {"design": {"n_starts": True}},
            r"field 'design.n_starts' \(value True\): Input should be",
        ),
        ({"design": {"seed": -1}}, r"field 'design.seed' \(value -1\): Input should be greater"),
        (
            {"design": {"max_flops_per_step": 0}},
            r"'design.max_flops_per_step' \(value 0\): must be",
        ),
        ({"design": [1]}, r"field 'design' \(value \[1\]\): Input should be a valid dictionary"),
        ({"families": {"gpt": {"batch_size": 1}}}, r"families.gpt: unknown family 'gpt'"),
        (
            {
                "families": {
                    "bert": {"batch_size": [1], "head_dim": 8, "ffn_ratio": 2, "hidden": [8]}
                }
            },
            r"families.bert: unknown field\(s\) \['hidden'\]",
        ),
        (
            {"families": {"bert": {"batch_size": [1, "x"], "head_dim": 8, "ffn_ratio": 2}}},
            r"families.bert.batch_size: level 'x' is not a positive integer",
        ),
        (
            {"families": {"bert": {"batch_size": [], "head_dim": 8, "ffn_ratio": 2}}},
            r"families.bert.batch_size: an empty list",
        ),
        ({"families": {"bert": {"batch_size": 1, "ffn_ratio": 2}}}, r"'head_dim' or 'num_heads'"),
        ({"families": {}}, r"field 'families' must be a non-empty mapping"),
    ],
)
def test_invalid_fields_are_named(tmp_path, change, match):
    data = {"name": "x", "families": {"bert": {"batch_size": 1, "head_dim": 8, "ffn_ratio": 2}}}
    data.update(change)
    path = _write(tmp_path, yaml.safe_dump(data))
    with pytest.raises(PresetError, match=match) as info:
        load_preset(path)
    assert str(path) in str(info.value)


def test_unknown_preset_name_and_missing_file(tmp_path):
    with pytest.raises(PresetError, match="unknown preset 'nope'.*quick"):
        load_preset("nope")
    with pytest.raises(PresetError, match="missing.yaml: preset file not found"):
        load_preset(tmp_path / "missing.yaml")


def test_exponent_without_sign_is_read_as_number(tmp_path):
    path = _write(
        tmp_path,
        "design: {memory_budget_bytes: 2.0e9}\n"
        "families: {bert: {batch_size: 1, head_dim: 8, ffn_ratio: 2}}\n",
    )
    assert load_preset(path)["design"]["memory_budget_bytes"] == 2.0e9
