import json

import numpy as np
import pandas as pd
import pytest

from scaledl.models.intervals import (
    FAMILY_RULE,
    STRATA,
    CalibrationError,
    IntervalCalibration,
    conformal_half_width,
    conformal_half_widths,
    conformal_min_scores,
    family_conformal_half_width,
    family_half_width,
    family_scores,
    log_residuals,
    normal_prediction_bound,
    stratum_of_split,
)


def synthetic(rng, n, sigma):
    """A regression with known multiplicative noise: true = pred * exp(N(0, sigma))."""
    pred = np.exp(rng.uniform(-5, 0, n))
    return pred, pred * np.exp(rng.normal(0.0, sigma, n))


def test_coverage_on_a_synthetic_regression_with_known_noise():
    rng = np.random.default_rng(0)
    sigma = 0.2
    pred, true = synthetic(rng, 400, sigma)
    q = conformal_half_width(log_residuals(pred, true), 0.9)
    # The 90% half-width of |N(0, sigma)| is 1.645 sigma.
    assert q == pytest.approx(1.645 * sigma, rel=0.12)
    covered = []
    for _ in range(200):  # fresh test sets: coverage is a mean over calibration draws too
        cal_pred, cal_true = synthetic(rng, 50, sigma)
        q = conformal_half_width(log_residuals(cal_pred, cal_true), 0.9)
        test_pred, test_true = synthetic(rng, 20, sigma)
        covered.append(np.abs(log_residuals(test_pred, test_true)) <= q)
    coverage = np.mean(covered)
    # Split conformal: 0.9 <= E[coverage] <= 0.9 + 1 / (n + 1); 4000 test points.
    assert 0.885 <= coverage <= 0.93


def test_mondrian_strata_are_calibrated_separately():
    rng = np.random.default_rng(1)
    small = rng.normal(0, 0.05, 500)
    large = rng.normal(0, 0.5, 500)
    widths = conformal_half_widths(
        np.concatenate([small, large]), np.array(["a"] * 500 + ["b"] * 500), 0.9
    )
    assert widths["a"] == pytest.approx(1.645 * 0.05, rel=0.15)
    assert widths["b"] == pytest.approx(1.645 * 0.5, rel=0.15)


def test_too_few_residuals_give_an_unbounded_interval():
    assert conformal_half_width(np.array([0.1, 0.2, 0.3]), 0.9) == np.inf
    assert np.isfinite(conformal_half_width(np.linspace(0, 1, 20), 0.9))
    with pytest.raises(CalibrationError, match="coverage"):
        conformal_half_width(np.array([0.1]), 1.5)


#: Twelve left-out families: enough for a finite 90% family-conformal interval (10 needed).
OOD_SPLITS = tuple((f"ood/f{i}", 0.4) for i in range(12))


def test_family_conformal_quantile_by_hand():
    residuals = np.array([0.1, -0.2, 0.3, 0.4, 0.5, 0.05, -0.25, 0.1, 0.6, 0.7, 0.9, -0.8])
    families = np.array(list("aaaabbcdddee"))
    # Per-family 50% score: the ceil(0.5 n_k)-th smallest |r|.
    assert family_scores(residuals, families, 0.5) == pytest.approx(
        {"a": 0.2, "b": 0.05, "c": 0.25, "d": 0.6, "e": 0.8}
    )
    # K = 5 families: the ceil(0.5 * 6) = 3rd smallest family score.
    assert family_conformal_half_width(residuals, families, 0.5) == pytest.approx(0.25)
    # Pooling the 12 workloads instead gives the 7th smallest |r|: 0.4.
    assert conformal_half_width(residuals, 0.5) == pytest.approx(0.4)
    # 90%: the ceil(0.9 (n + 1))-th smallest of n scores. 8 families are too few (the 9th of
    # 8), 9 give the largest score (the 9th); 19 scores the 18th and 99 the 90th (crepes alone
    # takes the 19th and the 91st: its index int((1 - 0.9) * 20) truncates 1.9999999999999996).
    eight = np.repeat(np.arange(8), 2).astype(str)
    assert family_conformal_half_width(np.linspace(0.1, 1.6, 16), eight, 0.9) == np.inf
    nine = np.repeat(np.arange(9), 2).astype(str)
    assert family_conformal_half_width(np.linspace(0.1, 1.8, 18), nine, 0.9) == pytest.approx(1.8)
    assert conformal_half_width(np.arange(1.0, 20.0), 0.9) == pytest.approx(18.0)
    assert conformal_half_width(np.arange(1.0, 100.0), 0.9) == pytest.approx(90.0)
    with pytest.raises(CalibrationError, match="one label per residual"):
        family_scores(residuals, families[:3], 0.5)
    with pytest.raises(CalibrationError, match="coverage"):
        family_scores(residuals, families, 1.0)


