import numpy as np
import pytest
from scipy.stats import trim_mean
from scipy.stats.mstats import trimmed_mean_ci

from scaledl.profiling.stopping import (
    MIN_VALUES,
    TRIM,
    StopRule,
    label_halfwidth,
    label_statistic,
    trimmed_mean_interval,
)


def test_halfwidth_shrinks_like_one_over_sqrt_n():
    rng = np.random.default_rng(0)
    small = label_halfwidth(rng.normal(100, 5, 16))
    large = label_halfwidth(rng.normal(100, 5, 256))
    assert 0 < large < small
    # Normal data: the (lightly trimmed) mean's half-width is about 1.96 * sigma / sqrt(n).
    assert large == pytest.approx(1.96 * 0.05 / 16, rel=0.25)


def test_label_is_a_trimmed_mean_robust_to_a_hiccup_and_smooth_when_bimodal():
    steps = [10.0] * 19 + [1000.0]  # one step an OS hiccup made 100x slower
    assert label_statistic(steps) == pytest.approx(10.0)
    # Two modes (3 ms and 7 ms): moving a few steps between them moves the label a little,
    # where the median would jump from one mode to the other.
    a = label_statistic([3.0] * 11 + [7.0] * 9)
    b = label_statistic([3.0] * 9 + [7.0] * 11)
    assert abs(b - a) / a < 0.2 and float(np.median([3.0] * 9 + [7.0] * 11)) == 7.0
    with pytest.raises(ValueError):
        label_statistic([])


def test_halfwidth_needs_six_values():
    with pytest.raises(ValueError, match="need"):
        label_halfwidth([1.0] * (MIN_VALUES - 1))


def test_stop_rule_stops_when_precise():
    rule = StopRule(target_rel_halfwidth=0.01, min_steps=8, max_steps=100, budget_s=10.0)
    steady = [10.0, 10.01, 9.99, 10.0, 10.02, 9.98, 10.0, 10.01]
    assert rule.reason_to_stop(steady, elapsed_s=0.1) == "precise"
    assert rule.reason_to_stop(steady[:7], elapsed_s=0.1) is None  # below min_steps


def test_stop_rule_keeps_measuring_noisy_steps_until_budget_or_max():
    rng = np.random.default_rng(1)
    noisy = list(rng.normal(10, 2, 40))
    rule = StopRule(target_rel_halfwidth=0.01, min_steps=8, max_steps=60, budget_s=5.0)
    assert rule.reason_to_stop(noisy, elapsed_s=1.0) is None
    assert rule.reason_to_stop(noisy, elapsed_s=5.0) == "budget"
    assert rule.reason_to_stop(list(rng.normal(10, 2, 60)), elapsed_s=1.0) == "max_steps"


def test_stop_rule_rejects_bad_settings():
    with pytest.raises(ValueError, match="min_steps"):
        StopRule(min_steps=4)
    with pytest.raises(ValueError, match="min_steps"):
        StopRule(min_steps=20, max_steps=10)
    with pytest.raises(ValueError, match="budget_s"):
        StopRule(budget_s=0)


@pytest.mark.parametrize("n", [1, 2, 6, 19, 20, 21, 40, 57, 400])
def test_label_and_interval_are_scipys_arithmetic(n):
    """The label is scipy's trim_mean bit for bit; the interval its trimmed_mean_ci (1e-12)."""
    rng = np.random.default_rng(n)
    for values in (rng.lognormal(1.0, 0.3, n), np.round(rng.normal(5.0, 1.0, n), 1)):
        assert label_statistic(values) == float(trim_mean(values, TRIM))
        if n >= 2:
            want = trimmed_mean_ci(values, limits=(TRIM, TRIM), alpha=0.05)
            np.testing.assert_allclose(trimmed_mean_interval(values), want, rtol=1e-12)
            wide = trimmed_mean_ci(values, limits=(TRIM, TRIM), alpha=0.2)
            np.testing.assert_allclose(trimmed_mean_interval(values, 0.8), wide, rtol=1e-12)
