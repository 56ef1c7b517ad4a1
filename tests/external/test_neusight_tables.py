import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from scaledl.cli import app
from scaledl.external.neusight import NeusightFormatError
from scaledl.external.neusight_tables import import_neusight
from scaledl.validation import validate_profiles

ROOT = Path(__file__).resolve().parents[2] / "external" / "neusight"
GPU = "NVIDIA_H100_80GB_HBM3"
TRACES = ("bert_large-inf-512-8", "gpt2_large-train-1024-1")
#: The columns the importer reads (the trimmed copies keep only these).
COLUMNS = ["op", "target", "meta", "input_shapes", "output_shape", "dtype", "fw_latency",
           "bw_latency", "Name", "_input_nodes", "users"]  # fmt: skip

pytestmark = pytest.mark.skipif(not (ROOT / "label").is_dir(), reason="no NeuSight data")


def _trimmed_copy(dest: Path) -> Path:
    """Two traces (BERT inference, GPT-2 training) of one GPU, their labels and 4-GPU labels."""
    (dest / "label" / GPU).mkdir(parents=True)
    for sub in ("model_configs", "device_configs"):
        (dest / sub).mkdir()
    for name in TRACES:
        src = ROOT / "label" / GPU / name
        pd.read_csv(src.with_suffix(".csv"))[COLUMNS].to_csv(
            dest / "label" / GPU / f"{name}.csv", index=False
        )
        shutil.copy(src.with_suffix(".json"), dest / "label" / GPU / f"{name}.json")
    for layout in ("dp4", "tp4", "pp4_1"):
        shutil.copy(ROOT / "label" / GPU / f"gpt2_large-train-1024-4-{layout}.json",
                    dest / "label" / GPU)  # fmt: skip
    for model in ("bert_large", "gpt2_large"):
        shutil.copy(ROOT / "model_configs" / f"{model}.json", dest / "model_configs")
    shutil.copy(ROOT / "device_configs" / f"{GPU}.json", dest / "device_configs")
    return dest


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    base = tmp_path_factory.mktemp("neusight")
    summary = import_neusight(_trimmed_copy(base / "src"), base / "out")
    tables = {p.stem: pd.read_parquet(p) for p in (base / "out").glob("*.parquet")}
    return base, summary, tables


def test_standard_tables_with_hf_workloads_on_the_gpu(imported):
    base, summary, t = imported
    assert summary.tables["workloads"] == 2 and len(t["runs"]) == 2
    w = t["workloads"].set_index("config_path")
    assert (w["family"] == "hf").all() and (w["precision"] == "fp32").all()
    assert set(w["device_name"]) == {"cuda:NVIDIA H100 80GB HBM3"}
    assert set(w["mode"]) == {"train", "infer"} and (w["world_size"] == 1).all()
    configs = {Path(p).stem: json.loads(Path(p).read_text()) for p in w.index}
    assert configs["bert_large-infer"]["architectures"] == ["BertForSequenceClassification"]
    assert configs["gpt2_large-train"]["architectures"] == ["GPT2LMHeadModel"]
    assert t["epochs"].empty and t["allreduce_timings"].empty
    runs = t["runs"]
    assert (runs["source"] == "neusight").all() and runs["iteration_cv"].isna().all()
    assert "optimizer step" in summary.manifest["not_carried"][0]


