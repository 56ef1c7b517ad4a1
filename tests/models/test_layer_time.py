import numpy as np
import pandas as pd
import pytest

from scaledl.models.layer_time import LayerTimeModel, LayerwisePredictor, layer_features
from scaledl.models.layerwise import LayerTimeRegressor, LayerwiseModel, layer_time_models


def work_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Work features (FLOPs, operators, bytes, parameters) and noisy times (ms)."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(1e5, 1e10, n), rng.integers(1, 60, n),
                         rng.uniform(1e3, 1e8, n), rng.uniform(0, 1e7, n)])  # fmt: skip
    y = 1e-8 * X[:, 0] + 0.004 * X[:, 1] + 1e-7 * X[:, 2]
    return X, y * np.exp(rng.normal(0, 0.3, n))


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"n_estimators": 0},
        {"max_depth": 4, "n_estimators": 50, "learning_rate": 0.3},
        {"relative": False, "random_state": 3},
    ],  # fmt: skip
)
def test_the_numpy_model_predicts_exactly_what_the_regressor_does(params):
    X, y = work_data(300, 0)
    regressor = LayerTimeRegressor(**params).fit(X, y)
    model = regressor.to_model()
    assert (model.booster_ is None) == (regressor.booster_ is None)
    rng = np.random.default_rng(1)
    wide = np.column_stack([rng.uniform(0, 1e12, 2000), rng.integers(0, 500, 2000),
                            rng.uniform(0, 1e10, 2000), rng.uniform(0, 1e9, 2000)])  # fmt: skip
    # thresholds themselves (ties go left), float32-rounded neighbours, training rows
    for Z in (X, wide, X[:1], np.zeros((3, 4))):
        np.testing.assert_array_equal(model.predict(Z), regressor.predict(Z))


def test_ties_at_a_threshold_go_left_as_in_scikit_learn():
    X, y = work_data(200, 2)
    regressor = LayerTimeRegressor(max_depth=3).fit(X, y)
    model = regressor.to_model()
    split = model.booster_.children_left != -1
    # inputs whose log1p lands on (float32-rounded) split thresholds
    at = np.expm1(model.booster_.threshold[split].astype(np.float32).astype(np.float64))
    Z = np.tile(X[:1], (len(at), 1))
    Z[:, model.booster_.feature[split][0]] = at
    np.testing.assert_array_equal(model.predict(Z), regressor.predict(Z))


def test_a_wrong_width_or_a_nan_is_an_error():
    X, y = work_data(50, 0)
    model = LayerTimeRegressor(n_estimators=0).fit(X, y).to_model()
    with pytest.raises(ValueError, match=r"shape \(2, 3\), expected \(n, 4\)"):
        model.predict(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"X row 1 is not finite: \[1.0, nan, 1.0, 1.0\]"):
        model.predict(np.array([[1.0] * 4, [1.0, np.nan, 1.0, 1.0]]))


def nodes(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "layer_type": rng.choice(["attention", "feed-forward", "norm"], n),
        "fwd_flops": rng.uniform(1e5, 1e9, n), "bwd_flops": rng.uniform(2e5, 2e9, n),
        "fwd_ops": rng.integers(1, 40, n).astype(float), "input_bytes": rng.uniform(1e3, 1e7, n),
        "output_bytes": rng.uniform(1e3, 1e7, n), "params": rng.uniform(0, 1e6, n),
    })  # fmt: skip
    frame["forward_ms"] = 1e-8 * frame["fwd_flops"] + 0.003 * frame["fwd_ops"] + 0.01
    frame["backward_ms"] = 2 * frame["forward_ms"]
    return frame


def test_the_layerwise_predictor_predicts_what_the_fitted_model_does():
    train = nodes(120, 0)
    fitted = LayerwiseModel(min_samples=50).fit(train)
    loaded = LayerwisePredictor(
        layer_time_models(fitted.models_), band_=fitted.band_, min_samples=50
    )
    assert all(isinstance(m, LayerTimeModel) for p in loaded.models_.values() for m in p.values())
    query = nodes(500, 1)
    query.loc[query.index[:5], "layer_type"] = "pooler"  # unseen: the generic pair
    query["train"] = np.r_[np.zeros(10), np.ones(490)]
    pd.testing.assert_frame_equal(loaded.predict(query), fitted.predict(query))
    expected = fitted.models_["*"]["forward"].predict(layer_features(query.iloc[:5]))
    np.testing.assert_array_equal(
        loaded.models_["*"]["forward"].predict(layer_features(query.iloc[:5])), expected
    )
