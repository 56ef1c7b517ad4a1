"""ScaleDL's ablations change the model as stated (fitted on the real 15-workload CPU slice)."""

from pathlib import Path

import numpy as np
import pytest

from scaledl.models.critical_path import critical_path
from scaledl.models.data import load_profile_data
from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.layerwise_stage import fit_layerwise_stage
from scaledl.models.methods import ABLATION_NAMES, ABLATIONS, GraphMethod, make_method
from scaledl.models.node_times import node_predictions

DATA_DIR = Path(__file__).resolve().parents[1] / "evaluation" / "data"
GNN = GNNTrainConfig(hidden_channels=8, heads=2, num_layers=1, max_epochs=5, patience=5)


@pytest.fixture(scope="module")
def data():
    return load_profile_data(DATA_DIR)


@pytest.fixture(scope="module")
def stage(data):
    return fit_layerwise_stage(data, folds=2)


@pytest.fixture(scope="module")
def fitted(data, stage):
    val = data.ids[:2]
    names = ("scaledl", *ABLATION_NAMES, "additive", "critical_path")
    return {n: make_method(n, folds=2, gnn_config=GNN).fit(data, val, stage=stage) for n in names}


def test_names_and_settings():
    assert make_method("scaledl").name == "scaledl"
    for name, changed in ABLATIONS.items():
        method = make_method(name)
        assert isinstance(method, GraphMethod) and method.mode == "scaledl"
        assert method.name == name
        for key, value in changed.items():
            assert getattr(method, key) == value
    assert GraphMethod(prior="sum", edges=False).name == "scaledl"  # two changes: no ablation
    with pytest.raises(ValueError, match="'prior'"):
        GraphMethod(prior="median").fit(None)  # validated by fit, before the data is read


def test_the_prior_is_the_critical_path_the_sum_or_none(fitted, data, stage):
    gs, preds = data.graphs, stage.out_of_fold
    cp = critical_path(gs, preds).iteration_ms
    sums = gs.per_graph_sum(preds["total_ms"].to_numpy())
    _, log_cp = fitted["scaledl"]._features(gs, preds)
    _, log_sum = fitted["scaledl_sum_prior"]._features(gs, preds)
    _, log_none = fitted["scaledl_no_prior"]._features(gs, preds)
    np.testing.assert_allclose(np.exp(log_cp), cp)
    np.testing.assert_allclose(np.exp(log_sum), sums)
    assert (log_none == 0).all()
    assert fitted["scaledl"].gnn_.use_prior and not fitted["scaledl_no_prior"].gnn_.use_prior
    # Two-rank workloads overlap part of their all-reduce: the critical path is below the sum.
    two = np.array([w.world_size == 2 for w in gs.workloads])
    assert two.any() and (cp[two] <= sums[two] * (1 + 1e-12)).all()
    np.testing.assert_allclose(cp[~two], sums[~two], rtol=1e-12)  # one rank: the sum


def test_the_gnn_graph_of_each_ablation(fitted, data, stage):
    gs = data.graphs
    x, _ = fitted["scaledl"]._features(gs, stage.out_of_fold)
    full, x_full = fitted["scaledl"]._gnn_graph(gs, x)
    assert full.edge_index.shape[1] == gs.edge_index.shape[1] > 0 and len(x_full) == len(x)
    no_edges, x_ne = fitted["scaledl_no_edges"]._gnn_graph(gs, x)
    assert no_edges.edge_index.shape == (2, 0) and len(x_ne) == len(x)
    layers, x_l = fitted["scaledl_no_system_nodes"]._gnn_graph(gs, x)
    assert set(layers.nodes["node_kind"]) == {"layer"} and len(x_l) == len(layers.nodes)
    kinds = gs.nodes["node_kind"].to_numpy()
    assert len(layers.nodes) == (kinds == "layer").sum() < len(kinds)
    assert layers.edge_index.max() < len(layers.nodes)
    assert not np.isin(gs.edge_type, [3, 4]).all()  # gradient/update edges left with the nodes
    np.testing.assert_array_equal(layers.graph, gs.graph[kinds == "layer"])


def test_every_variant_predicts_and_differs(fitted, data):
    workloads = [data.workloads[i] for i in data.ids]
    preds = {n: m.predict(workloads)["iteration_s"].to_numpy() for n, m in fitted.items()}
    for name, p in preds.items():
        assert np.isfinite(p).all() and (p > 0).all(), name
    for name in ABLATION_NAMES:
        assert not np.allclose(preds[name], preds["scaledl"]), name
    cp = fitted["critical_path"]
    np.testing.assert_allclose(
        preds["critical_path"] * 1000, cp.predict_prior_ms(workloads), rtol=1e-9
    )
    np.testing.assert_allclose(
        preds["critical_path"] * 1000,
        critical_path(
            data.graphs, node_predictions(cp.layerwise_, cp.allreduce_, data.nodes)
        ).iteration_ms,
        rtol=1e-9,
    )
    assert (preds["critical_path"] <= preds["additive"] + 1e-12).all()
