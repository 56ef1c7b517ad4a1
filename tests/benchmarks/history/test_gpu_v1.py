"""The history script of the ``scaledl_v1`` GPU column (benchmarks/history/gpu_v1.py)."""

import importlib.util
import json
from pathlib import Path

import pytest
from gpu_synthetic import DEVICES, TINY_GRID, write_synthetic

from scaledl.evaluation.gpu import GpuEvaluationConfig, leave_one_out

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

REPO = Path(__file__).resolve().parents[3]


def _script():
    path = REPO / "benchmarks" / "history" / "gpu_v1.py"
    spec = importlib.util.spec_from_file_location("gpu_v1", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_v1_column_is_fitted_beside_the_product_on_the_same_folds(tmp_path):
    script = _script()
    _, data = write_synthetic(tmp_path)
    product = GpuEvaluationConfig(operator_params={"grid": TINY_GRID, "min_rows": 5})
    assert product.all_methods == ("scaledl", "additive", "analytical")  # v1 is not the product's
    config = script.v1_config(product)
    assert config.all_methods == (*product.all_methods, "scaledl_v1")
    assert config.operator_params == product.operator_params
    v1_only = script.v1_config(GpuEvaluationConfig(methods=(), **{
        "operator_params": product.operator_params}))  # fmt: skip
    pred, _, folds = leave_one_out(data, "leave_one_gpu_out",
                                   lambda w: w.device_name.split(":", 1)[1], v1_only)  # fmt: skip
    assert set(folds) == {d.split(":", 1)[1] for d in DEVICES}
    assert set(pred["method"]) == {"scaledl_v1"} and len(pred) == len(data.ids)
    assert (pred["pred_ms"] > 0).all() and not pred["device_seen"].any()


def test_the_committed_metrics_keep_the_column_the_product_wrote():
    gpu = json.loads((REPO / "docs" / "results" / "metrics.json").read_text())["gpu"]
    assert "scaledl_v1" in gpu["leave_one_model_out"]["mean_over_gpus"]
