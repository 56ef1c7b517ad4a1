import os
from pathlib import Path

import pandas as pd
import pytest

from scaledl.external.neusight import (
    NEUSIGHT_LAYER_TYPES,
    NeusightFormatError,
    load_neusight,
    read_trace,
    workload_id,
)

ROOT = Path(__file__).resolve().parents[2] / "external" / "neusight"
GPUS = {
    "NVIDIA_A100-PCIE-40GB",
    "NVIDIA_A100-SXM4-40GB",
    "NVIDIA_A100_80GB_PCIe",
    "NVIDIA_H100_80GB_HBM3",
    "NVIDIA_L4",
    "Tesla_P100-PCIE-16GB",
    "Tesla_P4",
    "Tesla_T4",
    "Tesla_V100-PCIE-32GB",
}


@pytest.fixture(scope="module")
def data():
    return load_neusight(ROOT)


def test_gpus_models_and_tables(data):
    w = data.workloads
    assert set(data.devices["gpu"]) == GPUS
    # A100-SXM4 has only 4-GPU (dp/tp/pp) labels, no single-GPU trace
    assert set(w["gpu"]) | set(data.parallel["gpu"]) == GPUS
    assert set(w["gpu"]) == GPUS - {"NVIDIA_A100-SXM4-40GB"}
    assert set(w["model"]) == {"bert_large", "gpt2_large", "gpt3_xl", "gpt3_27"}
    assert set(w["mode"]) == {"train", "infer"}
    assert w["workload_id"].is_unique and len(w) == 57
    row = w.iloc[0]
    assert row["workload_id"] == workload_id(
        row["gpu"], row["model"], row["mode"], row["seq_len"], row["batch_size"]
    )
    assert (
        (w[["iteration_ms", "peak_fp32_gflops", "mem_bandwidth_gbps", "hidden_size"]] > 0)
        .all()
        .all()
    )
    assert set(data.parallel["strategy"]) == {"dp", "tp", "pp"}
    assert set(data.layers["layer_type"]) <= set(NEUSIGHT_LAYER_TYPES)
    assert set(data.layers["workload_id"]) == set(w["workload_id"])


def test_gpt2_layers(data):
    w = data.workloads
    wid = w[(w["model"] == "gpt2_large") & (w["mode"] == "train")]["workload_id"].iloc[0]
    lay = data.layers[data.layers["workload_id"] == wid].set_index("layer_name")
    assert list(lay["layer_type"]) == [
        "other",
        "embedding",
        "embedding",
        "norm",
        "attention",
        "norm",
        "feed-forward",
        "norm",
        "head",
    ]
    assert lay.loc["transformer.h.0.attn", "block_repeat"] == 36
    assert lay.loc["lm_head", "block_repeat"] == 1
    h, inter = 1280, 5120
    assert lay.loc["transformer.h.0.attn", "params"] == 4 * h * h + 4 * h
    assert lay.loc["transformer.h.0.mlp", "params"] == 2 * h * inter + inter + h
    assert lay.loc["transformer.h.0.ln_1", "params"] == 2 * h
    tokens = 1024 * int(w.set_index("workload_id").loc[wid, "batch_size"])
    # the MLP's two GEMMs dominate; the GELU adds ~8 elementwise passes
    assert lay.loc["transformer.h.0.mlp", "fwd_flops"] == pytest.approx(
        4 * tokens * h * inter, rel=0.01
    )
    assert lay.loc["lm_head", "bwd_flops"] == 2 * lay.loc["lm_head", "fwd_flops"]
    assert lay.loc["transformer.h.0.attn", "input_bytes"] > 0
    assert (lay["backward_ms"] >= 0).all() and lay["backward_ms"].sum() > 0


def test_per_layer_sums_match_labels(data):
    c = data.consistency
    # measured: total ratio median 1.01, min 0.83, max 1.54 (A100-PCIe-40GB inference traces)
    assert c["total_ratio"].between(0.75, 1.65).all()
    assert 0.95 < c["total_ratio"].median() < 1.05
    train = c[c["mode"] == "train"]
    assert train["backward_ratio"].between(0.8, 1.2).all()
    assert (
        data.layers.loc[
            data.layers["workload_id"].isin(c[c["mode"] == "infer"]["workload_id"]), "backward_ms"
        ]
        == 0
    ).all()


