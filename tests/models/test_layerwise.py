import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from scaledl.models.features import NODE_NUMERIC, WORKLOAD_NUMERIC
from scaledl.models.layerwise import (
    LAYER_FEATURES,
    LayerTimeRegressor,
    LayerwiseModel,
    layer_features,
)


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
    assert fwd.shape == bwd.shape == (6, len(LAYER_FEATURES) - 1)
    np.testing.assert_allclose(fwd[:, 0], np.log1p(nodes["fwd_flops"]))
    np.testing.assert_allclose(bwd[:, 0], np.log1p(nodes["bwd_flops"]))
    np.testing.assert_allclose(fwd[:, -4], np.log2(nodes["batch_size"]))
    assert len(NODE_NUMERIC) + len(WORKLOAD_NUMERIC) == len(LAYER_FEATURES)


def test_fit_predicts_known_power_law():
    nodes = synthetic_nodes()
    model = LayerwiseModel().fit(nodes)
    assert set(model.models) == {"*", "attention", "feed-forward"}
    pred = model.predict(nodes)
    assert list(pred.columns) == ["forward_ms", "backward_ms", "used_generic"]
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
    assert "norm" not in model.models
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
    with pytest.raises(ValueError, match="no training samples"):
        LayerwiseModel().fit(synthetic_nodes().iloc[:0])
    with pytest.raises(RuntimeError, match="not fitted"):
        LayerwiseModel().predict(synthetic_nodes())
    with pytest.raises(NotFittedError):
        LayerTimeRegressor().predict(np.zeros((2, 3)))


def test_regressor_clips_far_extrapolation():
    X = np.linspace(0, 1, 20)[:, None]
    y = 3 * X[:, 0]
    reg = LayerTimeRegressor(extrapolation_margin=1.0).fit(X, y)
    assert reg.predict(np.array([[100.0]]))[0] == pytest.approx(y.max() + 1.0)
    assert reg.predict(np.array([[-100.0]]))[0] == pytest.approx(y.min() - 1.0)
    assert reg.booster_ is not None
    small = LayerTimeRegressor().fit(X[:4], y[:4])
    assert small.booster_ is None  # too few rows to boost
    np.testing.assert_allclose(small.predict(X[:4]), y[:4], atol=0.05)
