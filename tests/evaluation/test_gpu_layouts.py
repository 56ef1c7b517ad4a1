"""NeuSight's 4-GPU rows composed from the GPU predictor: tiny synthetic models, real Vidur data."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from gpu_synthetic import TINY_GRID, write_synthetic

from scaledl.devices.specs import device_spec
from scaledl.evaluation.gpu import GpuEvaluationConfig, fit_scaledl
from scaledl.evaluation.gpu_layouts import (
    OPTIMIZER_BYTES_PER_PARAM,
    evaluate_layout_rows,
    layout_summary,
    layout_targets,
    layout_workload,
    megatron_inputs,
    predict_layout_row,
    rank_layers,
    shard_megatron,
)
from scaledl.external.neusight import NeusightFormatError
from scaledl.external.neusight_peer import load_peer_layout_predictions
from scaledl.external.vidur import load_vidur_allreduce
from scaledl.parallel.measured_collectives import MeasuredCollectives, fit_system_allreduce
from scaledl.parallel.shard import base_workload
from scaledl.workloads.spec import Workload

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

REPO = Path(__file__).resolve().parents[2]
GPU = "NVIDIA H100 80GB HBM3"
CONFIG = GpuEvaluationConfig(operator_params={"grid": TINY_GRID, "min_rows": 5})


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    directory, data = write_synthetic(tmp_path_factory.mktemp("gpu_layouts"))
    return data, fit_scaledl(data, CONFIG)


@pytest.fixture(scope="module")
def collectives():
    vidur = load_vidur_allreduce(REPO / "external" / "vidur" / "network")
    return MeasuredCollectives(fit_system_allreduce(vidur, "h100_dgx"), "h100_dgx")


def _layout(data, **layout) -> Workload:
    """The two-block synthetic model (tiny_b) on the H100, training, batch 4, as a layout."""
    w = next(w for w in data.workloads.values()
             if "tiny_b" in w.config_path and w.mode == "train"
             and w.device_name.endswith(GPU) and w.batch_size == 4)  # fmt: skip
    return w.model_copy(update={"world_size": 2, "dp_size": 1, **layout})


def test_a_one_rank_layout_is_the_single_gpu_prediction(fitted, collectives):
    data, method = fitted
    w = _layout(data, world_size=1)
    layers = rank_layers(method, w)
    single = method.predict_iteration_ms([base_workload(w, w.batch_size)])[0]
    assert (layers["forward_ms"] + layers["backward_ms"]).sum() == pytest.approx(single)
    row = predict_layout_row(method, w, collectives)
    assert row["compute_ms"] == pytest.approx(single)
    assert row["tp_allreduce_ms"] == row["p2p_ms"] == row["exposed_sync_ms"] == 0.0
    # the optimizer step: 32 bytes per parameter at the device's peak memory bandwidth
    params = layers["params"].sum()
    bandwidth_bytes_per_ms = device_spec(w.device_name).mem_bandwidth_gbps * 1e6
    adam = OPTIMIZER_BYTES_PER_PARAM * params / bandwidth_bytes_per_ms
    assert row["step_ms"] == pytest.approx(adam)
    assert row["scaledl_ms"] == pytest.approx(single + adam)


def test_tensor_parallel_splits_the_units_and_adds_two_all_reduces_per_block(fitted, collectives):
    data, method = fitted
    w = _layout(data, tp_size=2)
    layers = rank_layers(method, w)
    _, parts = megatron_inputs(layers, w, collectives)
    activation = w.batch_size * w.seq_len * w.hidden_size * 4
    # 2 blocks x (attention + feed-forward) + the vocabulary-parallel embedding, fwd and bwd
    per = float(collectives.predict_ms("all_reduce", activation, 2))
    assert parts["tp_allreduce_ms"] == pytest.approx(2 * 5 * per)
    full = rank_layers(method, w.model_copy(update={"tp_size": 1, "world_size": 1}))
    assert parts["compute_ms"] < (full["forward_ms"] + full["backward_ms"]).sum()
    assert layers["params"].sum() < full["params"].sum()


def test_shard_megatron_splits_the_head_and_the_embedding_parameters():
    layers = pd.DataFrame(
        {"layer_type": ["embedding", "attention", "feed-forward", "norm", "head"],
         "params": [8.0, 4.0, 4.0, 2.0, 0.0], "fwd_flops": [0.0, 8.0, 8.0, 1.0, 8.0],
         "kernel_fwd_ms": [1.0, 2.0, 2.0, 1.0, 2.0]}
    )  # fmt: skip
    out = shard_megatron(layers, 2)
    assert out["params"].tolist() == [4.0, 2.0, 2.0, 2.0, 0.0]
    assert out["kernel_fwd_ms"].tolist() == [1.0, 1.0, 1.0, 1.0, 1.0]  # the lookup is not split
    assert shard_megatron(layers, 1).equals(layers)


def test_pipeline_runs_the_stages_in_turn_with_sends_and_the_tied_embedding_sync(
    fitted, collectives
):
    data, method = fitted
    w = _layout(data, pp_size=2, micro_batches=1)
    row = predict_layout_row(method, w, collectives)
    single = method.predict_iteration_ms([base_workload(w, w.batch_size)])[0]
    activation = w.batch_size * w.seq_len * w.hidden_size * 4
    assert row["compute_ms"] == pytest.approx(single)
    assert row["p2p_ms"] == pytest.approx(2 * collectives.predict_ms("all_reduce", activation, 2))
    assert row["embedding_sync_ms"] > 0
    assert row["scaledl_ms"] == pytest.approx(
        row["compute_ms"] + row["p2p_ms"] + row["step_ms"], rel=1e-9
    )


def test_data_parallel_overlaps_the_gradient_buckets_with_the_backward(fitted, collectives):
    data, method = fitted
    w = _layout(data, dp_size=2, batch_size=2)
    row = predict_layout_row(method, w, collectives)
    assert row["exposed_sync_ms"] >= 0 and row["tp_allreduce_ms"] == 0
    assert row["scaledl_ms"] == pytest.approx(
        row["compute_ms"] + row["exposed_sync_ms"] + row["step_ms"]
    )


def _labels(data) -> pd.DataFrame:
    rows = []
    for suffix, layout in (("dp2", {"dp_size": 2, "batch_size": 2}), ("tp2", {"tp_size": 2}),
                           ("pp2_1", {"pp_size": 2})):  # fmt: skip
        w = _layout(data, **layout)
        rows.append({"file": f"/x/label/G/tiny_b-train-32-4-{suffix}.json", "strategy": suffix[:2],
                     "device_name": w.device_name, "model": "tiny_b", "global_batch_size": 4,
                     "iteration_ms": 1.0, "workload": json.dumps(w.to_record())})  # fmt: skip
    return pd.DataFrame(rows)


def test_rows_are_paired_with_the_peer_and_summarised_per_layout(fitted):
    data, method = fitted
    labels = _labels(data)
    peer = pd.DataFrame(
        {"gpu": GPU, "stem": ["tiny_b-train-32-4-dp2", "tiny_b-train-32-4-tp2"],
         "peer_ms": [1.1, 0.8], "file": "p"}
    )  # fmt: skip
    vidur = load_vidur_allreduce(REPO / "external" / "vidur" / "network")
    result = evaluate_layout_rows(method, labels, vidur, peer)
    rows = {r["layout"]: r for r in result["rows"]}
    assert set(rows) == {"dp2", "tp2", "pp2_1"}
    assert rows["dp2"]["neusight_re"] == pytest.approx(0.1)
    assert rows["pp2_1"]["neusight_re"] is None
    assert result["unmatched"] == [f"{GPU} tiny_b-train-32-4-pp2_1"]
    overall = result["summary"]["overall"]
    assert overall["n"] == 2  # only the rows both predicted
    assert overall["mre_neusight"] == pytest.approx(0.15)
    assert overall["paired"]["n_units"] == 2
    assert "skipped" in result["summary"]["per_layout"]["dp2"]["paired"]
    assert result["targets"][0]["reached"] == (overall["mre_scaledl"] <= 0.15)
    assert set(result["collectives"]) == {"h100_dgx"}


def test_targets_say_when_no_row_is_paired():
    rows = [{"layout": "tp4", "scaledl_re": 0.1, "neusight_re": None}]
    targets = layout_targets(layout_summary(rows))
    assert targets[0]["reached"] is None and targets[0]["measured"] == "no paired row"


def test_a_label_without_a_workload_names_the_file_and_field():
    label = SimpleNamespace(file="/x/gpt3_xl-train-2048-4-tp4.json", workload=None)
    with pytest.raises(ValueError, match=r"gpt3_xl-train-2048-4-tp4\.json: field 'workload'"):
        layout_workload(label)
    label.workload = "{not json"
    with pytest.raises(ValueError, match=r"tp4\.json: field 'workload' is not a workload spec"):
        layout_workload(label)


def test_the_peer_layout_predictions_are_neusights_eleven_files():
    peer = load_peer_layout_predictions(
        REPO / "external" / "neusight_peer", REPO / "external" / "neusight"
    )
    labels = sorted((REPO / "external" / "neusight" / "label").glob("*/*-*-*-*-[dtp]p4*.json"))
    assert len(peer) == len(labels) == 11
    assert set(peer["stem"]) == {p.stem for p in labels}
    tp = peer[peer["stem"] == "gpt3_xl-train-2048-4-tp4"]
    assert tp["peer_ms"].iloc[0] == pytest.approx(1047.573299674327)


def test_a_malformed_peer_layout_file_names_the_file_and_key(tmp_path):
    neusight = REPO / "external" / "neusight"
    folder = tmp_path / "prediction" / "NVIDIA_H100_80GB_HBM3"
    folder.mkdir(parents=True)
    (folder / "gpt2_large-train-1024-4-tp4.json").write_text(json.dumps({"fw_latency": 1.0}))
    with pytest.raises(NeusightFormatError, match=r"tp4\.json: key 'e2e_latency' \(value None\)"):
        load_peer_layout_predictions(tmp_path, neusight)


def test_the_system_fit_names_a_missing_system():
    vidur = load_vidur_allreduce(REPO / "external" / "vidur" / "network")
    with pytest.raises(ValueError, match="field 'system' has no 'v100_dgx' rows"):
        fit_system_allreduce(vidur, "v100_dgx")
    model = MeasuredCollectives(fit_system_allreduce(vidur, "h100_dgx"), "h100_dgx")
    assert np.all(model.predict_ms("all_reduce", [1e6, 1e7], 1) == 0)
    assert model.predict_ms("send", 1e7, 2) == pytest.approx(model.predict_ms("all_reduce", 1e7, 2))


def test_evaluate_gpu_adds_the_layouts_and_their_targets(fitted, tmp_path):
    from scaledl.evaluation.gpu import evaluate_gpu
    from scaledl.evaluation.results import GpuResults

    data, _ = fitted
    (tmp_path / "profiles").mkdir()
    directory, _ = write_synthetic(tmp_path / "profiles")
    labels = tmp_path / "parallel_labels.parquet"
    _labels(data).to_parquet(labels)
    peer = tmp_path / "peer" / "prediction" / "NVIDIA_H100_80GB_HBM3"
    peer.mkdir(parents=True)
    (peer / "tiny_b-train-32-4-tp2.json").write_text(json.dumps({"e2e_latency": 0.9}))
    config = GpuEvaluationConfig(
        operator_params={"grid": TINY_GRID, "min_rows": 5}, leave_one_gpu_out=False,
        parallel_labels=labels, vidur_root=REPO / "external" / "vidur" / "network",
        peer_root=tmp_path / "peer", neusight_root=REPO / "external" / "neusight",
    )  # fmt: skip
    metrics, _ = evaluate_gpu(directory, config)
    layouts = metrics["parallel_layouts"]
    assert len(layouts["rows"]) == 3 and layouts["summary"]["overall"]["n"] == 1
    assert any("4-GPU rows (all)" in t["target"] for t in metrics["targets"])
    # the metrics.json schema accepts the section (a protocol not run is written as null)
    GpuResults.model_validate({"leave_one_gpu_out": None, **metrics})
