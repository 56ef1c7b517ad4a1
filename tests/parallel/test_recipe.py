"""The recipe's correction is the evaluation's ridge, applied from its saved coefficients."""

import numpy as np
from sklearn.linear_model import Ridge
from tiny_specs import tiny

from scaledl.parallel.predict import LayoutPredictions
from scaledl.parallel.recipe import CORRECTION_FEATURES, correction_features
from scaledl.parallel.training import fit_correction


def predictions(n: int, seed: int) -> LayoutPredictions:
    rng = np.random.default_rng(seed)
    it = rng.uniform(50, 150, n)
    return LayoutPredictions(it, it, rng.uniform(0, 0.4, n), rng.uniform(0, 5, n),
                             rng.uniform(1, 9, n), [()] * n)  # fmt: skip


def test_correction_equals_the_ridge_it_was_fitted_as():
    ws = [tiny("bert", num_layers=2, world_size=2, sharding=s)
          for s in ("none", "zero1", "zero2", "fsdp")] * 3  # fmt: skip
    pred = predictions(len(ws), 0)
    measured = pred.iteration_ms * np.random.default_rng(1).uniform(0.8, 1.3, len(ws))
    train = np.arange(len(ws)) % 3 != 0
    correction = fit_correction(pred, ws, measured, train)
    x = correction_features(pred, ws)
    assert x.shape == (len(ws), len(CORRECTION_FEATURES))
    ridge = Ridge(alpha=1.0).fit(x[train], np.log(measured / pred.iteration_ms)[train])
    np.testing.assert_array_equal(
        correction.apply(pred, ws), pred.iteration_ms * np.exp(ridge.predict(x))
    )
    assert len(correction.coef) == len(CORRECTION_FEATURES)
