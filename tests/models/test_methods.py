"""Every method fitted on a small real profile (the shared 8-workload, 3-family session profile)."""

import numpy as np
import pandas as pd
import pytest
from tiny_specs import gpt2_config, tiny

from scaledl.devices.local import local_device_name
from scaledl.models.data import load_profile_data
from scaledl.models.fitted import NotFittedError
from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.graph_prediction import GraphPredictor
from scaledl.models.methods import METHOD_NAMES, GraphMethod, make_method

pytestmark = pytest.mark.slow
GNN = GNNTrainConfig(hidden_channels=16, heads=2, max_epochs=30, patience=10)


@pytest.fixture(scope="module")
def data(profiled):
    return load_profile_data(profiled.out_dir)


@pytest.fixture(scope="module")
def fitted(data):
    val_ids = [data.ids[0], data.ids[-1]]
    methods = {}
    for name in METHOD_NAMES:
        kwargs = (
            {"gnn_config": GNN, "folds": 3} if name in ("scaledl", "graph_only", "additive") else {}
        )
        methods[name] = make_method(name, **kwargs).fit(data, val_ids)
    return methods


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
    cfg = gpt2_config(tmp_path_factory.mktemp("gpt2"))
    return [
        tiny("hf", cfg),
        tiny("hf", cfg, seq_len=32, batch_size=4, world_size=2),
    ]


def test_profile_data_from_the_real_profile(data, profiled):
    assert len(data.ids) == 8
    assert set(data.labels["family"]) == {"bert", "vit", "t5"}
    assert set(data.ids) == {profiled.workloads[n].workload_id for n in profiled.ok_names()}
    assert (data.labels["iteration_ms"] > 0).all() and (data.labels["epoch_s"] > 0).all()
    layers = data.nodes[data.nodes["node_kind"] == "layer"]
    assert layers["forward_ms"].notna().all() and (layers["forward_ms"] > 0).all()
    assert len(data.buckets) == 2  # one bucket per two-rank workload
    assert set(data.buckets["world_size"]) == {2}


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_predictions_are_finite_and_positive(fitted, data, name):
    method = fitted[name]
    workloads = [data.workloads[i] for i in data.ids]
    pred = method.predict(workloads)
    assert list(pred.columns) == ["workload_id", "iteration_s", "epoch_s"]
    assert list(pred["workload_id"]) == data.ids
    values = pred[["iteration_s", "epoch_s"]].to_numpy()
    assert np.isfinite(values).all() and (values > 0).all()
    steps = np.array([w.steps_per_epoch for w in workloads])
    assert (pred["epoch_s"].to_numpy() >= steps * pred["iteration_s"].to_numpy() - 1e-12).all()
    # In-sample predictions are in the measured range (not off by orders of magnitude).
    ratio = pred["iteration_s"].to_numpy() * 1000 / data.labels["iteration_ms"].to_numpy()
    assert (ratio > 0.05).all() and (ratio < 20).all(), ratio
    assert method.fit_seconds_ > 0
    assert method.training_workload_ids_ == data.ids
    assert method.training_devices_ == [local_device_name()]


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_held_out_family(fitted, held_out, name):
    pred = fitted[name].predict(held_out)
    values = pred[["iteration_s", "epoch_s"]].to_numpy()
    assert np.isfinite(values).all() and (values > 0).all()


def test_scaledl_on_a_never_profiled_family(fitted, held_out):
    method = fitted["scaledl"]
    assert isinstance(method, GraphMethod) and method.gnn_ is not None
    assert method.history_["epochs"] <= GNN.max_epochs
    detail = method.node_detail(held_out)
    assert set(detail["workload_id"]) == {w.workload_id for w in held_out}
    assert (detail["total_ms"] >= 0).all()
    # The two-rank workload has a gradient bucket, predicted by the all-reduce model.
    buckets = detail[detail["node_kind"] == "allreduce"]
    assert len(buckets) == 1 and buckets["total_ms"].iloc[0] > 0


def test_duplicates_get_identical_predictions(fitted, data):
    w = data.workloads[data.ids[0]]
    for name in METHOD_NAMES:
        pred = fitted[name].predict([w, data.workloads[data.ids[1]], w])
        assert pred["iteration_s"].iloc[0] == pred["iteration_s"].iloc[2], name


def test_additive_is_the_sum_of_node_predictions(fitted, data):
    method = fitted["additive"]
    workloads = [data.workloads[i] for i in data.ids[:3]]
    detail = method.node_detail(workloads)
    sums = detail.groupby("workload_id")["total_ms"].sum()
    pred = method.predict(workloads).set_index("workload_id")["iteration_s"] * 1000
    np.testing.assert_allclose(pred.loc[sums.index], sums, rtol=1e-9)


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_fitted_state_is_set_by_fit_only(fitted, data, name):
    fresh = make_method(name)
    assert not [k for k in vars(fresh) if k.endswith("_")], "the constructor set fitted state"
    with pytest.raises(NotFittedError, match="not fitted"):
        fresh.predict([data.workloads[data.ids[0]]])
    with pytest.raises(NotFittedError):
        fresh.predict_iteration_ms([data.workloads[data.ids[0]]])
    assert {"epoch_model_", "training_workload_ids_", "fit_seconds_"} <= set(vars(fitted[name]))


def test_graph_method_parts_and_from_fitted(fitted, data):
    workloads = [data.workloads[i] for i in data.ids]
    for name in ("scaledl", "additive"):
        method = fitted[name]
        assert (method.gnn_ is None) == (name == "additive")
        again = GraphMethod.from_fitted(
            mode=name,
            layerwise=method.layerwise_,
            allreduce=method.allreduce_,
            gnn=method.gnn_,
            epoch_model=method.epoch_model_,
            training_devices=method.training_devices_,
            training_workload_ids=method.training_workload_ids_,
        )
        np.testing.assert_array_equal(
            again.predict(workloads)["iteration_s"], method.predict(workloads)["iteration_s"]
        )
    pred, nodes = fitted["scaledl"].predict_with_detail(workloads + workloads[:1])
    assert list(pred["workload_id"]) == [*data.ids, data.ids[0]]
    assert set(nodes["workload_id"]) == set(data.ids)
    with pytest.raises(ValueError, match="graph_only has no layer-wise model"):
        fitted["graph_only"].node_detail(workloads)


def test_graph_predictor_predicts_what_the_fitted_method_does(fitted, data):
    """The predict-only class a bundle loads into shares GraphMethod's prediction code."""
    workloads = [data.workloads[i] for i in data.ids]
    for name in ("scaledl", "additive", "critical_path", "graph_only"):
        method = fitted[name]
        predictor = GraphPredictor(
            mode=method.mode,
            prior=method.prior,
            edges=method.edges,
            system_nodes=method.system_nodes,
            layerwise=method.layerwise_,
            allreduce=method.allreduce_,
            gnn=method.gnn_,
            epoch_model=method.epoch_model_,
            training_devices=method.training_devices_,
            training_workload_ids=method.training_workload_ids_,
        )
        assert predictor.name == method.name
        pd.testing.assert_frame_equal(
            predictor.predict(workloads), method.predict(workloads), check_exact=True
        )
        if method.uses_layerwise:
            for got, want in zip(
                predictor.predict_with_detail(workloads),
                method.predict_with_detail(workloads),
                strict=True,
            ):
                pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_unknown_method_and_mode():
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        make_method("nope")
    with pytest.raises(ValueError, match="'mode'"):
        GraphMethod(mode="nope").fit(None)  # validated by fit, before the data is read