def test_each_family_counts_once_however_large():
    # One family of 300 workloads with tiny errors and ten of 2 with large ones: pooled
    # workloads would calibrate the big family; one score per family calibrates a new family.
    big = np.full(300, 0.01)
    small = np.linspace(0.5, 1.0, 20)
    residuals = np.concatenate([big, small])
    families = np.array(["big"] * 300 + [str(i) for i in np.repeat(np.arange(10), 2)])
    assert conformal_half_width(residuals, 0.9) == pytest.approx(0.01)
    assert family_conformal_half_width(residuals, families, 0.9) == pytest.approx(1.0)


def test_conformal_minimum_is_where_crepes_becomes_finite():
    assert conformal_min_scores(0.9) == 9 and conformal_min_scores(0.8) == 4
    for coverage in (0.5, 0.8, 0.9, 0.95):
        n = conformal_min_scores(coverage)
        assert np.isfinite(conformal_half_width(np.ones(n), coverage))
        if n > 1:
            assert conformal_half_width(np.ones(n - 1), coverage) == np.inf
    with pytest.raises(CalibrationError, match="coverage"):
        conformal_min_scores(1.0)


def test_normal_prediction_bound_by_hand():
    # K = 4 families of one residual each: scores 0.1, 0.2, 0.4, 0.8, logs log(0.1) + (0..3) log 2.
    residuals, families = np.array([0.1, -0.2, 0.4, -0.8]), np.array(list("abcd"))
    # mean log(0.1) + 1.5 log 2, sd log 2 * sqrt(5/3); t(0.90; 3 df) = 1.638 (t table).
    spread = 1.638 * np.log(2) * np.sqrt(5 / 3) * np.sqrt(1 + 1 / 4)
    expected = 0.1 * 2**1.5 * np.exp(spread)
    assert expected == pytest.approx(1.456, abs=1e-3)
    width = family_half_width(residuals, families, 0.9)
    assert width.method == "normal_prediction_bound" and width.families == 4
    assert width.half_width == pytest.approx(expected, rel=1e-3)
    assert "4 families, fewer than the 9" in width.reason
    assert normal_prediction_bound(np.array([0.1, 0.2, 0.4, 0.8]), 0.9) == width.half_width
    # Equal scores: no spread, the bound is the score.
    assert normal_prediction_bound(np.full(3, 0.3), 0.9) == pytest.approx(0.3)
    with pytest.raises(CalibrationError, match="finite and > 0"):
        normal_prediction_bound(np.array([0.0, 0.2, 0.4]), 0.9)
    with pytest.raises(CalibrationError, match="1 scores, at least 2"):
        normal_prediction_bound(np.array([0.2]), 0.9)


def test_too_few_families_for_the_normal_bound_stay_unbounded_with_the_reason():
    width = family_half_width(np.array([0.1, 0.3]), np.array(["a", "b"]), 0.9)
    assert width.half_width == np.inf and width.method == "unbounded" and width.families == 2
    assert width.reason == (
        "2 families, fewer than the 9 the conformal quantile needs at 90% and the 3 the "
        "normal prediction bound needs"
    )
    # A calibration written before the normal bound keeps its rule: conformal or unbounded.
    old = family_half_width(np.array([0.1, -0.2, 0.4, -0.8]), np.array(list("abcd")), 0.9,
                            rule="conformal")  # fmt: skip
    assert (
        old.half_width == np.inf and old.method == "unbounded" and "rule 'conformal'" in old.reason
    )
    with pytest.raises(CalibrationError, match="family rule 'x'"):
        family_half_width(np.array([0.1]), np.array(["a"]), 0.9, rule="x")


def test_enough_families_keep_the_conformal_quantile():
    rng = np.random.default_rng(4)
    for k in (9, 13):  # the conformal minimum at 90%, and the reference dataset's 13
        families = np.repeat(np.arange(k), 5).astype(str)
        residuals = rng.normal(0, 0.2, 5 * k)
        width = family_half_width(residuals, families, 0.9)
        assert width.method == "conformal" and width.families == k
        assert width.half_width == family_conformal_half_width(residuals, families, 0.9)
    # Eight families at 90% are below the conformal minimum: the normal bound, never a silent
    # swap.
    eight = np.repeat(np.arange(8), 2).astype(str)
    width = family_half_width(np.linspace(0.1, 1.6, 16), eight, 0.9)
    assert width.method == "normal_prediction_bound" and np.isfinite(width.half_width)


def _five_families():
    """Residuals of 30 in-domain rows and of 5 left-out families of 8 rows, both targets."""
    rng = np.random.default_rng(5)
    families = np.repeat([f"f{i}" for i in range(5)], 8)
    residuals = {
        t: {"in_domain": rng.normal(0, 0.05, 30), "unseen_family": rng.normal(0, 0.3, 40)}
        for t in ("iteration", "epoch")
    }
    by_target = {t: {"unseen_family": families} for t in residuals}
    return residuals, families, by_target


