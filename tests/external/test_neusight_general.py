"""The NeuSight importer on model types beyond the shipped four, from synthetic trace folders.

Each trace is written in NeuSight's CSV format by running a tiny Hugging Face model (built from
its config by the product) with forward hooks on its leaf modules: one ``call_module`` row per
leaf call of the first transformer block of each stack and of the modules outside the blocks
(NeuSight traces block 0 only), with its module stack, shapes, dtype and synthetic latencies.
"""

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from scaledl.external.neusight import NeusightFormatError
from scaledl.external.neusight_tables import import_neusight
from scaledl.validation import validate_profiles
from scaledl.workloads.builders import build_model, make_batch
from scaledl.workloads.spec import Workload

REPO = Path(__file__).resolve().parents[2]
GPU_DIR = "NVIDIA_H100_80GB_HBM3"
OTHER_GPU = {"Device": "NVIDIA A10", "Dev_Mem": 24, "Mem_Bw": 600, "Num_Sm": 72,
             "Core_Per_SM": 128, "Freq": 1695, "SingleFLOPs": 31240, "L2Cache": 6}  # fmt: skip
OPT = {"model_type": "opt", "hidden_size": 32, "num_hidden_layers": 2, "ffn_dim": 64,
       "num_attention_heads": 2, "vocab_size": 64, "max_position_embeddings": 64,
       "word_embed_proj_dim": 32, "pad_token_id": 1}  # fmt: skip
BART = {"model_type": "bart", "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
        "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64, "vocab_size": 64, "max_position_embeddings": 64,
        "pad_token_id": 1}  # fmt: skip
_INDEX = re.compile(r"\.(\d+)(?:\.|$)")


def _stack(model: torch.nn.Module, name: str) -> str:
    """NeuSight's ``meta`` cell: the module stack down to ``name`` (containers left out)."""
    modules = dict(model.named_modules())
    parts, entries = name.split("."), []
    for i in range(1, len(parts) + 1):
        path = ".".join(parts[:i])
        module = modules[path]
        if isinstance(module, torch.nn.ModuleList | torch.nn.ModuleDict):
            continue
        cls = type(module)
        entries.append(f"('{path}', <class '{cls.__module__}.{cls.__qualname__}'>)")
    return "{'nn_module_stack': OrderedDict([" + ", ".join(entries) + "])}"


def write_trace(config_path: Path, mode: str, seq_len: int, batch: int, out: Path) -> float:
    """Write ``out`` (.csv trace) and its ``.json`` label; return the label's e2e ms."""
    w = Workload.parse({"family": "hf", "config_path": str(config_path), "seq_len": seq_len,
                        "batch_size": batch, "mode": mode})  # fmt: skip
    model = build_model(w)
    calls = []

    def hook(name):
        def record(module, args, output):
            shapes = [list(a.shape) for a in args if isinstance(a, torch.Tensor)]
            tensor = output[0] if isinstance(output, tuple) else output
            calls.append((name, shapes, tuple(tensor.shape), str(tensor.dtype)))

        return record

    for name, module in model.named_modules():
        first = _INDEX.search(name)
        if list(module.children()) or not name or (first and int(first.group(1)) > 0):
            continue  # containers, and blocks after the first (NeuSight traces block 0)
        module.register_forward_hook(hook(name))
    with torch.no_grad():
        model(**make_batch(w, generator=torch.Generator().manual_seed(0)))
    train = mode == "train"
    rows = [
        {
            "op": "placeholder",
            "target": "input_ids",
            "meta": "{}",
            "input_shapes": "[]",
            "output_shape": str((batch, seq_len)),
            "dtype": "torch.int64",
            "fw_latency": 0.0,
            "bw_latency": 0.0,
            "Name": "input_ids",
            "_input_nodes": "{}",
            "users": "{}",
        }
    ]
    for i, (name, shapes, shape, dtype) in enumerate(calls):
        fw = 0.005 + 1e-5 * float(torch.tensor(shape).prod())
        rows.append({"op": "call_module", "target": name, "meta": _stack(model, name),
                     "input_shapes": str(shapes), "output_shape": str(shape), "dtype": dtype,
                     "fw_latency": fw, "bw_latency": 2 * fw if train else 0.0,
                     "Name": f"n{i}", "_input_nodes": f"{{{rows[-1]['Name']}: None}}",
                     "users": f"{{n{i + 1}: None}}"})  # fmt: skip
    pd.DataFrame(rows).to_csv(out.with_suffix(".csv"), index=False)
    fw_ms = sum(r["fw_latency"] for r in rows) * 2  # two blocks per stack: about twice
    bw_ms = 2 * fw_ms if train else 0.0
    label = {"num_layer": 2, "e2e_latency": fw_ms + bw_ms, "fw_latency": fw_ms,
             "bwall_latency": bw_ms}  # fmt: skip
    out.with_suffix(".json").write_text(json.dumps(label))
    return label["e2e_latency"]


