"""Every method fitted on a small real profile (the shared 8-workload, 3-family session profile)."""

import sys
from pathlib import Path

import numpy as np
import pytest

from scaledl.models.data import load_profile_data
from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.methods import METHOD_NAMES, GraphMethod, make_method

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scaledl_fixtures import gpt2_config, tiny  # noqa: E402

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
        tiny("hf", config_path=str(cfg), seq_len=16),
        tiny("hf", config_path=str(cfg), seq_len=32, batch_size=4, world_size=2),
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
    assert method.fit_seconds > 0


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_held_out_family(fitted, held_out, name):
    pred = fitted[name].predict(held_out)
    values = pred[["iteration_s", "epoch_s"]].to_numpy()
    assert np.isfinite(values).all() and (values > 0).all()


def test_scaledl_on_a_never_profiled_family(fitted, held_out):
    method = fitted["scaledl"]
    assert isinstance(method, GraphMethod) and method.gnn is not None
    assert method.history["epochs"] <= GNN.max_epochs
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


def test_unknown_method_and_mode():
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        make_method("nope")
    with pytest.raises(ValueError, match="'mode'"):
        GraphMethod(mode="nope")
