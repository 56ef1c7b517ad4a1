import numpy as np
import pandas as pd
import pytest

from scaledl.evaluation.reference import (
    _halving_against_full,
    _stratified_test,
    kfold_splits,
    target_checks,
)


def _labels(per_family: int = 6) -> pd.DataFrame:
    families = ["bert", "vit", "hf:gpt2"]
    return pd.DataFrame(
        {
            "workload_id": [f"{f}-{i}" for f in families for i in range(per_family)],
            "family": [f for f in families for _ in range(per_family)],
        }
    )


def test_kfold_tests_every_workload_exactly_once_and_never_trains_on_it():
    labels = _labels()
    splits = kfold_splits(labels, folds=3, seed=0)
    tested = [w for s in splits for w in s.test_ids]
    assert sorted(tested) == sorted(labels["workload_id"])
    for s in splits:
        assert not set(s.train_ids) & set(s.test_ids)
        assert set(s.val_ids) <= set(s.train_ids)
        # stratified: every family in every test fold
        assert {w.rsplit("-", 1)[0] for w in s.test_ids} == {"bert", "vit", "hf:gpt2"}


def test_kfold_with_more_folds_than_a_family_has_workloads_is_an_error():
    with pytest.raises(ValueError):
        kfold_splits(_labels(per_family=2), folds=5, seed=0)


def test_stratified_test_takes_the_share_of_every_family():
    test = _stratified_test(_labels(per_family=8), 0.25, seed=1)
    assert len(test) == 6
    assert {w.rsplit("-", 1)[0] for w in test} == {"bert", "vit", "hf:gpt2"}


def _comparison(a: str, b: str, mean: float, low: float, high: float) -> dict:
    return {"method_a": a, "method_b": b, "mre_difference": mean, "ci_low": low, "ci_high": high}


def test_target_checks_read_the_intervals_and_say_met_or_missed():
    result = {
        "learning_curves": {
            "samplers": {"random": {"sizes": [10, 20, 40]}},
            "comparisons": [
                _comparison("doptimal@10", "random@10", -0.02, -0.03, -0.01),
                _comparison("doptimal@20", "random@20", -0.01, -0.02, 0.005),
            ],
            "halving_full": _comparison("doptimal@20", "pool@40", 0.01, 0.002, 0.02),
        },
        "sequential": {"comparison": _comparison("sequential", "random", -0.01, -0.02, -0.001)},
        "out_of_distribution": {"mean_mre": {"scaledl": 0.09}},
    }
    met = {t["name"]: t["met"] for t in target_checks(result)}
    assert list(met.values()) == [True, False, False, True, False]


def test_target_checks_without_a_figure_say_not_evaluated():
    rows = target_checks({})
    assert [r["met"] for r in rows] == [None] * 5


def test_halving_pairs_doptimal_at_half_with_the_whole_pool_of_the_same_seed():
    rng = np.random.default_rng(0)
    full = list(0.10 + 0.01 * rng.standard_normal(10))
    curves = {
        "pool_size": 40,
        "samplers": {
            "doptimal": {
                "sizes": [10, 20, 40],
                "mre_per_seed": [[0.2] * 10, [m + 0.05 for m in full], full],
            },
            "random": {"sizes": [10, 20, 40], "mre_per_seed": [[0.2] * 10, [0.15] * 10, full]},
        },
    }
    record = _halving_against_full(curves)
    assert record["method_a"] == "doptimal@20" and record["method_b"] == "pool@40"
    assert record["mre_difference"] == pytest.approx(0.05)
    assert record["ci_low"] > 0
