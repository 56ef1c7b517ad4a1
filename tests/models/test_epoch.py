import numpy as np
import pytest

from scaledl.models.epoch import EpochModel
from scaledl.models.fitted import NotFittedError


def synthetic(coef, n: int = 40, seed: int = 0, noise: float = 0.0):
    rng = np.random.default_rng(seed)
    steps = rng.integers(1, 500, size=n)
    batch = rng.choice([1, 2, 4, 8, 16], size=n)
    iteration_s = rng.uniform(0.01, 0.5, size=n)
    a, b, c = coef
    epoch_s = steps * iteration_s + a + b * steps + c * steps * batch
    return epoch_s * (1 + noise * rng.normal(size=n)), iteration_s, steps, batch


@pytest.mark.parametrize("coef", [(0.5, 0.002, 0.0003), (2.0, 0.0, 0.001), (0.0, 0.01, 0.0)])
def test_recovers_known_coefficients(coef):
    model = EpochModel().fit(*synthetic(coef))
    np.testing.assert_allclose(model.coef_, coef, atol=1e-9, rtol=1e-6)
    epoch_s, iteration_s, steps, batch = synthetic(coef, seed=1)
    np.testing.assert_allclose(model.predict(iteration_s, steps, batch), epoch_s, rtol=1e-9)


def test_noisy_data_stays_close_and_non_negative():
    model = EpochModel().fit(*synthetic((0.5, 0.002, 0.0003), n=400, noise=0.01))
    assert all(c >= 0 for c in model.coef_)
    assert model.coef_[0] == pytest.approx(0.5, rel=0.5)


def test_overhead_is_never_negative():
    # Epochs faster than steps x iteration: the overhead clips to 0, not below.
    steps, batch, iteration_s = np.array([10, 20]), np.array([2, 2]), np.array([0.1, 0.1])
    model = EpochModel().fit(steps * iteration_s * 0.5, iteration_s, steps, batch)
    assert model.coef_ == [0.0, 0.0, 0.0]
    np.testing.assert_allclose(model.predict(iteration_s, steps, batch), steps * iteration_s)


def test_predict_before_fit_and_empty_fit():
    with pytest.raises(NotFittedError, match="EpochModel.*not fitted"):
        EpochModel().predict([0.1], [10], [2])
    with pytest.raises(NotFittedError):
        EpochModel().to_dict()
    with pytest.raises(ValueError, match="no training sample"):
        EpochModel().fit([], [], [], [])


def test_round_trip():
    model = EpochModel().fit(*synthetic((0.5, 0.002, 0.0003)))
    again = EpochModel.from_dict(model.to_dict())
    assert again.coef_ == model.coef_
    np.testing.assert_array_equal(again.predict([0.2], [30], [4]), model.predict([0.2], [30], [4]))