def test_few_families_record_the_normal_bound_in_the_calibration(tmp_path):
    residuals, families, by_target = _five_families()
    cal = IntervalCalibration(residuals, "scaledl", "", "few", by_target)
    assert cal.family_rule == FAMILY_RULE
    methods = cal.methods("iteration", 0.9)
    assert methods["in_domain"].method == "conformal" and methods["in_domain"].families == 0
    unseen = methods["unseen_family"]
    assert unseen.method == "normal_prediction_bound" and unseen.families == 5
    expected = family_half_width(residuals["iteration"]["unseen_family"], families, 0.9)
    assert unseen.half_width == expected.half_width
    _, _, q = cal.interval("iteration", np.ones(3), ["in_domain", "unseen_family", "widest"], 0.9)
    assert q[1] == q[2] == expected.half_width
    assert cal.basis_methods("iteration", ["in_domain", "unseen_family", "widest"], 0.9) == [
        "conformal", "normal_prediction_bound", "normal_prediction_bound"
    ]  # fmt: skip
    assert cal.row_methods(["in_domain", "unseen_family"], 0.9) == [
        "conformal", "normal_prediction_bound"
    ]  # fmt: skip
    # The rule travels in the file; a file written before it (no key) reads as 'conformal'.
    back = IntervalCalibration.read(cal.write(tmp_path / "calibration.json"))
    assert back.family_rule == FAMILY_RULE
    assert back.methods("iteration", 0.9)["unseen_family"] == unseen
    data = json.loads((tmp_path / "calibration.json").read_text())
    assert data["family_rule"] == FAMILY_RULE
    old = IntervalCalibration.from_dict({k: v for k, v in data.items() if k != "family_rule"})
    assert old.family_rule == "conformal"
    assert old.methods("iteration", 0.9)["unseen_family"].method == "unbounded"
    assert old.half_widths("iteration", 0.9)["unseen_family"] == np.inf
    with pytest.raises(CalibrationError, match="field 'family_rule' \\(value 'x'\\)"):
        IntervalCalibration.from_dict({**data, "family_rule": "x"}, "f")
    with pytest.raises(CalibrationError, match="family rule 'x'"):
        IntervalCalibration(residuals, family_rule="x")


def test_an_older_calibration_says_why_the_new_family_interval_is_unbounded():
    residuals, families, by_target = _five_families()
    old = IntervalCalibration(residuals, "scaledl", "", "old", by_target, family_rule="conformal")
    lines = old.unbounded_reasons({"in_domain": 3, "unseen_family": 2, "widest": 1}, 0.9)
    assert lines == [
        "iteration and epoch intervals unbounded for 3 rows (stratum unseen_family): 5 "
        "families, fewer than the 9 the conformal quantile needs at 90% (family rule "
        "'conformal': a calibration written before the normal prediction bound, which a "
        "predictor fitted now uses from 3 families)"
    ]
    assert old.unbounded_reasons({"in_domain": 3}, 0.9) == []
    # The same residuals under the current rule are bounded: no line.
    new = IntervalCalibration(residuals, "scaledl", "", "new", by_target)
    assert new.unbounded_reasons({"in_domain": 3, "unseen_family": 2}, 0.9) == []


def predictions(n=30, seed=2):
    rng = np.random.default_rng(seed)
    rows = []
    for split, sigma in (("id", 0.05), *OOD_SPLITS, ("extrapolation", 0.2)):
        for method in ("scaledl", "additive"):
            pred, true = synthetic(rng, n, sigma)
            rows.append(
                pd.DataFrame(
                    {
                        "split": split,
                        "method": method,
                        "workload_id": [f"{split}{i}" for i in range(n)],
                        "family": split.split("/")[-1],
                        "true_iteration_s": true,
                        "pred_iteration_s": pred,
                        "true_epoch_s": 10 * true,
                        "pred_epoch_s": 10 * pred,
                    }
                )
            )
    return pd.concat(rows, ignore_index=True)


def test_from_predictions_maps_splits_to_strata():
    frame = predictions()
    cal = IntervalCalibration.from_predictions(frame, "scaledl", "abc", "p.parquet")
    assert cal.sizes() == {
        t: {"in_domain": 30, "unseen_family": 360, "beyond_range": 30}
        for t in ("iteration", "epoch")
    }
    assert sorted(set(cal.families["iteration"]["unseen_family"])) == sorted(
        s[4:] for s, _ in OOD_SPLITS
    )
    widths = cal.half_widths("iteration", 0.9)
    assert widths["in_domain"] < widths["beyond_range"] < widths["unseen_family"]
    by = cal.residuals["iteration"]
    fam = cal.families["iteration"]["unseen_family"]
    assert widths["unseen_family"] == family_conformal_half_width(by["unseen_family"], fam, 0.9)
    assert widths["unseen_family"] > conformal_half_width(by["unseen_family"], 0.9)
    with pytest.raises(CalibrationError, match="no prediction of 'nope'"):
        IntervalCalibration.from_predictions(frame, "nope")
    assert stratum_of_split("ood/t5") == "unseen_family"
    with pytest.raises(CalibrationError, match="not an evaluation split"):
        stratum_of_split("sweep")


