import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from scaledl.models.fitted import NotFittedError
from scaledl.models.layer_time import LAYER_FEATURES, layer_features
from scaledl.models.layerwise import LayerTimeRegressor, LayerwiseModel


@parametrize_with_checks([LayerTimeRegressor()])
def test_sklearn_compatible(estimator, check):
    check(estimator)


def synthetic_nodes(n_per_type: int = 12, types=("attention", "feed-forward"), seed: int = 0):
    """Nodes whose times follow a power law of FLOPs, with known per-type constants."""
    rng = np.random.default_rng(seed)
    rows = []
    for k, layer_type in enumerate(types):
        for _ in range(n_per_type):
            flops = float(rng.uniform(1e6, 1e9))
            rows.append(
                {
                    "layer_type": layer_type,
                    "fwd_flops": flops,
                    "bwd_flops": 2 * flops,
                    "fwd_ops": 10 + k,
                    "params": 1000 * (k + 1),
                    "input_bytes": flops / 100,
                    "output_bytes": flops / 100,
                    "allreduce_bytes": 0.0,
                    "batch_size": int(rng.choice([1, 2, 4])),
                    "seq_len": 128,
                    "hidden_size": 64,
                    "world_size": 1,
                    "train": 1,
                    "forward_ms": (k + 1) * 1e-6 * flops**0.8,
                    "backward_ms": 2 * (k + 1) * 1e-6 * flops**0.8,
                }
            )
    return pd.DataFrame(rows)


def test_layer_features_shape_and_direction():
    nodes = synthetic_nodes(3)
    fwd, bwd = layer_features(nodes, "forward"), layer_features(nodes, "backward")
    assert fwd.shape == bwd.shape == (6, len(LAYER_FEATURES))
    np.testing.assert_allclose(fwd[:, 0], nodes["fwd_flops"])
    np.testing.assert_allclose(bwd[:, 0], nodes["bwd_flops"])
    np.testing.assert_allclose(bwd[:, 1], 2 * nodes["fwd_ops"])
    np.testing.assert_allclose(fwd[:, 2], nodes["input_bytes"] + nodes["output_bytes"])
    np.testing.assert_allclose(fwd[:, 3], nodes["params"])


def test_work_model_recovers_linear_costs():
    """Times linear in the work are recovered (non-negative coefficients, small intercept)."""
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, size=(60, 4)) * np.array([1e9, 100, 1e7, 1e6])
    y = 0.05 + 2e-9 * X[:, 0] + 0.01 * X[:, 1] + 1e-8 * X[:, 2]
    reg = LayerTimeRegressor(n_estimators=0).fit(X, y)
    assert (reg.coef_ >= 0).all() and reg.intercept_ >= 0
    np.testing.assert_allclose(reg.predict(X), y, rtol=0.05)  # the light ridge biases a little


def test_fit_predicts_known_power_law():
    nodes = synthetic_nodes()
    model = LayerwiseModel().fit(nodes)
    assert set(model.models_) == {"*", "attention", "feed-forward"}
    pred = model.predict(nodes)
    assert list(pred.columns) == ["forward_ms", "backward_ms", "used_generic", "bounded"]
    assert (pred["bounded"] == "").all()  # its training layers lie inside the band
    assert not pred["used_generic"].any()
    rel = np.abs(pred["forward_ms"] - nodes["forward_ms"]) / nodes["forward_ms"]
    assert rel.median() < 0.1
    assert (pred["backward_ms"] > pred["forward_ms"]).all()


def test_unknown_layer_type_uses_generic_model():
    nodes = synthetic_nodes()
    model = LayerwiseModel().fit(nodes)
    unseen = nodes.iloc[:3].assign(layer_type="rotary-embedding")
    pred = model.predict(unseen)
    assert pred["used_generic"].all()
    assert (pred["forward_ms"] > 0).all() and np.isfinite(pred["forward_ms"]).all()
    mixed = model.predict(pd.concat([nodes.iloc[:2], unseen.iloc[:1]], ignore_index=True))
    assert list(mixed["used_generic"]) == [False, False, True]


def test_rare_type_gets_no_own_regressor():
    nodes = synthetic_nodes(12, types=("attention",))
    rare = synthetic_nodes(3, types=("norm",))
    model = LayerwiseModel(min_samples=6).fit(pd.concat([nodes, rare], ignore_index=True))
    assert "norm" not in model.models_
    assert model.predict(rare)["used_generic"].all()


def test_inference_nodes_have_no_backward():
    nodes = synthetic_nodes()
    model = LayerwiseModel().fit(nodes)
    pred = model.predict(nodes.assign(train=0))
    assert (pred["backward_ms"] == 0).all() and (pred["forward_ms"] > 0).all()


@pytest.mark.parametrize("bad", [0.0, -1.5])
def test_non_positive_forward_ms_names_the_field(bad):
    nodes = synthetic_nodes()
    nodes.loc[5, "forward_ms"] = bad
    with pytest.raises(ValueError, match=r"'forward_ms'.*" + str(bad)):
        LayerwiseModel().fit(nodes)


def test_empty_samples_and_unfitted_model():
    with pytest.raises(ValueError, match="training samples"):
        LayerwiseModel().fit(synthetic_nodes().iloc[:0])
    with pytest.raises(NotFittedError, match="LayerwiseModel.*not fitted"):
        LayerwiseModel().predict(synthetic_nodes())
    with pytest.raises(SklearnNotFittedError):
        LayerTimeRegressor().predict(np.zeros((2, 3)))


def test_fitted_state_only_from_fit_or_from_fitted():
    nodes = synthetic_nodes()
    assert not hasattr(LayerwiseModel(min_samples=3), "models_")
    fitted = LayerwiseModel().fit(nodes)
    again = LayerwiseModel.from_fitted(fitted.models_, min_samples=fitted.min_samples)
    pd.testing.assert_frame_equal(again.predict(nodes), fitted.predict(nodes))
    with pytest.raises(ValueError, match="generic"):
        LayerwiseModel.from_fitted({"attention": fitted.models_["attention"]})


def test_regressor_correction_is_bounded():
    """The boosted correction never scales the work model beyond exp(+-max_correction)."""
    rng = np.random.default_rng(2)
    X = rng.uniform(1, 10, size=(40, 2))
    y = X[:, 0] * np.exp(rng.uniform(-3, 3, size=40))  # wild multiplicative noise
    reg = LayerTimeRegressor(max_correction=0.5).fit(X, y)
    work = LayerTimeRegressor(n_estimators=0, max_correction=0.5).fit(X, y)
    assert reg.booster_ is not None
    ratio = reg.predict(X) / work.predict(X)
    assert (ratio <= np.exp(0.5) + 1e-9).all() and (ratio >= np.exp(-0.5) - 1e-9).all()
    small = LayerTimeRegressor().fit(X[:4], y[:4])
    assert small.booster_ is None  # too few rows to boost