def test_malformed_csv_names_the_file(tmp_path):
    src = ROOT / "label" / "Tesla_P4" / "bert_large-inf-512-8.csv"
    df = pd.read_csv(src)
    df["fw_latency"] = df["fw_latency"].astype(object)
    df.loc[3, "fw_latency"] = "fast"
    bad = tmp_path / "broken.csv"
    df.to_csv(bad, index=False)
    with pytest.raises(NeusightFormatError, match=r"broken\.csv.*fw_latency"):
        read_trace(bad)
    df.drop(columns=["meta"]).to_csv(bad, index=False)
    with pytest.raises(NeusightFormatError, match=r"broken\.csv.*meta"):
        read_trace(bad)


def test_malformed_label_in_tree_names_the_file(tmp_path):
    for sub in ("device_configs", "model_configs"):
        (tmp_path / sub).symlink_to(ROOT / sub)
    gpu = tmp_path / "label" / "Tesla_P4"
    gpu.mkdir(parents=True)
    (gpu / "bert_large-inf-512-8.csv").symlink_to(
        ROOT / "label" / "Tesla_P4" / "bert_large-inf-512-8.csv"
    )
    (gpu / "bert_large-inf-512-8.json").write_text(
        '{"num_layer": 24, "e2e_latency": "x", "fw_latency": 1, "bwall_latency": 0}'
    )
    with pytest.raises(NeusightFormatError, match=r"bert_large-inf-512-8\.json.*e2e_latency"):
        load_neusight(tmp_path)


def _label_tree(root: Path) -> Path:
    """A NeuSight folder of the real configs and one GPU folder (returned) without labels."""
    for sub in ("device_configs", "model_configs"):
        (root / sub).symlink_to(ROOT / sub)
    gpu = root / "label" / "Tesla_P4"
    gpu.mkdir(parents=True)
    (gpu / "bert_large-inf-512-8.csv").symlink_to(
        ROOT / "label" / "Tesla_P4" / "bert_large-inf-512-8.csv"
    )
    return gpu


@pytest.mark.parametrize(
    ("name", "e2e"),
    [
        ("bert_large-inf-512-8.json", "NaN"),
        ("bert_large-inf-512-8.json", "Infinity"),
        ("bert_large-inf-512-8.json", "1" + "0" * 400),  # an integer no float holds
        ("bert_large-train-512-8-dp4.json", "NaN"),
    ],
)
def test_a_non_finite_label_is_refused_naming_file_key_and_value(tmp_path, name, e2e):
    gpu = _label_tree(tmp_path)
    (gpu / name).write_text(
        f'{{"num_layer": 24, "e2e_latency": {e2e}, "fw_latency": 1, "bwall_latency": 0}}'
    )
    shown = e2e[:40]
    with pytest.raises(NeusightFormatError, match=rf"{name}: .*'e2e_latency'.*{shown}"):
        load_neusight(tmp_path)


def test_an_infinite_kernel_time_in_a_trace_names_file_column_and_row(tmp_path):
    df = pd.read_csv(ROOT / "label" / "Tesla_P4" / "bert_large-inf-512-8.csv")
    df["fw_latency"] = df["fw_latency"].astype(object)
    df.loc[4, "fw_latency"] = "inf"
    bad = tmp_path / "trace.csv"
    df.to_csv(bad, index=False)
    with pytest.raises(NeusightFormatError, match=r"trace\.csv: column 'fw_latency', row 5: .*inf"):
        read_trace(bad)


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_label_that_is_a_fifo_or_a_device_is_refused_without_reading(tmp_path, kind):
    label = _label_tree(tmp_path) / "bert_large-inf-512-8.json"
    if kind == "fifo":
        os.mkfifo(label)  # an open() of it would block for ever
    else:
        label.symlink_to("/dev/zero")  # a read() of it would never end
    with pytest.raises(NeusightFormatError, match=r"bert_large-inf-512-8\.json: is a"):
        load_neusight(tmp_path)


def test_a_trace_that_is_a_fifo_is_refused(tmp_path):
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    with pytest.raises(NeusightFormatError, match=r"trace\.csv: is a FIFO"):
        read_trace(fifo)
