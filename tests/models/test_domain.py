import json

import pytest
from tiny_specs import gpt2_config, tiny

from scaledl.models.domain import RANGE_FEATURES, TrainingDomain, range_features
from scaledl.workloads.identity import family_key


def test_domain_of_workloads():
    workloads = [tiny("bert"), tiny("bert", batch_size=4, world_size=2), tiny("vit")]
    domain = TrainingDomain.from_workloads(workloads)
    assert domain.n_workloads == 3
    assert domain.families == ("bert", "vit")
    assert domain.precisions == ("fp32",) and domain.modes == ("train",)
    assert domain.world_sizes == (1, 2) and domain.num_nodes == (1,)
    assert "attention" in domain.layer_types
    assert domain.ranges["batch_size"] == (2.0, 4.0)
    assert set(domain.ranges) == set(RANGE_FEATURES)
    lo, hi = domain.ranges["flops_per_iteration"]
    assert 0 < lo < hi


def test_range_features_scale_with_the_batch():
    small, large = range_features([tiny("bert"), tiny("bert", batch_size=4)]).to_dict("records")
    assert large["tokens_per_step"] == 2 * small["tokens_per_step"] == 4 * 16
    assert large["flops_per_iteration"] == pytest.approx(2 * small["flops_per_iteration"], rel=0.05)
    assert large["parameters"] == small["parameters"] > 0


def test_inference_counts_forward_flops_only():
    train, infer = range_features([tiny("bert"), tiny("bert", mode="infer")]).to_dict("records")
    assert infer["flops_per_iteration"] < 0.5 * train["flops_per_iteration"]


def test_hf_family_key_names_the_model_type(tmp_path):
    w = tiny("hf", gpt2_config(tmp_path))
    assert family_key(w) == "hf:gpt2"
    assert family_key(tiny("t5")) == "t5"


def test_round_trip_and_errors():
    domain = TrainingDomain.from_workloads([tiny("bert"), tiny("t5")])
    data = json.loads(json.dumps(domain.to_dict()))
    assert TrainingDomain.from_dict(data) == domain
    with pytest.raises(ValueError, match="params.json: training domain: field 'modes': missing"):
        TrainingDomain.from_dict({k: v for k, v in data.items() if k != "modes"}, "params.json")
    with pytest.raises(
        ValueError, match="params.json: training domain: field 'ranges.batch_size.1': missing"
    ):
        TrainingDomain.from_dict({**data, "ranges": {"batch_size": [1]}}, "params.json")
    with pytest.raises(ValueError, match="no training workload"):
        TrainingDomain.from_workloads([])
