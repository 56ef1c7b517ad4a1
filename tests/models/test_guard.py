import pandas as pd
import pytest
from tiny_specs import gpt2_config, tiny, tiny_spec

from scaledl.models.domain import TrainingDomain
from scaledl.models.guard import (
    OutOfDomainError,
    check_domain,
    guard_columns,
    interval_basis,
    raise_if_outside,
)
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.spec import Workload

TRAINING = [tiny("bert"), tiny("bert", batch_size=4, world_size=2), tiny("vit")]


@pytest.fixture(scope="module")
def domain():
    return TrainingDomain.from_workloads(TRAINING, layer_types=["attention", "feed-forward"])


def reasons_of(workload, domain, nodes=None):
    return check_domain([workload], domain, nodes)[0]


def fields(reasons):
    return [r.field for r in reasons]


def test_training_workloads_are_in_domain(domain):
    assert check_domain(TRAINING, domain) == [[], [], []]


@pytest.mark.parametrize(
    ("changes", "field", "stratum"),
    [
        ({"precision": "bf16"}, "precision", None),
        ({"mode": "infer"}, "mode", None),
        ({"world_size": 2, "num_nodes": 2}, "num_nodes", None),
        ({"world_size": 4}, "world_size", None),
        ({"batch_size": 3}, None, None),  # inside the batch range [2, 4]: in domain
        ({"batch_size": 16}, "batch_size", "beyond_range"),
        ({"num_layers": 3}, "num_layers", "beyond_range"),
    ],
)
def test_each_reason(domain, changes, field, stratum):
    reasons = reasons_of(tiny("bert", **changes), domain)
    if field is None:
        assert reasons == []
        return
    assert field in fields(reasons)
    reason = reasons[fields(reasons).index(field)]
    assert reason.stratum == stratum
    assert str(changes[field]) in reason.text()


def test_world_size_beyond_every_trained_one_also_leaves_the_ranges(domain):
    reasons = reasons_of(tiny("bert", world_size=8, num_nodes=2), domain)
    assert {"world_size", "num_nodes"} <= set(fields(reasons))
    assert "never trained on (trained on [1])" in reasons[fields(reasons).index("num_nodes")].reason
    assert interval_basis(reasons) == "widest"


def test_unseen_family_and_hf_model_type(domain, tmp_path):
    reasons = reasons_of(tiny("t5"), domain)
    assert fields(reasons)[0] == "family" and reasons[0].stratum == "unseen_family"
    assert interval_basis([reasons[0]]) == "unseen_family"
    hf = reasons_of(tiny("hf", gpt2_config(tmp_path)), domain)
    assert hf[0].value == "hf:gpt2"


def test_layer_types_of_the_generic_model(domain):
    w = tiny("bert")
    nodes = pd.DataFrame(
        {
            "workload_id": [w.workload_id] * 3,
            "layer_type": ["attention", "pooler", "norm"],
            "used_generic": [False, True, True],
        }
    )
    reasons = reasons_of(w, domain, nodes)
    assert fields(reasons) == ["layer_type"]
    assert reasons[0].value == "norm,pooler"
    assert "never measured in training: ['norm', 'pooler']" in reasons[0].reason


def test_no_domain_recorded_flags_everything():
    reasons = check_domain([tiny("bert")], None)[0]
    assert fields(reasons) == ["training_domain"] and interval_basis(reasons) == "widest"


def test_columns_and_strict_error(domain):
    workloads = [tiny("bert"), tiny("bert", precision="bf16"), tiny("bert", num_layers=3)]
    reasons = check_domain(workloads, domain)
    cols = guard_columns(reasons)
    assert cols["in_domain"].tolist() == [True, False, False]
    assert cols["interval_basis"].tolist() == ["in_domain", "widest", "beyond_range"]
    assert cols["extrapolation"][1].startswith("precision=bf16: precision never trained on")
    with pytest.raises(OutOfDomainError) as info:
        raise_if_outside(reasons, "w.csv")
    message = str(info.value)
    assert message.startswith("w.csv: row 2: outside the predictor's training domain (strict)")
    assert "field 'precision' (value bf16)" in message and "1 more row(s)" in message
    assert isinstance(info.value, WorkloadError)
    raise_if_outside(reasons[:1], "w.csv")  # in domain: no error


#: HF configs of the five built-in families' model types, tiny (issue 28).
HF_OF_FAMILY = {
    "bert": {"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 32,
             "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
             "vocab_size": 100, "max_position_embeddings": 64},
    "llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32,
              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
              "intermediate_size": 64, "vocab_size": 100, "max_position_embeddings": 64},
    "t5": {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "d_model": 32,
           "num_layers": 1, "num_heads": 2, "d_kv": 16, "d_ff": 64, "vocab_size": 100,
           "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1},
    "vit": {"model_type": "vit", "architectures": ["ViTForImageClassification"],
            "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 64, "image_size": 32, "patch_size": 16, "num_labels": 10},
    "deit": {"model_type": "deit", "architectures": ["DeiTForImageClassification"],
             "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
             "intermediate_size": 64, "image_size": 32, "patch_size": 16, "num_labels": 10},
}  # fmt: skip


@pytest.mark.parametrize("family", sorted(HF_OF_FAMILY))
def test_an_hf_config_of_a_trained_family_is_in_its_domain(tmp_path, family):
    import json

    domain = TrainingDomain.from_workloads(
        [tiny(f) for f in HF_OF_FAMILY], layer_types=["attention", "feed-forward"]
    )
    path = tmp_path / f"{family}.json"
    path.write_text(json.dumps(HF_OF_FAMILY[family]))
    spec = tiny_spec("hf", path)
    if family in ("vit", "deit"):
        del spec["seq_len"]  # derived from the image and patch sizes
    workload = Workload.parse(spec)
    reasons = reasons_of(workload, domain)
    assert "family" not in fields(reasons), reasons
    other = TrainingDomain.from_workloads([tiny("bert" if family != "bert" else "vit")])
    assert reasons_of(workload, other)[0].value == family


def test_layer_times_clamped_into_the_roofline_band(domain):
    w = tiny("bert")
    notes = [f"layer{i} forward 900 ms -> 9 ms (above 34 x roofline+overhead)" for i in range(5)]
    nodes = pd.DataFrame(
        {
            "workload_id": [w.workload_id] * 6,
            "layer_type": ["attention"] * 6,
            "used_generic": [False] * 6,
            "bounded": ["", "", *notes[:3], "; ".join(notes[3:])],
        }
    )
    reasons = reasons_of(w, domain, nodes)
    assert fields(reasons) == ["layer_time"]
    assert reasons[0].value == "5 layer pass(es)" and reasons[0].stratum is None
    assert reasons[0].reason.startswith("clamped into the roofline band: layer0 forward 900 ms")
    assert reasons[0].reason.endswith("; and 2 more")
    assert interval_basis(reasons) == "widest"
    assert reasons_of(w, domain, nodes.assign(bounded="")) == []
    # per-node predictions (predict --detail): the note is the pass, the node names the layer
    named = nodes.iloc[[0, 2]].assign(
        layer_name=["x", "encoder.proj"], bounded=["", "backward 5505 ms -> 87.2 ms (above)"]
    )
    (reason,) = reasons_of(w, domain, named)
    assert reason.reason == (
        "clamped into the roofline band: encoder.proj backward 5505 ms -> 87.2 ms (above)"
    )
