import numpy as np
import pandas as pd
import pytest

from scaledl.evaluation.reference import (
    ReferenceConfig,
    _halving_against_full,
    _stratified_test,
    kfold_splits,
    ood_summary,
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
    met = {t.name: t.met for t in target_checks(result)}
    assert list(met.values()) == [True, False, False, True, False, None]


def test_target_checks_without_a_figure_say_not_evaluated():
    rows = target_checks({})
    assert [r.met for r in rows] == [None] * 6
    assert {r.measured for r in rows} == {"not evaluated"}


def _lofo_predictions(
    sigmas: dict[str, float], n: int = 12, seed: int = 0, identical: bool = False
) -> pd.DataFrame:
    """Leave-one-family-out rows of two seeds of ScaleDL and one of additive.

    ``identical``: every family has the same errors (each is then covered at least 90%).
    """
    rng = np.random.default_rng(seed)
    parts = []
    for family, sigma in sigmas.items():
        if identical:
            rng = np.random.default_rng(seed)
        true = np.exp(rng.uniform(-4, 0, n))
        for method, seeds in (("scaledl", (0, 1)), ("additive", (0,))):
            for s in seeds:
                pred = true * np.exp(rng.normal(0, sigma, n))
                parts.append(pd.DataFrame({
                    "split": f"ood/{family}", "method": method, "seed": s,
                    "workload_id": [f"{family}-{i}" for i in range(n)], "family": family,
                    "true_iteration_s": true, "pred_iteration_s": pred,
                    "true_epoch_s": 3 * true, "pred_epoch_s": 3 * pred,
                }))  # fmt: skip
    return pd.concat(parts, ignore_index=True)


def test_ood_summary_reports_each_left_out_family_coverage_and_the_target():
    sigmas = {f"f{i}": 0.1 for i in range(11)} | {"bad": 1.0}
    pred = _lofo_predictions(sigmas)
    ood = ood_summary(pred, ReferenceConfig())
    iv = ood["intervals"]
    assert iv["coverage"] == 0.9 and set(iv["per_family"]) == set(sigmas)
    bad = iv["per_family"]["bad"]["scaledl"]["iteration"]
    assert bad["n"] == 12 and bad["calibration_families"] == 11  # mean over the two seeds
    assert bad["coverage"] < 0.8 and bad["coverage_ci_low"] < bad["coverage"]
    new = iv["new_family"]["scaledl"]
    assert new["families"] == 12 and new["low_factor"] * new["high_factor"] == pytest.approx(1)
    assert new["relative_width"] == pytest.approx(new["high_factor"] - new["low_factor"])
    row = target_checks({"out_of_distribution": ood})[-1]
    assert row.met is False and row.value == bad["coverage"]
    same = _lofo_predictions({f"f{i}": 0.1 for i in range(12)}, identical=True)
    good = ood_summary(same, ReferenceConfig())
    assert target_checks({"out_of_distribution": good})[-1].met is True


def test_too_few_families_never_meet_the_interval_target():
    ood = ood_summary(_lofo_predictions({f"f{i}": 0.1 for i in range(2)}), ReferenceConfig())
    iv = ood["intervals"]
    assert all(v["scaledl"]["iteration"]["coverage"] == 1.0 for v in iv["per_family"].values())
    new = iv["new_family"]["scaledl"]
    assert new["high_factor"] is None and new["family_calibration"] == "unbounded"  # 2 families
    row = target_checks({"out_of_distribution": ood})[-1]
    assert row.value == 1.0 and row.met is False


def test_five_families_are_bounded_by_the_normal_prediction_bound():
    ood = ood_summary(_lofo_predictions({f"f{i}": 0.1 for i in range(5)}), ReferenceConfig())
    iv = ood["intervals"]
    new = iv["new_family"]["scaledl"]
    assert new["family_calibration"] == "normal_prediction_bound" and new["high_factor"] > 1
    for by in iv["per_family"].values():
        s = by["scaledl"]["iteration"]
        assert s["family_calibration"] == "normal_prediction_bound" and s["n_unbounded"] == 0


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
