import numpy as np
import pandas as pd
import pytest

from scaledl.evaluation.comparisons import compare_split, comparison_pairs, repeat_errors
from scaledl.stats.significance import paired_comparison


def _frame(n=30, seeds=5, shift=-0.05, seed=0):
    """scaledl (seeded) better than additive (deterministic) by ``shift`` of the label."""
    rng = np.random.default_rng(seed)
    true = rng.uniform(0.01, 0.1, n)
    ids = [f"w{i:02d}" for i in range(n)]
    base_err = rng.uniform(0.05, 0.3, n)
    rows = []
    for s in range(seeds):
        noise = rng.normal(0, 0.005, n)
        for i in range(n):
            rows.append(("scaledl", s, ids[i], true[i] * (1 + base_err[i] + shift + noise[i])))
            rows.append(("additive", s, ids[i], true[i] * (1 + base_err[i])))
    frame = pd.DataFrame(rows, columns=["method", "seed", "workload_id", "pred_iteration_s"])
    frame["true_iteration_s"] = frame["workload_id"].map(dict(zip(ids, true, strict=True)))
    labels = pd.DataFrame({"workload_id": ids, "iteration_ms": true * 1000})
    return frame, labels


def test_pairs():
    assert comparison_pairs(["scaledl", "additive", "critical_path", "scaledl_sum_prior"]) == [
        ("scaledl", "additive"),
        ("scaledl", "critical_path"),
        ("scaledl", "scaledl_sum_prior"),
        ("critical_path", "additive"),
        ("scaledl_sum_prior", "additive"),
    ]
    assert comparison_pairs(["additive", "analytical"]) == []


def test_a_known_difference_is_found_with_its_interval():
    frame, labels = _frame(shift=-0.05)
    out = compare_split(frame, labels)
    (c,) = out["comparisons"]
    assert (c["method_a"], c["method_b"], c["verdict"]) == ("scaledl", "additive", "better")
    assert c["ci_low"] < -0.05 < c["ci_high"] < 0
    assert c["unit"] == "workload" and c["n_units"] == 30 and c["n_repeats_a"] == 5
    assert out["seeds"] == 5 and len(out["mre_per_seed"]["scaledl"]) == 5
    assert out["label_repeats"] == 1.0
    frame, labels = _frame(shift=0.0)
    assert compare_split(frame, labels)["comparisons"][0]["verdict"] == "not distinguishable"


def test_errors_are_averaged_over_label_repeats():
    frame = pd.DataFrame(
        {
            "method": "m",
            "seed": [0, 0],
            "workload_id": ["a", "b"],
            "pred_iteration_s": [0.010, 0.020],
        }
    )
    labels = pd.DataFrame({"workload_id": ["a", "a", "b"], "iteration_ms": [10.0, 12.5, 25.0]})
    errors, repeats = repeat_errors(frame, labels, "m", ["a", "b"])
    np.testing.assert_allclose(errors, [[(0.0 + 0.2) / 2, 0.2]])
    assert repeats == 1.5
    with pytest.raises(ValueError, match="no launch label"):
        repeat_errors(frame, labels[labels["workload_id"] == "a"], "m", ["a", "b"])


def test_weights_give_the_mean_over_groups():
    rng = np.random.default_rng(4)
    a, b = rng.uniform(0.1, 0.3, 12), rng.uniform(0.1, 0.3, 12)
    groups = np.array([0] * 9 + [1] * 3)
    w = 1.0 / np.bincount(groups)[groups]
    c = paired_comparison(a, b, weights=w)
    assert c.mre_a == pytest.approx(np.mean([a[groups == g].mean() for g in (0, 1)]))
    assert c.mre_difference == pytest.approx(c.mre_a - c.mre_b)
    assert c.ci_low <= c.mre_difference <= c.ci_high
    with pytest.raises(ValueError, match="weights"):
        paired_comparison(a, b, weights=np.ones(3))


def test_a_split_of_one_workload_is_not_compared():
    frame, labels = _frame(n=1)
    out = compare_split(frame, labels)
    assert out["n_workloads"] == 1 and out["comparisons"] == []
    assert len(out["mre_per_seed"]["scaledl"]) == 5
