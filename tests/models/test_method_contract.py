"""The scikit-learn estimator contract of the CPU methods and the layer-wise model (no fit)."""

import pytest
from sklearn.base import clone
from sklearn.utils._param_validation import InvalidParameterError

from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.layerwise import LayerwiseModel
from scaledl.models.methods import (
    ABLATION_NAMES,
    METHOD_NAMES,
    GraphMethod,
    make_method,
)


@pytest.mark.parametrize("name", METHOD_NAMES + ABLATION_NAMES)
def test_parameters_are_stored_as_given_and_cloned(name):
    method = make_method(name)
    assert method.name == name
    copy = clone(method)
    assert type(copy) is type(method) and copy.get_params() == method.get_params()
    assert copy.name == name
    assert not [k for k in vars(copy) if k.endswith("_")]


def test_the_name_follows_the_parameters():
    method = GraphMethod(mode="scaledl")
    assert method.name == "scaledl"
    method.set_params(prior="sum")
    assert method.name == "scaledl_sum_prior" and method.prior == "sum"
    assert GraphMethod(mode="scaledl", edges=False, prior="sum").name == "scaledl"


def test_a_config_is_kept_as_the_same_object():
    config = GNNTrainConfig(max_epochs=3)
    assert GraphMethod(gnn_config=config).get_params()["gnn_config"] is config


@pytest.mark.parametrize(
    ("params", "field"),
    [({"mode": "nope"}, "'mode'"), ({"prior": "magic"}, "'prior'"), ({"folds": 0}, "'folds'"),
     ({"gnn_config": {"max_epochs": 3}}, "'gnn_config'"), ({"edges": "yes"}, "'edges'")],
)  # fmt: skip
def test_fit_rejects_an_invalid_parameter_by_name(params, field):
    with pytest.raises(InvalidParameterError, match=field):
        GraphMethod(**params).fit(None)


def test_layerwise_model_contract():
    model = LayerwiseModel(min_samples=3, features="kernel")
    assert clone(model).get_params() == model.get_params()
    with pytest.raises(InvalidParameterError, match="'features'"):
        LayerwiseModel(features="magic").fit(None)
    with pytest.raises(InvalidParameterError, match="'min_samples'"):
        LayerwiseModel.from_fitted({"*": {}}, min_samples=0)
