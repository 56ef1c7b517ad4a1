"""Hugging Face config workloads (issue 15, cases 1-4): checked against the config, right head.

The bad inputs are files under ``tests/fixtures/bad_inputs/configs``.
"""

import json
import os
from pathlib import Path

import pytest
import torch

from scaledl.graph.layer_graph import build_layer_graph
from scaledl.workloads.builders import build_model, make_batch, training_loss
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.hf import read_hf_config
from scaledl.workloads.spec import Workload

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "bad_inputs" / "configs"
SOURCE = "workloads.csv: row 2"
TINY = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}


def hf(config: Path | str, **fields) -> Workload:
    spec = {"family": "hf", "config_path": str(config), "batch_size": 2, **fields}
    return Workload.parse(spec, source=SOURCE)


def refused(config: Path, **fields) -> str:
    with pytest.raises(WorkloadError) as info:
        hf(config, **fields)
    message = str(info.value)
    assert message.startswith(f"{SOURCE}: invalid workload"), message
    assert str(config) in message
    return message


def write(tmp_path: Path, name: str, config: dict) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return path


# ----------------------------------------------------------------- case 1: the position table
@pytest.mark.parametrize(
    ("config", "limit", "named"),
    [
        ("gpt2_n_positions_128.json", 128, "n_positions=128"),
        ("gpt2_n_ctx_64.json", 64, "n_ctx=64"),  # the smaller of n_positions and n_ctx
        ("bert_max_positions_64.json", 64, "max_position_embeddings=64"),
        ("roberta_max_positions_66.json", 64, "less pad_token_id + 1 = 2 reserved by roberta"),
    ],
)
def test_seq_len_beyond_the_position_table_is_refused(config, limit, named):
    path = CONFIGS / config
    message = refused(path, seq_len=limit + 1)
    assert f"field 'seq_len': seq_len={limit + 1} exceeds the position table" in message
    assert f"at most {limit} tokens" in message and named in message
    # Nothing valid is lost: the longest sequence that fits is accepted.
    assert hf(path, seq_len=limit).max_positions == limit


def test_roberta_position_offset_is_what_transformers_runs():
    """The reserved ``pad_token_id + 1`` positions are real: a CPU forward proves the limit."""
    w = hf(CONFIGS / "roberta_max_positions_66.json", seq_len=64, mode="infer")
    model = build_model(w)
    with torch.inference_mode():
        model(input_ids=torch.full((1, 64), 5))
        with pytest.raises((IndexError, RuntimeError), match="out of"):
            model(input_ids=torch.full((1, 65), 5))


def test_issue_case_1_gpt2_512_tokens():
    message = refused(CONFIGS / "gpt2_n_positions_128.json", seq_len=512)
    assert "seq_len=512" in message and "n_positions=128" in message


# ----------------------------------------------------------------- case 2: attention geometry
@pytest.mark.parametrize(
    ("config", "named"),
    [
        ("llama_kv3_heads8.json", "field 'num_key_value_heads': num_key_value_heads=3 must "
         "divide num_attention_heads=8"),
        ("bert_hidden250_heads8.json", "field 'num_attention_heads': num_attention_heads=8 must "
         "divide hidden_size=250"),
        ("vit_image64_patch48.json", "field 'patch_size': patch_size=48 must divide "
         "image_size=64"),
    ],
)  # fmt: skip
def test_invalid_geometry_names_config_and_fields(config, named):
    assert named in refused(CONFIGS / config, seq_len=16)


def test_explicit_head_width_allows_any_hidden_size(tmp_path):
    config = {
        "model_type": "t5",
        "d_model": 250,
        "num_heads": 8,
        "d_kv": 16,  # T5 sets the head width itself: 8 x 16 need not be 250
        "d_ff": 64,
        "num_layers": 1,
        "vocab_size": 100,
        "decoder_start_token_id": 0,
    }
    w = hf(write(tmp_path, "t5", config), seq_len=16)
    assert (w.hidden_size, w.num_heads, w.decoder_seq_len) == (250, 8, 16)
    assert build_layer_graph(w).total_params > 0


