import numpy as np
import pandas as pd
import pytest

from scaledl.stats.metrics import (
    error_summary,
    mean_metrics,
    prediction_metrics,
    relative_errors,
    scale_factor,
)


def test_error_summary_known_values():
    true = np.array([1.0, 2.0, 4.0, 10.0])
    pred = np.array([1.1, 1.0, 4.0, 13.0])
    s = error_summary(pred, true)
    re = np.array([0.1, 0.5, 0.0, 0.3])
    assert s["mre"] == pytest.approx(0.225)
    assert s["rmse_s"] == pytest.approx(np.sqrt((0.01 + 1.0 + 0.0 + 9.0) / 4))
    assert s["p50_re"] == pytest.approx(0.2)
    assert s["p90_re"] == pytest.approx(np.percentile(re, 90))
    assert s["p90_re"] == pytest.approx(0.44)
    assert s["n"] == 4


def test_relative_errors_rejects_bad_input():
    with pytest.raises(ValueError, match="positive"):
        relative_errors([1.0], [0.0])
    with pytest.raises(ValueError, match="not finite"):
        relative_errors([np.nan], [1.0])
    with pytest.raises(ValueError, match="shapes"):
        relative_errors([1.0, 2.0], [1.0])


def test_prediction_metrics_per_family_and_mean():
    frame = pd.DataFrame(
        {
            "family": ["a", "a", "b"],
            "true_iteration_s": [1.0, 1.0, 2.0],
            "pred_iteration_s": [1.5, 1.0, 1.0],
            "true_epoch_s": [10.0, 10.0, 20.0],
            "pred_epoch_s": [10.0, 10.0, 30.0],
        }
    )
    m = prediction_metrics(frame)
    assert m["iteration"]["mre"] == pytest.approx((0.5 + 0 + 0.5) / 3)
    assert m["epoch"]["mre"] == pytest.approx(0.5 / 3)
    assert m["per_family"]["a"]["iteration"]["mre"] == pytest.approx(0.25)
    assert m["per_family"]["b"]["epoch"]["mre"] == pytest.approx(0.5)
    assert set(m) == {"iteration", "epoch", "per_family"}
    avg = mean_metrics([m["per_family"]["a"], m["per_family"]["b"]])
    assert avg["iteration"]["mre"] == pytest.approx(0.375) and avg["n_groups"] == 2


def test_scale_factor_is_the_geometric_mean_of_measured_over_predicted():
    assert scale_factor(np.array([1.0, 2.0]), np.array([2.0, 8.0])) == pytest.approx(
        np.sqrt(2.0 * 4.0)
    )
    assert scale_factor(np.array([3.0]), np.array([1.5])) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="positive and finite"):
        scale_factor(np.array([0.0]), np.array([1.0]))
    with pytest.raises(ValueError, match="known rows"):
        scale_factor(np.array([]), np.array([]))
