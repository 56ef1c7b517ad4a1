"""The GPU evaluation protocols on a tiny synthetic set of operator-timed profiles."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scaledl.devices import UnknownDeviceError
from scaledl.evaluation.gpu import GpuEvaluationConfig, evaluate_gpu, leave_one_out
from scaledl.evaluation.gpu_report import gpu_report_html
from scaledl.graph.layer_graph import build_layer_graph
from scaledl.graph.operators import DESCRIPTOR_COLUMNS, aten_descriptors
from scaledl.models.data import profile_data_from_tables
from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.kernel import KernelGraphMethod
from scaledl.models.operators import device_columns, roofline_terms
from scaledl.workloads.spec import Workload

DEVICES = {"cuda:NVIDIA H100 80GB HBM3": 1.0, "cuda:Tesla V100-PCIE-32GB": 1.1}
TINY_GRID = ({"n_estimators": 20, "max_depth": 2, "learning_rate": 0.3, "min_samples_leaf": 2},)


def _configs(directory: Path) -> dict[str, Path]:
    paths = {}
    for name, (width, layers) in {"tiny_a": (32, 1), "tiny_b": (64, 2), "tiny_c": (48, 1)}.items():
        path = directory / f"{name}-any.json"
        path.write_text(json.dumps({"model_type": "gpt2", "n_embd": width, "n_layer": layers,
                                    "n_head": 2, "vocab_size": 64, "n_positions": 64,
                                    "bos_token_id": 0, "eos_token_id": 0}))  # fmt: skip
        paths[name] = path
    return paths


def _tables(directory: Path) -> dict[str, pd.DataFrame]:
    """Operators timed at 1/0.6 of their roofline (+4 us); labels = instrumented x device bias."""
    rows = {k: [] for k in ("workloads", "runs", "layer_timings", "iteration_timings",
                            "operator_timings")}  # fmt: skip
    for path in _configs(directory).values():
        for device, bias in DEVICES.items():
            for batch in (2, 4):
                for mode in ("train", "infer"):
                    w = Workload.parse({"family": "hf", "config_path": str(path), "seq_len": 32,
                                        "batch_size": batch, "mode": mode, "device_name": device,
                                        "backend": "nccl"})  # fmt: skip
                    _add(rows, w, bias)
    tables = {k: pd.DataFrame(v) for k, v in rows.items()}
    tables["epochs"] = pd.DataFrame(
        columns=["run_id", "workload_id", "rank", "epoch_s", "steps_per_epoch", "dataset_size"]
    )
    tables["allreduce_timings"] = pd.DataFrame(
        columns=[
            "run_id",
            "workload_id",
            "rank",
            "step",
            "bucket_index",
            "allreduce_bytes",
            "allreduce_ms",
        ]  # fmt: skip
    )
    return tables


def _add(rows: dict, w: Workload, bias: float) -> None:
    graph = build_layer_graph(w)
    ops = aten_descriptors(graph.operators).reset_index(drop=True)
    ops = pd.concat([ops, device_columns([w.device_name] * len(ops), ["fp32"] * len(ops))], axis=1)
    ops["forward_ms"] = roofline_terms(ops, "forward").roofline_ms / 0.6 + 0.004
    train = w.mode == "train"
    ops["backward_ms"] = (roofline_terms(ops, "backward").roofline_ms / 0.5 + 0.004) * train
    run = f"{w.workload_id}-syn"
    rows["workloads"].append(w.to_record())
    rows["runs"].append({"run_id": run, "workload_id": w.workload_id, "status": "ok",
                         "source": "synthetic"})  # fmt: skip
    per_layer = ops.groupby("layer_index")[["forward_ms", "backward_ms"]].sum()
    for layer in graph.layers.itertuples(index=False):
        if layer.layer_index in per_layer.index:
            rows["layer_timings"].append({
                "run_id": run, "workload_id": w.workload_id, "rank": 0, "step": 0,
                "layer_index": layer.layer_index, "layer_name": layer.layer_name,
                "layer_type": layer.layer_type, **per_layer.loc[layer.layer_index].to_dict(),
            })  # fmt: skip
    total = float(per_layer.to_numpy().sum())
    for phase, ms in (("instrumented", total), ("label", total * bias)):
        rows["iteration_timings"].append({"run_id": run, "workload_id": w.workload_id,
                                          "rank": 0, "step": 0, "phase": phase,
                                          "iteration_ms": ms, "optimizer_ms": None})  # fmt: skip
    keep = ["layer_index", *DESCRIPTOR_COLUMNS, "forward_ms", "backward_ms"]
    for op in ops[keep].to_dict("records"):
        rows["operator_timings"].append({"run_id": run, "workload_id": w.workload_id, **op})


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gpu")
    tables = _tables(directory)
    for name, frame in tables.items():
        frame.to_parquet(directory / f"{name}.parquet", index=False)
    return directory, profile_data_from_tables(tables, source=str(directory))


CONFIG = GpuEvaluationConfig(operator_params={"grid": TINY_GRID, "min_rows": 5})


def test_leave_one_model_out_predicts_each_workload_once_per_method(synthetic):
    _, data = synthetic
    pred, ops, folds = leave_one_out(data, "leave_one_model_out", lambda w: Path(
        w.config_path).stem.split("-")[0], CONFIG)  # fmt: skip
    assert set(folds) == {"tiny_a", "tiny_b", "tiny_c"}
    assert len(pred) == 3 * len(data.ids)
    for method, group in pred.groupby("method"):
        assert sorted(group["workload_id"]) == sorted(data.ids), method
        assert (group["held_out"] == group["model"]).all()
    assert pred["device_seen"].all() and (pred["pred_ms"] > 0).all()
    assert {"forward", "backward"} == set(ops["direction"]) and len(ops) > 0
    assert all(f["correction"] in ("none", "instrumented", "out_of_architecture")
               for f in folds.values())  # fmt: skip
    re = (pred["pred_ms"] - pred["true_ms"]).abs() / pred["true_ms"]
    mre = re.groupby(pred["method"]).mean()
    # operators are an exact function of their roofline here: the kernel-aware path learns it,
    # FLOPs over peak (the analytical baseline) cannot follow the memory-bound operators
    assert mre["scaledl"] < 0.1 and mre["additive"] < 0.15
    assert mre["scaledl"] < mre["analytical"]


def test_leave_one_gpu_out_predicts_from_specs_only(synthetic):
    _, data = synthetic
    pred, ops, folds = leave_one_out(data, "leave_one_gpu_out",
                                     lambda w: w.device_name.split(":", 1)[1], CONFIG)  # fmt: skip
    assert set(folds) == {d.split(":", 1)[1] for d in DEVICES}
    assert not pred[pred["method"] != "analytical"]["device_seen"].any()
    assert ops.empty and len(pred) == 3 * len(data.ids)


def test_evaluate_gpu_writes_metrics_targets_and_report(synthetic):
    directory, _ = synthetic
    metrics, pred = evaluate_gpu(directory, CONFIG)
    lomo = metrics["leave_one_model_out"]
    assert set(lomo["per_gpu"]) == {"NVIDIA H100 80GB HBM3", "Tesla V100-PCIE-32GB"}
    assert set(lomo["mean_over_gpus"]) == {"scaledl", "additive", "analytical"}
    assert metrics["operators"]["overall"]["n"] > 0
    assert {t["target"].split(",")[0] for t in metrics["targets"]} >= {
        "GPU leave-one-model-out MRE", "GPU leave-one-GPU-out MRE"}  # fmt: skip
    assert set(pred["protocol"]) == {"leave_one_model_out", "leave_one_gpu_out"}
    assert any("fallback" in n for n in metrics["notes"])  # three models < the GNN's minimum
    html = gpu_report_html(metrics)
    assert "Leave one GPU out" in html and "Targets" in html


def test_unknown_device_is_an_error_and_unseen_ones_are_flagged(synthetic):
    _, data = synthetic
    method = KernelGraphMethod(operator_params={"grid": TINY_GRID, "min_rows": 5}).fit(data, [])
    base = data.workloads[data.ids[0]]
    unseen = base.model_copy(update={"device_name": "cuda:NVIDIA H200"})
    out = method.predict([base, Workload.parse(unseen.model_dump())])
    assert list(out["device_seen"]) == [True, False] and (out["iteration_s"] > 0).all()
    unknown = Workload.parse({**base.model_dump(), "device_name": "cuda:NVIDIA H999"})
    with pytest.raises(UnknownDeviceError, match="H999"):
        method.predict([unknown])
    assert not method.includes_optimizer_  # no optimizer timed in the synthetic profiles


def test_enough_architectures_train_scaledls_gnn_on_kernel_aware_layers(synthetic):
    _, data = synthetic
    method = KernelGraphMethod(
        min_gnn_architectures=3,
        operator_params={"grid": TINY_GRID, "min_rows": 5},
        gnn_config=GNNTrainConfig(max_epochs=5, patience=5, hidden_channels=8),
    ).fit(data, data.ids[::5])
    assert method.uses_gnn_ and method.gnn_ is not None
    workloads = [data.workloads[i] for i in data.ids[:4]]
    pred = method.predict_iteration_ms(workloads)
    assert np.isfinite(pred).all() and (pred > 0).all()
