import numpy as np
import pytest

from scaledl.profiling.stopping import MIN_VALUES, StopRule, median_halfwidth


def test_halfwidth_shrinks_like_one_over_sqrt_n():
    rng = np.random.default_rng(0)
    small = median_halfwidth(rng.normal(100, 5, 16))
    large = median_halfwidth(rng.normal(100, 5, 256))
    assert 0 < large < small
    # Normal data: the median's half-width is about 1.96 * 1.2533 * sigma / sqrt(n).
    assert large == pytest.approx(1.96 * 1.2533 * 0.05 / 16, rel=0.35)


def test_halfwidth_needs_six_values():
    with pytest.raises(ValueError, match="need"):
        median_halfwidth([1.0] * (MIN_VALUES - 1))


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