def test_config_class_validation_is_named(tmp_path):
    config = {"model_type": "llama", "hidden_size": 250, "num_attention_heads": 8}
    path = write(tmp_path, "llama", {**config, "head_dim": 32, "vocab_size": 100})
    message = refused(path, seq_len=16)
    assert "field 'config_path'" in message and "transformers cannot read it" in message
    assert "hidden size (250) is not a multiple of the number of attention heads (8)" in message


def test_a_build_failure_is_a_workload_error_naming_config_and_fields(tmp_path):
    config = {"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 100}
    path = write(tmp_path, "gpt2", {**config, "activation_function": "no_such_activation"})
    with pytest.raises(WorkloadError) as info:
        build_model(hf(path, seq_len=16), device="meta")
    message = str(info.value)
    assert f"config {path} (gpt2, GPT2Model; hidden_size=32" in message
    assert "cannot build the model: KeyError: 'no_such_activation'" in message


# ----------------------------------------------------------------- case 3: the head it names
TEXT_HEADS = {
    "GPT2LMHeadModel": {"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2},
    "GPT2ForSequenceClassification": {"model_type": "gpt2", "n_embd": 32, "n_layer": 1,
                                      "n_head": 2, "num_labels": 3},
    "BertForMaskedLM": {"model_type": "bert", **TINY, "intermediate_size": 64},
    "BertForSequenceClassification": {"model_type": "bert", **TINY, "intermediate_size": 64},
    "LlamaForCausalLM": {"model_type": "llama", **TINY, "intermediate_size": 64},
    "T5ForConditionalGeneration": {"model_type": "t5", "d_model": 32, "d_kv": 16, "d_ff": 64,
                                   "num_layers": 1, "num_heads": 2, "decoder_start_token_id": 0},
}  # fmt: skip


@pytest.mark.parametrize("architecture", sorted(TEXT_HEADS))
def test_the_named_head_is_built_and_trained_whole(tmp_path, architecture):
    config = {**TEXT_HEADS[architecture], "vocab_size": 100, "architectures": [architecture]}
    config.setdefault("bos_token_id", 0)
    config.setdefault("eos_token_id", 0)
    w = hf(write(tmp_path, architecture, config), seq_len=16)
    model = build_model(w)
    assert type(model).__name__ == architecture
    outputs = model(**make_batch(w))
    assert outputs.loss is not None  # the head's own loss, from the labels of make_batch
    training_loss(outputs).backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []
    assert build_layer_graph(w).layers["layer_type"].iloc[-1] == "head"


def test_no_architectures_builds_the_bare_model(tmp_path):
    config = {"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 100}
    w = hf(write(tmp_path, "gpt2", config), seq_len=16)
    assert read_hf_config(w.config_path).architecture == "GPT2Model"
    assert type(build_model(w, device="meta")).__name__ == "GPT2Model"


def test_an_architecture_it_cannot_build_is_refused_with_the_choices():
    message = refused(CONFIGS / "bert_question_answering.json", seq_len=16)
    assert "field 'architectures': architectures=['BertForQuestionAnswering']" in message
    assert "BertForMaskedLM" in message and "BertModel" in message


def test_hf_llama_causal_lm_costs_what_the_builtin_llama_costs():
    """Issue case 3: the same job as ``family: llama`` and as an HF LlamaForCausalLM config.

    The predictors see a workload through its layer graph (FLOPs, parameters, bytes per layer)
    and its architecture fields, so equal graphs and fields mean equal predictions; the issue
    asks for 0.8-1.25x, the graphs agree exactly.
    """
    job = {"seq_len": 16, "batch_size": 2}
    from_config = hf(CONFIGS / "llama_causal_lm.json", **job)
    builtin = Workload.parse(
        {"family": "llama", "hidden_size": 32, "intermediate_size": 64, "num_layers": 2,
         "num_heads": 2, "num_kv_heads": 1, "vocab_size": 100, **job}
    )  # fmt: skip
    fields = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size")
    assert [getattr(from_config, f) for f in fields] == [getattr(builtin, f) for f in fields]
    a, b = build_layer_graph(from_config), build_layer_graph(builtin)
    for column in ("fwd_flops", "bwd_flops", "params", "output_bytes"):
        ratio = a.nodes[column].sum() / b.nodes[column].sum()
        assert 0.8 <= ratio <= 1.25, (column, ratio)
        assert ratio == 1.0, (column, ratio)
    assert list(a.nodes["layer_type"]) == list(b.nodes["layer_type"])


# ----------------------------------------------------------------- case 4: vision configs
def test_issue_case_4_vit_config_with_image_size():
    w = hf(CONFIGS / "vit_image64_patch16.json", image_size=64)
    assert w.is_vision
    assert (w.hidden_size, w.num_layers, w.num_heads, w.intermediate_size) == (192, 3, 3, 768)
    assert (w.image_size, w.patch_size, w.num_channels, w.seq_len) == (64, 16, 3, 17)
    assert w.vocab_size is None
    batch = make_batch(w)
    assert batch["pixel_values"].shape == (2, 3, 64, 64)
    graph = build_layer_graph(w)
    assert graph.layers["layer_type"].iloc[0] == "patch-embed"
    # image_size may be left to the config: the same workload.
    assert hf(CONFIGS / "vit_image64_patch16.json") == w


def test_vision_image_classification_head(tmp_path):
    config = {
        "model_type": "vit",
        **TINY,
        "intermediate_size": 64,
        "image_size": 32,
        "patch_size": 16,
        "num_labels": 5,
        "architectures": ["ViTForImageClassification"],
    }
    w = hf(write(tmp_path, "vit", config))
    assert (w.num_labels, w.seq_len) == (5, 5)
    model = build_model(w)
    loss = training_loss(model(**make_batch(w)))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"image_size": 224}, "image_size=224 does not match image_size=64"),
        ({"seq_len": 16}, "seq_len=16 does not match image_size=64 and patch_size=16"),
        ({"vocab_size": 100}, "vocab_size=100 is not a field of config"),
    ],
)
def test_vision_fields_must_agree_with_the_config(fields, named):
    assert named in refused(CONFIGS / "vit_image64_patch16.json", **fields)


