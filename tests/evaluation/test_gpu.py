"""The GPU evaluation protocols on a tiny synthetic set of operator-timed profiles."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from gpu_synthetic import DEVICES, TINY_GRID, write_synthetic

from scaledl.devices import UnknownDeviceError
from scaledl.evaluation.gpu import GpuEvaluationConfig, evaluate_gpu, leave_one_out
from scaledl.evaluation.gpu_calibration import gpu_calibration
from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.kernel import KernelGraphMethod
from scaledl.report.gpu_report import gpu_report_html
from scaledl.workloads.spec import Workload

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    return write_synthetic(tmp_path_factory.mktemp("gpu"))


CONFIG = GpuEvaluationConfig(operator_params={"grid": TINY_GRID, "min_rows": 5})


def test_leave_one_model_out_predicts_each_workload_once_per_method(synthetic):
    _, data = synthetic
    pred, ops, folds = leave_one_out(data, "leave_one_model_out", lambda w: Path(
        w.config_path).stem.split("-")[0], CONFIG)  # fmt: skip
    assert set(folds) == {"tiny_a", "tiny_b", "tiny_c"}
    assert len(pred) == len(CONFIG.all_methods) * len(data.ids)
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
    assert ops.empty and len(pred) == len(CONFIG.all_methods) * len(data.ids)


def test_evaluate_gpu_writes_metrics_targets_and_report(synthetic):
    directory, data = synthetic
    metrics, pred = evaluate_gpu(directory, CONFIG)
    lomo = metrics["leave_one_model_out"]
    assert set(lomo["per_gpu"]) == {"NVIDIA H100 80GB HBM3", "Tesla V100-PCIE-32GB"}
    assert set(lomo["mean_over_gpus"]) == {"scaledl", "additive", "analytical"}
    assert metrics["methods"] == list(CONFIG.all_methods)
    logo_folds = metrics["leave_one_gpu_out"]["folds"].values()
    assert {f["unseen_device_correction"] for f in logo_folds} <= {"none", "training_devices"}
    assert metrics["operators"]["overall"]["n"] > 0
    assert {t["text"].split(",")[0] for t in metrics["targets"]} >= {
        "GPU leave-one-model-out MRE", "GPU leave-one-GPU-out MRE"}  # fmt: skip
    assert set(pred["protocol"]) == {"leave_one_model_out", "leave_one_gpu_out"}
    assert any("fallback" in n for n in metrics["notes"])  # three models < the GNN's minimum
    html = gpu_report_html(metrics)
    assert "Leave one GPU out" in html and "Targets" in html
    calibration = gpu_calibration(pred, "sha", "test")  # one family (GPT-2): no unseen_family
    assert calibration.sizes()["iteration"] == {"in_domain": len(data.ids),
                                                "unseen_device": len(data.ids)}  # fmt: skip


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


def test_baseline_names_must_not_shadow_methods():
    with pytest.raises(ValueError, match="baseline name"):
        GpuEvaluationConfig(baselines={"additive": {}})


def test_folds_in_parallel_processes_give_the_same_result(synthetic):
    _, data = synthetic
    key = lambda w: w.device_name.split(":", 1)[1]  # noqa: E731
    pred, _, folds = leave_one_out(data, "leave_one_gpu_out", key, CONFIG)
    config = dataclasses.replace(CONFIG, n_jobs=2)
    pred2, _, folds2 = leave_one_out(data, "leave_one_gpu_out", key, config)
    pd.testing.assert_frame_equal(pred2, pred)
    # Each fold's record less its seconds per method: the corrections chosen, their scores.
    drop = lambda f: {k: v for k, v in f.items() if k not in CONFIG.all_methods}  # noqa: E731
    assert {h: drop(f) for h, f in folds2.items()} == {h: drop(f) for h, f in folds.items()}