@pytest.fixture
def folder(tmp_path):
    """A NeuSight-format folder: OPT and BART traces on the H100 and on a GPU NeuSight lacks."""
    root = tmp_path / "traces"
    (root / "device_configs").mkdir(parents=True)
    (root / "model_configs").mkdir()
    shutil.copy(REPO / "external/neusight/device_configs" / f"{GPU_DIR}.json",
                root / "device_configs")  # fmt: skip
    (root / "device_configs" / "NVIDIA_A10.json").write_text(json.dumps(OTHER_GPU))
    for name, config in (("opt_tiny", OPT), ("bart_tiny", BART)):
        (root / "model_configs" / f"{name}.json").write_text(json.dumps(config))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for gpu in (GPU_DIR, "NVIDIA_A10"):
        (root / "label" / gpu).mkdir(parents=True)
        for name, config, lm in (
            ("opt_tiny", OPT, "OPTForCausalLM"),
            ("bart_tiny", BART, "BartForConditionalGeneration"),
        ):
            cfg = scratch / f"{name}.json"
            cfg.write_text(json.dumps({**config, "architectures": [lm]}))
            for mode, tag in (("train", "train"), ("infer", "inf")):
                write_trace(cfg, mode, 16, 2, root / "label" / gpu / f"{name}-{tag}-16-2")
    # a label without its trace: skipped with its reason, not an error
    (root / "label" / GPU_DIR / "opt_tiny-inf-16-4.json").write_text(
        json.dumps({"num_layer": 2, "e2e_latency": 1.0, "fw_latency": 1.0, "bwall_latency": 0.0})
    )
    return root


def test_opt_and_encoder_decoder_traces_import_and_validate(folder, tmp_path):
    out = tmp_path / "imported"
    summary = import_neusight(folder, out)
    manifest = summary.manifest
    assert manifest["workloads"] == 8  # 2 models x 2 modes x 2 GPUs
    assert set(manifest["gpus"]) == {GPU_DIR, "NVIDIA_A10"}
    assert manifest["config_architectures"] == {
        "bart_tiny-infer": "BartForConditionalGeneration",
        "bart_tiny-train": "BartForConditionalGeneration",
        "opt_tiny-infer": "OPTForCausalLM",
        "opt_tiny-train": "OPTForCausalLM",
    }
    assert manifest["skipped_labels"]["count"] == 1
    workloads = pd.read_parquet(out / "workloads.parquet")
    assert set(workloads["device_name"]) == {"cuda:NVIDIA H100 80GB HBM3", "cuda:NVIDIA A10"}
    bart = workloads[workloads["config_path"].str.contains("bart_tiny")]
    assert (bart["decoder_num_layers"] == 2).all() and (bart["decoder_seq_len"] == 16).all()
    layers = pd.read_parquet(out / "layer_timings.parquet")
    names = set(layers["layer_name"])
    # both stacks' blocks 1 copy block 0 (replicated), the cross-attention included
    assert {"model.encoder.layers.1.self_attn", "model.decoder.layers.1.encoder_attn",
            "model.decoder.layers.1.self_attn"} <= names  # fmt: skip
    replicated = layers[layers["layer_name"].str.contains(r"layers\.1\.")]
    assert replicated["replicated"].all()
    ops = pd.read_parquet(out / "operator_timings.parquet")
    assert {"matmul", "embedding", "reduction"} <= set(ops["op_class"])
    report = validate_profiles(out, tmp_path / "validated", tmp_path / "quarantine",
                               tmp_path / "report")  # fmt: skip
    assert report.quarantined_rows == 0


def test_an_unmappable_config_names_file_field_and_value(folder, tmp_path):
    config = folder / "model_configs" / "opt_tiny.json"
    config.write_text(json.dumps({**OPT, "model_type": "not_a_model"}))
    with pytest.raises(NeusightFormatError, match=r"opt_tiny.json: model_type='not_a_model'"):
        import_neusight(folder, tmp_path / "out")
    # a model type transformers knows but with no language-model head and no architectures
    config.write_text(json.dumps({"model_type": "clip_text_model", "hidden_size": 32,
                                  "num_hidden_layers": 2, "num_attention_heads": 2,
                                  "intermediate_size": 64, "vocab_size": 64}))  # fmt: skip
    with pytest.raises(NeusightFormatError, match=r"opt_tiny.json: field 'architectures'"):
        import_neusight(folder, tmp_path / "out")