# ----------------------------------------------------------------- the config defines the model
def test_fields_come_from_the_config_and_must_agree():
    path = CONFIGS / "gpt2_n_positions_128.json"
    w = hf(path, seq_len=16)
    assert (w.hidden_size, w.num_layers, w.num_heads, w.vocab_size) == (32, 1, 2, 100)
    assert (w.intermediate_size, w.max_positions) == (128, 128)  # GPT-2: n_inner = 4 x n_embd
    assert hf(path, seq_len=16, hidden_size=32.0) == w  # a CSV float cell is the same value
    message = refused(path, seq_len=16, hidden_size=64)
    assert "hidden_size=64 does not match hidden_size=32" in message
    assert "image_size=32 is not a field of config" in refused(path, seq_len=16, image_size=32)
    # a boolean is no integer, even where the config's value is 1
    with pytest.raises(WorkloadError, match="field 'num_layers': num_layers=True: expected an"):
        hf(path, seq_len=16, num_layers=True)  # the config's value is 1, which True is not


def test_editing_the_config_changes_the_workload(tmp_path):
    config = {"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 100}
    path = write(tmp_path, "gpt2", config)
    before = hf(path, seq_len=16).workload_id
    path.write_text(json.dumps({**config, "n_layer": 3}) + "\n")
    after = hf(path, seq_len=16)
    assert after.num_layers == 3 and after.workload_id != before


# ----------------------------------------------------------------- issue 28: configs as users give
PHI3 = {"model_type": "phi3", "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 64, "vocab_size": 100,
        "max_position_embeddings": 64, "original_max_position_embeddings": 32,
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}  # fmt: skip
LONGROPE = {"short_factor": [1.0] * 8, "long_factor": [1.0] * 8}


def test_a_rope_field_transformers_rejects_is_named_not_the_model_type(tmp_path):
    # a short factor of 3 for head_dim / 2 = 8: transformers 5.24 refuses it for the missing
    # original_max_position_embeddings, 5.25 (which reads that key from the top level too)
    # for the length; either way the field is named, with transformers' own reason
    rope = {"type": "su", **LONGROPE, "short_factor": [1.0] * 3}
    path = write(tmp_path, "phi3", {**PHI3, "rope_scaling": rope})
    message = refused(path, seq_len=16)
    assert "field 'rope_scaling'" in message and "'type': 'su'" in message
    assert "transformers" in message and "rejects it" in message
    assert "fix or remove 'rope_scaling'" in message
    assert "unknown to transformers" not in message


def test_the_legacy_rope_scaling_case_held_back_runs_when_complete(tmp_path):
    rope = {"type": "su", **LONGROPE, "original_max_position_embeddings": 32}
    w = hf(write(tmp_path, "phi3", {**PHI3, "rope_scaling": rope}), seq_len=16)
    assert build_layer_graph(w).total_params > 0


def test_an_unknown_model_type_is_named_with_a_suggestion(tmp_path):
    message = refused(write(tmp_path, "x", {**TINY, "model_type": "lama"}), seq_len=16)
    assert "field 'model_type'" in message and "did you mean 'llama'" in message


def test_a_field_repeating_what_the_config_means_is_accepted(tmp_path):
    config = {"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 100}
    path = write(tmp_path, "gpt2", config)
    assert hf(path, seq_len=16, num_kv_heads=2) == hf(path, seq_len=16)
    assert "num_kv_heads=1 is not a field" in refused(path, seq_len=16, num_kv_heads=1)


BERT_CONFIG = {"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 1,
               "num_attention_heads": 2, "intermediate_size": 64, "vocab_size": 100,
               "max_position_embeddings": 64}  # fmt: skip


def test_a_config_transformers_cannot_run_is_refused_before_predicting(tmp_path):
    w = hf(write(tmp_path, "bert", {**BERT_CONFIG, "type_vocab_size": 0}), seq_len=16)
    with pytest.raises(WorkloadError) as info:
        build_model(w, device="meta")
    message = str(info.value)
    assert "'embeddings.token_type_embeddings.weight' has shape (0, 32)" in message
    assert "type_vocab_size=0" in message and "chunk_size" not in message


@pytest.mark.parametrize(
    "config",
    [
        {**BERT_CONFIG, "position_embedding_type": "relative_key"},
        # DeBERTa's encoder reads rel_embeddings.weight itself: no layer unit calls it.
        {
            **BERT_CONFIG,
            "model_type": "deberta-v2",
            "relative_attention": True,
            "position_buckets": 16,
        },  # fmt: skip
    ],
)
def test_a_runnable_relative_position_encoder_is_traced(tmp_path, config):
    import transformers

    w = hf(write(tmp_path, config["model_type"], config), seq_len=16)
    graph = build_layer_graph(w)
    model = build_model(w, device="meta")
    assert graph.total_params == sum(p.numel() for p in model.parameters())
    assert isinstance(model, transformers.PreTrainedModel)


def test_a_config_key_given_twice_is_an_error(tmp_path):
    path = tmp_path / "bert.json"
    path.write_text(json.dumps(BERT_CONFIG)[:-1] + ', "hidden_size": 64}')
    assert "key 'hidden_size' given twice" in refused(path, seq_len=16)


def test_a_config_that_is_a_fifo_or_holds_nan_is_refused_naming_it(tmp_path):
    fifo = tmp_path / "fifo_config.json"
    os.mkfifo(fifo)  # an open() would block for ever
    with pytest.raises(WorkloadError, match=r"config_path=.*fifo_config.json.*is a FIFO"):
        read_hf_config(str(fifo))
    nan = tmp_path / "nan_config.json"
    nan.write_text('{"model_type": "bert", "layer_norm_eps": NaN}')
    with pytest.raises(WorkloadError, match=r"field 'layer_norm_eps' \(value NaN\)"):
        read_hf_config(str(nan))


def test_a_missing_relative_config_path_names_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hf = {"family": "hf", "seq_len": 16, "batch_size": 2}
    with pytest.raises(WorkloadError, match="cannot read config") as relative:
        Workload.parse({**hf, "config_path": "gpt2.json"})
    assert f"read from the working directory, {tmp_path}" in str(relative.value)
    with pytest.raises(WorkloadError, match="cannot read config") as absolute:
        Workload.parse({**hf, "config_path": str(tmp_path / "gpt2.json")})
    assert "working directory" not in str(absolute.value)
