import json

import pytest
import torch
from tiny_specs import FAMILIES, gpt2_config, tiny

from scaledl.workloads.builders import build_model, hf_config, make_batch, training_loss
from scaledl.workloads.fields import WorkloadError


@pytest.fixture
def gpt2_path(tmp_path):
    return gpt2_config(tmp_path)


@pytest.mark.parametrize("family", [*FAMILIES, "hf"])
def test_training_step_touches_every_parameter(family, gpt2_path):
    torch.manual_seed(0)
    w = tiny(family, gpt2_path)
    model = build_model(w)
    assert model.training
    assert all(p.device.type == "cpu" and p.dtype == torch.float32 for p in model.parameters())
    loss = training_loss(model(**make_batch(w)))
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, f"{family}: parameters without gradient: {missing}"
    # A real optimizer step works on the result (what the profiler does next).
    torch.optim.AdamW(model.parameters(), lr=1e-3).step()


@pytest.mark.parametrize("family", [*FAMILIES, "hf"])
def test_inference_model_is_eval_and_runs(family, gpt2_path):
    w = tiny(family, gpt2_path, mode="infer")
    model = build_model(w)
    assert not model.training
    with torch.inference_mode():
        out = model(**make_batch(w))
    assert out is not None


@pytest.mark.parametrize("family", [*FAMILIES, "hf"])
def test_batch_shapes(family, gpt2_path):
    w = tiny(family, gpt2_path)
    batch = make_batch(w)
    if w.is_vision:
        assert batch["pixel_values"].shape == (2, 3, 32, 32)
        assert ("labels" in batch) == (family == "vit")
    else:
        assert batch["input_ids"].shape == (2, 16)
        assert batch["input_ids"].dtype == torch.int64
        assert int(batch["input_ids"].max()) < 100
    if family == "t5":
        assert batch["labels"].shape == (2, 8)


def test_batch_is_reproducible_with_a_generator():
    w = tiny("bert")
    a = make_batch(w, generator=torch.Generator().manual_seed(3))
    b = make_batch(w, generator=torch.Generator().manual_seed(3))
    c = make_batch(w, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a["input_ids"], b["input_ids"])
    assert not torch.equal(a["input_ids"], c["input_ids"])


def test_meta_device_allocates_nothing():
    model = build_model(tiny("bert"), device="meta")
    assert all(p.is_meta for p in model.parameters())


@pytest.mark.parametrize(
    ("precision", "dtype"), [("bf16", torch.bfloat16), ("fp16", torch.float16)]
)
def test_precision_sets_parameter_dtype(precision, dtype):
    model = build_model(tiny("bert", precision=precision), device="meta")
    assert {p.dtype for p in model.parameters()} == {dtype}


def test_config_follows_spec():
    cfg = hf_config(tiny("llama"))
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads) == (32, 2, 1)
    cfg = hf_config(tiny("t5", decoder_num_layers=2))
    assert (cfg.d_model, cfg.d_kv, cfg.num_layers, cfg.num_decoder_layers) == (32, 16, 1, 2)


def test_hf_config_reads_the_json(gpt2_path):
    cfg = hf_config(tiny("hf", gpt2_path))
    assert cfg.model_type == "gpt2"
    assert (cfg.n_embd, cfg.n_layer, cfg.vocab_size) == (32, 1, 100)


def test_missing_hf_config_names_config_path(tmp_path):
    missing = tmp_path / "nowhere.json"
    with pytest.raises(WorkloadError) as info:
        tiny("hf", missing)  # the spec reads the config when parsed
    assert "field 'config_path'" in str(info.value)
    assert str(missing) in str(info.value)


def test_invalid_json_names_config_path(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(WorkloadError, match="config_path"):
        hf_config(tiny("hf", path))


def test_unknown_model_type_names_it(tmp_path):
    path = tmp_path / "unknown.json"
    path.write_text(json.dumps({"model_type": "no_such_model"}))
    with pytest.raises(WorkloadError) as info:
        build_model(tiny("hf", path))
    assert "model_type" in str(info.value) and "no_such_model" in str(info.value)


def test_training_loss_without_model_loss():
    out = {
        "last_hidden_state": torch.ones(2, 3),
        "ids": torch.zeros(2, dtype=torch.int64),
        "pair": (torch.full((2,), 2.0), torch.full((1,), 4.0)),
    }
    assert float(training_loss(out)) == pytest.approx(1.0 + 2.0 + 4.0)
    with pytest.raises(ValueError, match="floating"):
        training_loss({"ids": torch.zeros(2, dtype=torch.int64)})
