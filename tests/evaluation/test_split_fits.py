"""Fits of every method and seed on splits of the real 15-workload slice, sharing the stage."""

import numpy as np
import pytest

from scaledl.evaluation.split_fits import (
    PREDICTION_COLUMNS,
    is_seeded,
    run_splits,
    stage_plan,
    with_seed,
)
from scaledl.evaluation.splits import random_split
from scaledl.models.gnn_training import GNNTrainConfig

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

GNN = GNNTrainConfig(hidden_channels=8, heads=1, num_layers=1, max_epochs=4, patience=2)


def test_which_methods_are_seeded_and_share_a_stage():
    assert is_seeded("scaledl") and is_seeded("scaledl_no_edges") and is_seeded("graph_only")
    assert not is_seeded("additive") and not is_seeded("critical_path")
    assert with_seed({"gnn_config": GNN}, 3)["gnn_config"].seed == 3
    params = {m: {"folds": 2} for m in ("scaledl", "scaledl_no_prior")}
    params |= {"additive": {}, "analytical": {}}
    plan = stage_plan(["scaledl", "scaledl_no_prior", "additive", "analytical"], params)
    # One stage with 2 folds for both GNNs; the additive baseline reads its full-data models.
    assert plan == {"scaledl": (2, {}), "scaledl_no_prior": (2, {}), "additive": (2, {})}


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_every_method_has_one_prediction_per_seed_and_test_workload(profile_data, n_jobs):
    split = random_split(profile_data.labels, 0.3, 0.15, 0)
    methods = ["scaledl", "scaledl_sum_prior", "additive"]
    params = {m: {"folds": 2, "gnn_config": GNN} for m in methods[:2]}
    fits = run_splits(profile_data, [split], methods, 2, params, n_jobs=n_jobs)
    pred = fits.predictions
    assert list(pred.columns) == list(PREDICTION_COLUMNS)
    n_test = len(split.test_ids)
    for method in methods:
        rows = pred[pred["method"] == method]
        assert len(rows) == 2 * n_test and set(rows["seed"]) == {0, 1}
    additive = pred[pred["method"] == "additive"].pivot(
        index="workload_id", columns="seed", values="pred_iteration_s"
    )
    np.testing.assert_array_equal(additive[0], additive[1])  # fitted once, stands for each seed
    scaledl = pred[pred["method"] == "scaledl"].pivot(
        index="workload_id", columns="seed", values="pred_iteration_s"
    )
    assert not np.allclose(scaledl[0], scaledl[1])  # two GNN seeds, two models
    assert fits.fit_counts == {"scaledl": 2, "scaledl_sum_prior": 2, "additive": 1}
    assert set(fits.diagnosis["method"]) == {"scaledl", "scaledl_sum_prior"}
    assert (fits.diagnosis["prior_test_mre"] > 0).all()
