import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from scaledl.evaluation.coverage import (
    coverage_targets,
    evaluate_intervals,
    family_coverage,
    interval_coverage,
)
from scaledl.evaluation.results import IntervalResults
from scaledl.models.intervals import (
    family_conformal_half_width,
    family_half_width,
    log_residuals,
    normal_prediction_bound,
)

#: Eleven left-out families of the same error: each is calibrated on the ten others.
FAMILIES = {f"ood/f{i}": 0.2 for i in range(11)}


def frame(sigmas: dict[str, float], n: int = 40, seed: int = 0) -> pd.DataFrame:
    """Predictions of one method per split with multiplicative noise of a known sigma."""
    rng = np.random.default_rng(seed)
    parts = []
    for split, sigma in sigmas.items():
        pred = np.exp(rng.uniform(-4, 0, n))
        true = pred * np.exp(rng.normal(0, sigma, n))
        parts.append(
            pd.DataFrame(
                {
                    "split": split,
                    "method": "scaledl",
                    "workload_id": [f"{split}-{i}" for i in range(n)],
                    "family": split.split("/")[-1],
                    "true_iteration_s": true,
                    "pred_iteration_s": pred,
                    "true_epoch_s": 5 * true,
                    "pred_epoch_s": 5 * pred,
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def test_id_coverage_is_leave_one_out_and_near_nominal():
    section, out = interval_coverage(frame({"id": 0.1}, n=400), 0.9)
    s = section["id"]["methods"]["scaledl"]["iteration"]
    assert s["n"] == 400 and s["calibration_size"] == 399
    assert 0.86 <= s["coverage"] <= 0.94
    assert s["coverage_ci_low"] < s["coverage"] < s["coverage_ci_high"]
    # Relative width of exp(+-1.645 sigma): 2 sinh(1.645 * 0.1).
    assert s["median_relative_width"] == pytest.approx(2 * np.sinh(0.1645), rel=0.1)
    assert (out["pred_iteration_s_low"] < out["pred_iteration_s"]).all()
    assert (out["pred_epoch_s_high"] > out["pred_epoch_s"]).all()
    assert section["ood"] == {"skipped": "no leave-one-family-out split"}


def test_a_left_out_family_is_calibrated_on_the_other_families_only():
    # 'bad' is far worse than the others: calibrated on them, its intervals miss; had its own
    # residuals entered its calibration (the largest family score is the 90% quantile of 12),
    # they would cover it.
    sigmas = {"id": 0.1, **FAMILIES, "ood/bad": 1.0, "extrapolation": 0.2}
    data = frame(sigmas)
    section, out = interval_coverage(data, 0.9)
    per_family = section["ood"]["per_family"]
    assert set(per_family) == {"bad", *(f[4:] for f in FAMILIES)}
    bad = per_family["bad"]["scaledl"]["iteration"]
    assert bad["calibration_size"] == 440 and bad["calibration_families"] == 11
    assert bad["coverage"] < 0.5 and bad["n_unbounded"] == 0
    others = data[data["split"].isin(list(FAMILIES))]
    r = log_residuals(others["pred_iteration_s"], others["true_iteration_s"])
    q = family_conformal_half_width(r, others["split"].to_numpy(), 0.9)
    rows = (data["split"] == "ood/bad").to_numpy()
    assert np.allclose(out.loc[rows, "pred_iteration_s_high"], data.loc[rows, "pred_iteration_s"]
                       * np.exp(q))  # fmt: skip
    # Another family is calibrated on 'bad' and ten others: covered at least 90%.
    assert per_family["f0"]["scaledl"]["iteration"]["coverage"] >= 0.9
    assert section["ood"]["pooled"]["scaledl"]["iteration"]["n"] == 480
    assert section["extrapolation"]["methods"]["scaledl"]["epoch"]["n"] == 40
    targets = coverage_targets(section, 0.9)
    assert [t.met for t in targets][1:] == [False] + [True] * 11  # 'bad' under
    assert "left-out bad" in targets[1].text and targets[1].name == "interval_coverage_family"


def test_held_out_family_residuals_never_change_its_own_interval():
    sigmas = {**FAMILIES, "ood/x": 0.3}
    data = frame(sigmas)
    rows = (data["split"] == "ood/x").to_numpy()
    worse = data.copy()
    worse.loc[rows, "true_iteration_s"] *= 50.0  # x's own errors grow; nothing else moves
    _, before = interval_coverage(data, 0.9)
    _, after = interval_coverage(worse, 0.9)
    assert np.array_equal(before.loc[rows, "pred_iteration_s_high"],
                          after.loc[rows, "pred_iteration_s_high"])  # fmt: skip
    # ... while every other family's calibration sees x's new score (the largest of 11).
    assert (after.loc[~rows, "pred_iteration_s_high"] > before.loc[~rows, "pred_iteration_s_high"]
            ).all()  # fmt: skip


def test_per_family_coverage_comes_with_its_exact_interval():
    section, _ = interval_coverage(frame({**FAMILIES, "ood/bad": 1.0}, n=25), 0.9)
    for family in ("bad", "f3"):
        s = section["ood"]["per_family"][family]["scaledl"]["iteration"]
        ci = binomtest(s["n_covered"], 25).proportion_ci(0.95, method="exact")
        assert s["n"] == 25 and s["coverage"] == s["n_covered"] / 25
        assert (s["coverage_ci_low"], s["coverage_ci_high"]) == (ci.low, ci.high)
        assert s["median_relative_width"] > 0
    row = coverage_targets(section, 0.9)[1]
    bad = section["ood"]["per_family"]["bad"]["scaledl"]["iteration"]
    assert row.measured.startswith(f"{bad['coverage']:.1%} of 25 (95% CI ")
    assert (row.value, row.ci_low, row.ci_high) == (
        bad["coverage"], bad["coverage_ci_low"], bad["coverage_ci_high"]
    )  # fmt: skip
    assert row.extra == {"n": 25, "n_unbounded": bad["n_unbounded"]}


def test_too_few_families_give_unbounded_intervals_and_no_reached_target():
    sigmas = {"id": 0.1, "ood/a": 0.1, "ood/b": 0.1, "ood/c": 0.1}
    section, out = interval_coverage(frame(sigmas), 0.9)
    c = section["ood"]["per_family"]["c"]["scaledl"]["iteration"]
    assert c["calibration_families"] == 2 and c["n_unbounded"] == 40 and c["coverage"] == 1.0
    assert c["family_calibration"] == "unbounded"
    assert c["median_relative_width"] is None
    rows = coverage_targets(section, 0.9)[1:]
    assert [r.met for r in rows] == [False] * 3
    assert "40 intervals unbounded (calibrated from 2 families)" in rows[0].measured


def test_five_families_are_bounded_by_the_normal_bound_and_say_so():
    # The quick preset's case: each left-out family is calibrated on the 4 others.
    sigmas = {"id": 0.1, **{f"ood/g{i}": 0.2 for i in range(5)}}
    data = frame(sigmas)
    section, out = interval_coverage(data, 0.9)
    for family in ("g0", "g4"):
        s = section["ood"]["per_family"][family]["scaledl"]["iteration"]
        assert s["family_calibration"] == "normal_prediction_bound"
        assert s["calibration_families"] == 4 and s["n_unbounded"] == 0
        assert s["median_relative_width"] > 0
        others = data[data["split"].str.startswith("ood/") & (data["split"] != f"ood/{family}")]
        r = log_residuals(others["pred_iteration_s"], others["true_iteration_s"])
        q = family_half_width(r, others["split"].to_numpy(), 0.9).half_width
        rows = (data["split"] == f"ood/{family}").to_numpy()
        assert np.allclose(out.loc[rows, "pred_iteration_s_high"],
                           data.loc[rows, "pred_iteration_s"] * np.exp(q))  # fmt: skip
    pooled = section["ood"]["pooled"]["scaledl"]["iteration"]
    assert pooled["family_calibration"] == "normal_prediction_bound"
    assert section["id"]["methods"]["scaledl"]["iteration"]["family_calibration"] is None
    rows = coverage_targets(section, 0.9)[1:]
    assert all("normal prediction bound over 4 families" in r.measured for r in rows)
    section, _, calibration = evaluate_intervals(data, 0.9)
    result = IntervalResults.model_validate(section)
    assert result.calibration_methods["iteration"] == {
        "in_domain": "conformal", "unseen_family": "normal_prediction_bound"
    }  # fmt: skip
    assert calibration.methods("iteration", 0.9)["unseen_family"].families == 5


def test_family_coverage_reports_how_a_new_family_is_bounded():
    data = frame({f"ood/g{i}": 0.2 for i in range(5)}, n=12).assign(seed=0)
    data["family"] = data["split"].str[4:]
    result = family_coverage(data, 0.9)
    new = result["new_family"]["scaledl"]
    assert new["family_calibration"] == "normal_prediction_bound" and new["families"] == 5
    r = log_residuals(data["pred_iteration_s"], data["true_iteration_s"])
    scores = [np.quantile(np.abs(r[data["family"] == f]), 0.9, method="inverted_cdf")
              for f in sorted(set(data["family"]))]  # fmt: skip
    assert new["half_width_log"] == pytest.approx(normal_prediction_bound(np.array(scores), 0.9))
    assert new["high_factor"] == pytest.approx(np.exp(new["half_width_log"]))
    assert "5 families, fewer than the 9" in new["family_calibration_reason"]
    per = result["per_family"]["g2"]["scaledl"]["iteration"]
    assert per["family_calibration"] == "normal_prediction_bound" and per["n_unbounded"] == 0
    two = family_coverage(data[data["family"].isin(["g0", "g1"])], 0.9)["new_family"]["scaledl"]
    assert two["family_calibration"] == "unbounded" and two["high_factor"] is None


def test_too_few_test_workloads_give_unbounded_intervals_not_a_width():
    section, out = interval_coverage(frame({"id": 0.1}, n=4), 0.9)
    s = section["id"]["methods"]["scaledl"]["iteration"]
    assert s["n_unbounded"] == 4 and s["median_relative_width"] is None and s["coverage"] == 1.0
    assert np.isinf(out["pred_iteration_s_high"]).all()


def test_missing_epoch_labels_leave_epoch_coverage_empty():
    f = frame({"id": 0.1}, n=20)
    f["true_epoch_s"] = np.nan
    section, _ = interval_coverage(f, 0.9)
    assert section["id"]["methods"]["scaledl"]["epoch"] is None


def test_evaluate_intervals_is_a_valid_metrics_section():
    sigmas = {"id": 0.1, **FAMILIES, "extrapolation": 0.3}
    section, _, calibration = evaluate_intervals(frame(sigmas), 0.9, "sha", "p.parquet")
    result = IntervalResults.model_validate(section)
    assert result.ood.per_family["f0"]["scaledl"].iteration.calibration_families == 10
    assert result.ood.per_family["f0"]["scaledl"].iteration.family_calibration == "conformal"
    assert result.calibration_methods["epoch"]["unseen_family"] == "conformal"  # 11 families
    assert result.calibration == {
        t: {"in_domain": 40, "unseen_family": 440, "beyond_range": 40}
        for t in ("iteration", "epoch")
    }
    assert calibration.training_data_sha256 == "sha" and calibration.source == "p.parquet"
    assert result.library.startswith("crepes")
    other = frame(sigmas).assign(method="additive")
    section, _, calibration = evaluate_intervals(other, 0.9)
    assert calibration is None and section["calibration"] is None
