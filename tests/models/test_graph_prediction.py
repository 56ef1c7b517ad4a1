"""The predict-only graph method: its settings are checked when a bundle is built into one."""

import pytest

from scaledl.models.epoch_time import EpochTime
from scaledl.models.fitted import NotFittedError
from scaledl.models.graph_prediction import GraphPredictor


def _parts(**settings):
    epoch = EpochTime.from_dict({"coef": [0.0, 0.0, 0.0]})
    return dict(
        layerwise=None, allreduce=None, gnn=None, epoch_model=epoch,
        training_devices=["cpu:x"], training_workload_ids=[], **settings,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("settings", "field"), [({"mode": "nope"}, "'mode'"), ({"prior": "median"}, "'prior'")]
)
def test_unknown_mode_or_prior_is_an_error_naming_it(settings, field):
    with pytest.raises(ValueError, match=f"field {field}"):
        GraphPredictor(**_parts(**settings))


def test_name_follows_the_ablation_and_parts_are_fitted_state():
    predictor = GraphPredictor(**_parts(mode="scaledl", prior="sum"))
    assert predictor.name == "scaledl_sum_prior"
    assert predictor.fit_seconds_ == 0.0 and predictor.history_ == {}
    predictor.check_fitted()
    del predictor.epoch_model_
    with pytest.raises(NotFittedError, match="GraphPredictor.*epoch_model_"):
        predictor.check_fitted()