def test_out_of_domain_intervals_are_never_narrower():
    cal = IntervalCalibration.from_predictions(predictions(), "scaledl")
    widths = cal.half_widths("iteration", 0.9)
    pred = np.ones(len(STRATA) + 1)
    low, high, q = cal.interval("iteration", pred, [*STRATA, "widest"], 0.9)
    assert q[0] == widths["in_domain"]
    assert (q[1:] >= q[0]).all()
    assert q[-1] == max(widths.values())
    assert "unseen_device" not in widths and q[STRATA.index("unseen_device")] == q[-1]
    assert np.allclose(low * high, pred**2)  # symmetric in log space
    with pytest.raises(CalibrationError, match="not a stratum"):
        cal.interval("iteration", pred[:1], ["elsewhere"], 0.9)


def test_a_missing_stratum_takes_the_widest():
    frame = predictions()
    cal = IntervalCalibration.from_predictions(frame[frame["split"] == "id"], "scaledl")
    _, _, q = cal.interval("iteration", np.ones(2), ["in_domain", "unseen_family"], 0.9)
    assert q[1] == q[0]  # only in_domain exists: the widest is it


def test_round_trip_and_malformed_files(tmp_path):
    cal = IntervalCalibration.from_predictions(predictions(), "scaledl", "abc", "p.parquet")
    path = cal.write(tmp_path / "calibration.json")
    back = IntervalCalibration.read(path)
    assert back.training_data_sha256 == "abc" and back.sizes() == cal.sizes()
    assert back.half_widths("epoch", 0.8) == cal.half_widths("epoch", 0.8)
    assert (back.families["epoch"]["unseen_family"] == cal.families["epoch"]["unseen_family"]).all()
    data = json.loads(path.read_text())
    short = {**data, "families": {"iteration": {"unseen_family": ["f0"]}}}
    with pytest.raises(
        CalibrationError, match=r"^f: field 'families.iteration.unseen_family' \(value 1 labels\)"
    ):
        IntervalCalibration.from_dict(short, "f")
    with pytest.raises(CalibrationError, match="families.iteration.in_domain: not calibrated by"):
        IntervalCalibration(cal.residuals, families={"iteration": {"in_domain": np.array(["a"])}})
    assert data["library"].startswith("crepes ")
    bad = {**data, "residuals": {"iteration": {"in_domain": ["x"]}}}
    with pytest.raises(
        CalibrationError, match=r"^f.json: field 'residuals.iteration.in_domain.0' \(value 'x'\)"
    ):
        IntervalCalibration.from_dict(bad, "f.json")
    with pytest.raises(
        CalibrationError,
        match=r"^f: field 'residuals.iteration.x.\[key\]' \(value 'x'\): Input should be 'in_do",
    ):
        IntervalCalibration.from_dict({**data, "residuals": {"iteration": {"x": [0.1]}}}, "f")
    with pytest.raises(CalibrationError, match="^f: field 'method': missing$"):
        IntervalCalibration.from_dict({k: v for k, v in data.items() if k != "method"}, "f")
    with pytest.raises(CalibrationError, match=r"^f: field 'extra' \(value 1\): unknown field$"):
        IntervalCalibration.from_dict({**data, "extra": 1}, "f")
    with pytest.raises(CalibrationError, match=r"^f: field 'format' \(value 1\)"):
        IntervalCalibration.from_dict({**data, "format": 1}, "f")
    empty = {**data, "residuals": {"iteration": {"in_domain": []}}}
    with pytest.raises(CalibrationError, match="residuals.iteration.in_domain' .*at least 1 item"):
        IntervalCalibration.from_dict(empty, "f")
    with pytest.raises(CalibrationError, match="^f: field 'residuals.iteration': no stratum"):
        IntervalCalibration.from_dict({**data, "residuals": {"epoch": {"in_domain": [0.1]}}}, "f")
    nan = {**data, "residuals": {"iteration": {"in_domain": [float("nan")]}}}
    with pytest.raises(CalibrationError, match="residuals.iteration.in_domain.0' .*finite"):
        IntervalCalibration.from_dict(nan, "f")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(CalibrationError, match="broken.json"):
        IntervalCalibration.read(tmp_path / "broken.json")
