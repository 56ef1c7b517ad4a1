"""The layer-wise stage: fitted once, shared by GNN methods, refused for other data."""

from pathlib import Path

import numpy as np
import pytest

from scaledl.models.data import load_profile_data
from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.layerwise_stage import fit_layerwise_stage
from scaledl.models.methods import make_method

DATA_DIR = Path(__file__).resolve().parents[1] / "evaluation" / "data"
GNN = GNNTrainConfig(hidden_channels=8, heads=2, num_layers=1, max_epochs=5, patience=5)


@pytest.fixture(scope="module")
def data():
    return load_profile_data(DATA_DIR)


def test_out_of_fold_predictions_come_from_other_folds(data):
    stage = fit_layerwise_stage(data, folds=3)
    assert stage.folds == 3 and stage.workload_ids == tuple(data.ids)
    oof = stage.out_of_fold
    assert list(oof.index) == list(data.nodes.index)
    assert np.isfinite(oof.to_numpy()).all() and (oof["total_ms"] >= 0).all()
    full = fit_layerwise_stage(data, folds=1).out_of_fold  # no folds: the full-data models
    assert not np.allclose(oof["forward_ms"], full["forward_ms"])


def test_a_shared_stage_gives_the_same_model_as_fitting_it(data):
    val = data.ids[:2]
    stage = fit_layerwise_stage(data, folds=2)
    shared = make_method("scaledl", folds=2, gnn_config=GNN).fit(data, val, stage=stage)
    own = make_method("scaledl", folds=2, gnn_config=GNN).fit(data, val)
    workloads = [data.workloads[i] for i in data.ids]
    np.testing.assert_allclose(
        shared.predict(workloads)["iteration_s"], own.predict(workloads)["iteration_s"], rtol=1e-6
    )
    # A method without a GNN takes any stage of the same data (it reads the full-data models).
    additive = make_method("additive").fit(data, val, stage=stage)
    assert additive.layerwise_ is stage.layerwise


def test_a_stage_of_other_data_or_folds_is_refused(data):
    stage = fit_layerwise_stage(data, folds=2)
    with pytest.raises(ValueError, match="other workloads"):
        make_method("scaledl", folds=2, gnn_config=GNN).fit(data.subset(data.ids[:-1]), stage=stage)
    with pytest.raises(ValueError, match="folds=2"):
        make_method("scaledl", folds=3, gnn_config=GNN).fit(data, stage=stage)