def test_labels_and_units_are_milliseconds(imported):
    _, _, t = imported
    it = t["iteration_timings"].merge(t["workloads"][["workload_id", "mode", "config_path"]])
    label = it[it["phase"] == "label"].set_index("config_path")
    gpt2 = next(p for p in label.index if "gpt2" in p)
    raw = json.loads((ROOT / "label" / GPU / "gpt2_large-train-1024-1.json").read_text())
    assert label.loc[gpt2, "iteration_ms"] == pytest.approx(raw["e2e_latency"])
    assert label.loc[gpt2, "backward_ms"] == pytest.approx(raw["bwall_latency"])
    assert label["optimizer_ms"].isna().all()
    # instrumented pass = kernel nodes of the trace, transformer block x num_layer (36)
    ops = t["operator_timings"].merge(t["workloads"][["workload_id", "config_path"]])
    ops = ops[ops["config_path"] == gpt2]
    block = ops["layer_name"].str.contains(r"\.h\.0\.|^h\.0\.", regex=True)
    repeat = np.where(block, 36, 1)
    instrumented = it[(it["phase"] == "instrumented") & (it["config_path"] == gpt2)].iloc[0]
    assert (ops["forward_ms"] * repeat).sum() == pytest.approx(instrumented["forward_ms"])
    assert (ops["backward_ms"] * repeat).sum() == pytest.approx(instrumented["backward_ms"])
    # the addmm of the attention's QKV projection: 1024 tokens x 1280 -> 3840, H100 ~ 0.3 ms
    qkv = ops[(ops["op_class"] == "matmul") & (ops["n"] == 3840)].iloc[0]
    assert (qkv["m"], qkv["k"]) == (1024, 1280) and 0.05 < qkv["forward_ms"] < 5
    layers = t["layer_timings"]
    assert (layers["forward_ms"] > 0).all() and (layers["backward_ms"] >= 0).all()
    assert {"attention", "feed-forward", "norm", "embedding", "head"} <= set(layers["layer_type"])
    # one traced block stands for all 36 of GPT2-Large: blocks 1..35 copy it, and say so
    gpt2_wid = t["workloads"].set_index("config_path").loc[gpt2, "workload_id"]
    attn = layers[(layers["workload_id"] == gpt2_wid) & (layers["layer_type"] == "attention")]
    assert len(attn) == 36 and attn["replicated"].sum() == 35
    assert (
        attn["forward_ms"].nunique() == 1 and (attn["trace_unit"] == "transformer.h.0.attn").all()
    )


def test_parallel_labels_keep_the_data_parallel_spec(imported):
    _, _, t = imported
    dp = t["parallel_labels"].iloc[0]
    assert (dp["strategy"], dp["degree"], dp["global_batch_size"]) == ("dp", 4, 4)
    spec = json.loads(dp["workload"])
    assert (spec["world_size"], spec["batch_size"], spec["backend"]) == (4, 1, "nccl")


def test_parallel_labels_carry_the_tensor_and_pipeline_layouts(imported):
    _, _, t = imported
    labels = t["parallel_labels"].set_index("strategy")
    tp, pp = (json.loads(labels.loc[k, "workload"]) for k in ("tp", "pp"))
    # The name's batch is the global batch: a TP group and a pipeline run all of it.
    assert (tp["tp_size"], tp["dp_size"], tp["batch_size"], tp["world_size"]) == (4, 1, 4, 4)
    assert (pp["pp_size"], pp["micro_batches"], pp["batch_size"]) == (4, 1, 4)


def test_imported_tables_pass_the_validation(imported):
    base, _, _ = imported
    report = validate_profiles(base / "out", base / "val", base / "q", base / "rep")
    counts = report.to_dict()["tables"]
    assert report.quarantined_rows == 0
    assert counts["operator_timings"]["passed"] == len(
        pd.read_parquet(base / "out" / "operator_timings.parquet")
    )
    assert counts["runs"]["passed"] == 2


def test_malformed_trace_names_file_column_and_row(tmp_path):
    src = _trimmed_copy(tmp_path / "src")
    csv = src / "label" / GPU / f"{TRACES[1]}.csv"
    frame = pd.read_csv(csv)
    frame["fw_latency"] = frame["fw_latency"].astype(object)
    frame.loc[4, "fw_latency"] = "abc"
    frame.to_csv(csv, index=False)
    with pytest.raises(NeusightFormatError, match=rf"{TRACES[1]}\.csv: column 'fw_latency', row 5"):
        import_neusight(src, tmp_path / "out")
    result = CliRunner().invoke(app, ["import", "neusight", str(src), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "row 5" in result.output


def test_a_label_without_its_trace_is_reported_not_dropped(tmp_path):
    src = _trimmed_copy(tmp_path / "src")
    (src / "label" / GPU / f"{TRACES[0]}.csv").unlink()
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["import", "neusight", str(src), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "1 label(s) not imported" in result.output
    assert f"1: no trace (its .csv is missing): {TRACES[0]}.json" in result.output
    manifest = json.loads((out / "import.json").read_text())
    assert manifest["skipped_labels"]["count"] == 1


@pytest.mark.parametrize("name", [f"{TRACES[1]}.json", f"{TRACES[1]}.csv"])
def test_a_file_that_is_not_utf8_is_named(tmp_path, name):
    src = _trimmed_copy(tmp_path / "src")
    path = src / "label" / GPU / name
    path.write_bytes(b"\xff\xfe" + path.read_bytes()[:200].replace(b"e", b"\xe9"))
    result = CliRunner().invoke(app, ["import", "neusight", str(src), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert name in result.output.replace("\n", "") and "utf-8" in result.output
