"""The GPU predictor: estimator contract, kernel bundle, unseen GPUs, `scaledl predict`."""

import json

import numpy as np
import pytest
import skops.io as sio
from gpu_synthetic import TINY_GRID, write_synthetic
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from typer.testing import CliRunner

from scaledl.cli import app
from scaledl.evaluation.gpu_calibration import gpu_calibration, gpu_strata
from scaledl.models.kernel import KernelGraphMethod
from scaledl.prediction.predictor import load_predictor
from scaledl.profiles.fingerprint import tables_sha256
from scaledl.registry import BundleError, save_bundle
from scaledl.registry.bundle import sha256_file
from scaledl.workloads.spec import WorkloadError

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

H100 = "cuda:NVIDIA H100 80GB HBM3"
UNSEEN = "cuda:NVIDIA A100-SXM4-40GB"  # in the device table, not in the synthetic profiles
PARAMS = {"operator_params": {"grid": TINY_GRID, "min_rows": 5}}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    directory, data = write_synthetic(tmp_path_factory.mktemp("gpu"))
    return directory, data, KernelGraphMethod(**PARAMS).fit(data, [])


def _calibration(data, sha):
    """A calibration of synthetic held-out residuals in the GPU strata (tests the plumbing)."""
    import pandas as pd

    rng = np.random.default_rng(0)
    rows = []
    for protocol in ("leave_one_model_out", "leave_one_gpu_out"):
        for i in range(len(data.ids)):
            true = 10.0 + i
            spread = 0.05 if protocol == "leave_one_model_out" else 0.2
            rows.append({"method": "scaledl", "protocol": protocol, "held_out": f"m{i % 3}",
                         "model": f"m{i % 3}", "family": "hf:gpt2", "true_ms": true,
                         "pred_ms": true * np.exp(rng.normal(0, spread))})  # fmt: skip
    frame = pd.DataFrame(rows)
    assert set(gpu_strata(frame)) == {"in_domain", "unseen_device"}
    return gpu_calibration(frame, sha, "synthetic")


def test_kernel_method_follows_the_estimator_contract(fitted, tmp_path):
    _, data, method = fitted
    fresh = KernelGraphMethod(**PARAMS)
    assert not [k for k in vars(fresh) if k.endswith("_")]
    with pytest.raises(NotFittedError):
        fresh.predict_iteration_ms([data.workloads[data.ids[0]]])
    with pytest.raises(NotFittedError):
        fresh.layer_sum_ms([data.workloads[data.ids[0]]])
    assert method.layerwise_params == {}  # the parameter is never changed by fit
    assert method.layerwise_params_["features"] == "kernel"
    copy = clone(method)
    assert copy.get_params()["operator_params"] == PARAMS["operator_params"]
    assert not hasattr(copy, "operator_model_") and not hasattr(copy, "layerwise_")
    with pytest.raises(NotFittedError):
        save_bundle(fresh, tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_kernel_bundle_loads_and_predicts_as_the_fitted_method(fitted, tmp_path):
    directory, data, method = fitted
    sha = tables_sha256(directory)
    path = save_bundle(method, tmp_path, "scaledl-gpu", training_data={"sha256": sha},
                       calibration=_calibration(data, sha), version="v1")  # fmt: skip
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["predictor_kind"] == "kernel"
    assert set(manifest["files"]) == {"layerwise.skops", "operators.skops", "params.json",
                                      "calibration.json"}  # fmt: skip
    predictor = load_predictor(tmp_path / "scaledl-gpu")
    workloads = [data.workloads[i] for i in data.ids[:6]]
    got = predictor.predict(workloads, coverage=0.9)
    expected = method.predict_iteration_ms(workloads) / 1000.0
    assert np.allclose(got["iteration_s"], expected, rtol=1e-9)
    assert got["in_domain"].all() and (got["interval_basis"] == "in_domain").all()
    assert (got["iteration_s_low"] < got["iteration_s"]).all()
    assert (got["iteration_s"] < got["iteration_s_high"]).all()

    unseen = {**workloads[0].to_record(), "device_name": UNSEEN}
    out = predictor.predict([unseen], coverage=0.9)
    assert not out["in_domain"].iat[0] and out["interval_basis"].iat[0] == "unseen_device"
    assert f"device_name={UNSEEN}: device never trained on" in out["extrapolation"].iat[0]
    assert out["iteration_s"].iat[0] > 0
    low_seen = got["iteration_s_high"].iat[0] / got["iteration_s"].iat[0]
    assert out["iteration_s_high"].iat[0] / out["iteration_s"].iat[0] > low_seen  # wider
    with pytest.raises(WorkloadError, match="'device_name' .*H999.*not in the device table"):
        predictor.predict([{**unseen, "device_name": "cuda:NVIDIA H999"}])


def test_the_operator_file_is_loaded_with_an_exact_allow_list(fitted, tmp_path):
    _, _, method = fitted
    path = save_bundle(method, tmp_path, "scaledl-gpu", version="v1")
    hostile = path / "operators.skops"
    sio.dump({"models": {}, "correction": np.testing.assert_equal}, hostile)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["operators.skops"] = sha256_file(hostile)
    manifest["file_sizes"]["operators.skops"] = hostile.stat().st_size
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="operators.skops: refuses to load types outside"):
        load_predictor(path)


def test_scaledl_predict_answers_a_gpu_workload_from_the_bundle(fitted, tmp_path):
    _, data, method = fitted
    save_bundle(method, tmp_path, "scaledl-gpu", version="v1")
    base = data.workloads[data.ids[0]]
    args = ["predict", "--predictor", str(tmp_path / "scaledl-gpu"), "--family", "hf",
            "--set", f"config_path={base.config_path}", "--set", "seq_len=32",
            "--set", "batch_size=3", "--set", "mode=infer", "--set", "backend=nccl"]  # fmt: skip
    result = CliRunner().invoke(app, [*args, "--set", f"device_name={H100}"])
    assert result.exit_code == 0, result.output
    assert "iteration_s" in result.output and "True" in result.stdout  # in domain
    result = CliRunner().invoke(app, [*args, "--set", f"device_name={UNSEEN}"])
    assert result.exit_code == 0, result.output
    assert "device never trained on" in result.output
    result = CliRunner().invoke(app, [*args, "--set", "device_name=cuda:NVIDIA H999"])
    assert result.exit_code == 2 and "not in the device table" in result.output
    train = [a if a != "mode=infer" else "mode=train" for a in args]
    sharded = ["--set", "world_size=2", "--set", "sharding=zero1", "--set", f"device_name={H100}"]
    result = CliRunner().invoke(app, [*train, *sharded])  # Megatron-LM's recipe: no ZeRO
    assert result.exit_code == 2 and "field 'sharding' (value 'zero1')" in result.output
