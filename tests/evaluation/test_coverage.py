import numpy as np
import pandas as pd
import pytest

from scaledl.evaluation.coverage import coverage_targets, evaluate_intervals, interval_coverage
from scaledl.evaluation.results import IntervalResults


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
    # 'c' is far worse than 'a' and 'b': calibrated on them, its intervals miss; calibrated on
    # itself they would cover 90%.
    sigmas = {"id": 0.1, "ood/a": 0.1, "ood/b": 0.1, "ood/c": 1.0, "extrapolation": 0.2}
    section, _ = interval_coverage(frame(sigmas), 0.9)
    per_family = section["ood"]["per_family"]
    assert set(per_family) == {"a", "b", "c"}
    c = per_family["c"]["scaledl"]["iteration"]
    assert c["calibration_size"] == 80 and c["coverage"] < 0.5
    assert per_family["a"]["scaledl"]["iteration"]["coverage"] > 0.9  # calibrated on b and c
    assert section["ood"]["pooled"]["scaledl"]["iteration"]["n"] == 120
    assert section["extrapolation"]["methods"]["scaledl"]["epoch"]["n"] == 40
    targets = coverage_targets(section, 0.9)
    assert [t["reached"] for t in targets][1:] == [False, False, False]  # a, b over; c under
    assert "left-out c" in targets[3]["target"]


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
    sigmas = {"id": 0.1, "ood/a": 0.2, "ood/b": 0.2, "extrapolation": 0.3}
    section, _, calibration = evaluate_intervals(frame(sigmas), 0.9, "sha", "p.parquet")
    result = IntervalResults.model_validate(section)
    assert result.calibration == {
        t: {"in_domain": 40, "unseen_family": 80, "beyond_range": 40}
        for t in ("iteration", "epoch")
    }
    assert calibration.training_data_sha256 == "sha" and calibration.source == "p.parquet"
    assert result.library.startswith("crepes")
    other = frame(sigmas).assign(method="additive")
    section, _, calibration = evaluate_intervals(other, 0.9)
    assert calibration is None and section["calibration"] is None
