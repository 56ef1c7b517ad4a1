"""Kernel-aware ScaleDL's correction on GPUs never trained on, chosen where it helps."""

import numpy as np
import pytest
from gpu_synthetic import TINY_GRID, write_synthetic
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from scaledl.models.kernel import UNSEEN_PREFIX, KernelGraphMethod
from scaledl.workloads.spec import Workload

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

H100, V100 = "cuda:NVIDIA H100 80GB HBM3", "cuda:Tesla V100-PCIE-32GB"
UNSEEN = "cuda:NVIDIA A100-SXM4-40GB"
PARAMS = {"operator_params": {"grid": TINY_GRID, "min_rows": 5}}


def _fit(tmp_path_factory, biases, **params):
    _, data = write_synthetic(tmp_path_factory.mktemp("kernel"), biases)
    return data, KernelGraphMethod(**{**PARAMS, **params}).fit(data, [])


def _on(workload: Workload, device: str) -> Workload:
    return Workload.parse({**workload.model_dump(), "device_name": device})


def test_a_bias_shared_by_every_device_is_carried_to_an_unseen_one(tmp_path_factory):
    data, method = _fit(tmp_path_factory, {H100: 1.25, V100: 1.25}, unseen_device_correction="auto")
    assert method.correction_ is not None  # instrumented or out-of-architecture: both learn it
    scores = method.correction_scores_
    assert scores[UNSEEN_PREFIX + "training_devices"] < scores[UNSEEN_PREFIX + "none"]
    assert method.unseen_correction_kind_ == "training_devices"
    unseen = [_on(data.workloads[i], UNSEEN) for i in data.ids[:6]]
    ratio = method.predict_iteration_ms(unseen) / method.layer_sum_ms(unseen)
    np.testing.assert_allclose(ratio, 1.25, rtol=0.1)


def test_a_bias_that_differs_per_device_is_not_carried_to_an_unseen_one(tmp_path_factory):
    data, method = _fit(tmp_path_factory, {H100: 0.8, V100: 1.4}, unseen_device_correction="auto")
    assert method.correction_ is not None  # instrumented or out-of-architecture: both learn it
    assert method.unseen_correction_kind_ == "none"
    seen = [data.workloads[i] for i in data.ids[:6]]
    unseen = [_on(w, UNSEEN) for w in seen]
    np.testing.assert_allclose(method.predict_iteration_ms(unseen), method.layer_sum_ms(unseen))
    # on the training devices, the device's own correction still applies
    true = data.labels["iteration_ms"].to_numpy()[:6]
    mre = np.mean(np.abs(method.predict_iteration_ms(seen) - true) / true)
    assert mre < 0.1
    forced = clone(method).set_params(unseen_device_correction="training_devices")
    forced.fit(data, [])
    assert forced.unseen_correction_kind_ == "training_devices"
    assert not np.allclose(forced.predict_iteration_ms(unseen), forced.layer_sum_ms(unseen))


def test_unseen_device_correction_is_validated_and_needs_a_fit():
    method = KernelGraphMethod(unseen_device_correction="sometimes")
    assert clone(method).get_params()["unseen_device_correction"] == "sometimes"
    with pytest.raises(NotFittedError):
        _ = method.unseen_correction_kind_


def test_unknown_unseen_device_correction_is_refused(tmp_path_factory):
    _, data = write_synthetic(tmp_path_factory.mktemp("bad"))
    with pytest.raises(ValueError, match="unseen_device_correction must be one of"):
        KernelGraphMethod(**PARAMS, unseen_device_correction="sometimes").fit(data, [])


def test_the_products_recipe_round_trips_through_the_kernel_bundle(tmp_path_factory, tmp_path):
    from scaledl.prediction.predictor import load_predictor
    from scaledl.registry import save_bundle

    params = {"operator_params": {**PARAMS["operator_params"], "device_features": "relative"},
              "unseen_device_correction": "auto"}  # fmt: skip
    data, method = _fit(tmp_path_factory, {H100: 0.8, V100: 1.4}, **params)
    save_bundle(method, tmp_path, "scaledl-gpu", version="v1")
    loaded = load_predictor(tmp_path / "scaledl-gpu").method
    assert loaded.operator_model_.device_features == "relative"
    assert loaded.unseen_correction_kind_ == method.unseen_correction_kind_
    workloads = [data.workloads[i] for i in data.ids[:4]]
    workloads += [_on(w, UNSEEN) for w in workloads]
    np.testing.assert_allclose(
        loaded.predict_iteration_ms(workloads), method.predict_iteration_ms(workloads), rtol=1e-9
    )


def test_the_default_operator_features_are_device_relative():
    assert KernelGraphMethod().operator_params == {"device_features": "relative"}
