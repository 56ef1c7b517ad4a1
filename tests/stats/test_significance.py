import numpy as np
import pytest

from scaledl.stats.significance import paired_comparison, verdict_of


def _pairs(difference: float, n: int = 40, noise: float = 0.02, seed: int = 1):
    """Errors of B around 20% and A = B + difference + small paired noise."""
    rng = np.random.default_rng(seed)
    b = rng.uniform(0.05, 0.35, n)
    a = np.clip(b + difference + rng.normal(0.0, noise, n), 0.0, None)
    return a, b


def test_known_lower_error_is_better_and_the_interval_holds_the_difference():
    a, b = _pairs(-0.05)
    result = paired_comparison(a, b, "scaledl", "additive")
    assert result.verdict == "better"
    assert result.ci_low < -0.05 < result.ci_high < 0
    assert result.mre_difference == pytest.approx(np.mean(a) - np.mean(b))
    assert result.mre_a == pytest.approx(np.mean(a)) and result.n_units == 40
    assert result.unit == "workload"
    assert result.interval_method == "BCa" and result.confidence_level == 0.95
    assert "scaledl vs additive" in result.describe() and result.describe().endswith("better")


def test_known_higher_error_is_worse():
    a, b = _pairs(+0.04)
    assert paired_comparison(a, b).verdict == "worse"
    assert paired_comparison(b, a).verdict == "better"


def test_no_difference_is_not_distinguishable():
    a, b = _pairs(0.0, noise=0.03)
    result = paired_comparison(a, b)
    assert result.verdict == "not distinguishable"
    assert result.ci_low < 0 < result.ci_high


def test_pairing_resolves_a_shift_that_unpaired_spread_would_hide():
    # Workload errors spread over 5%..35% while A is 1 point better on every workload: the
    # paired interval excludes 0 although the two MREs' own spreads overlap widely.
    a, b = _pairs(-0.01, noise=0.002)
    assert np.std(b) > 0.05
    assert paired_comparison(a, b).verdict == "better"


def test_repeats_are_pooled_per_workload():
    a, b = _pairs(-0.05, n=20)
    rng = np.random.default_rng(3)
    seeds = np.clip(a + rng.normal(0.0, 0.01, (3, a.size)), 0.0, None)
    result = paired_comparison(seeds, b)
    assert (result.n_repeats_a, result.n_repeats_b) == (3, 1)
    assert result.mre_a == pytest.approx(seeds.mean())
    assert result.verdict == "better"


def test_same_inputs_and_seed_give_the_same_interval():
    a, b = _pairs(-0.01, noise=0.03)
    first, second = paired_comparison(a, b, seed=7), paired_comparison(a, b, seed=7)
    assert (first.ci_low, first.ci_high) == (second.ci_low, second.ci_high)


def test_identical_differences_give_an_exact_interval():
    b = np.linspace(0.1, 0.3, 10)
    result = paired_comparison(b - 0.02, b)
    assert result.interval_method == "exact"
    assert result.ci_low == result.ci_high == pytest.approx(-0.02)
    assert result.verdict == "better"
    assert paired_comparison(b, b).verdict == "not distinguishable"


def test_two_workloads_fall_back_to_the_percentile_interval():
    result = paired_comparison([0.1, 0.3], [0.2, 0.25])
    assert result.interval_method in ("BCa", "percentile")
    assert np.isfinite([result.ci_low, result.ci_high]).all()


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ([0.1, 0.2, 0.3], [0.1, 0.2], "same workloads"),
        ([0.1], [0.2], "at least 2"),
        ([0.1, np.nan], [0.1, 0.2], "finite"),
        ([0.1, -0.2], [0.1, 0.2], ">= 0"),
        ([[[0.1]]], [0.1], "shape"),
    ],
)
def test_bad_input_is_an_error_naming_the_problem(a, b, message):
    with pytest.raises(ValueError, match=message):
        paired_comparison(a, b)


def test_confidence_level_must_be_a_probability():
    with pytest.raises(ValueError, match="confidence_level"):
        paired_comparison([0.1, 0.2], [0.2, 0.1], confidence_level=95)


def test_verdict_of_interval():
    assert verdict_of(-0.2, -0.01) == "better"
    assert verdict_of(0.01, 0.2) == "worse"
    assert verdict_of(-0.01, 0.01) == "not distinguishable"
