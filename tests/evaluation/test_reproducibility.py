import pandas as pd
import pytest

from scaledl.evaluation.reproducibility import label_reproducibility, repeat_relative_errors


def frame(rows):
    return pd.DataFrame(rows, columns=["workload_id", "repeat", "iteration_ms", "epoch_s"])


def test_pairwise_relative_error_both_ways():
    f = frame([("a", 0, 10.0, 1.0), ("a", 1, 12.0, 1.0), ("b", 0, 5.0, 1.0)])
    re = repeat_relative_errors(f)
    # (|10-12|/12 + |12-10|/10) / 2; "b" was measured once: no entry.
    assert list(re.index) == ["a"]
    assert re["a"] == pytest.approx((2 / 12 + 2 / 10) / 2)


def test_identical_repeats_reproduce_exactly():
    f = frame([("a", r, 7.0, 2.0) for r in range(3)])
    assert repeat_relative_errors(f)["a"] == 0.0


def test_overall_and_per_world_size():
    f = frame(
        [
            ("a", 0, 10.0, 1.0),
            ("a", 1, 10.0, 1.1),
            ("b", 0, 10.0, 1.0),
            ("b", 1, 12.0, 1.0),
        ]
    )
    out = label_reproducibility(f, {"a": 1, "b": 2})
    b = (2 / 12 + 2 / 10) / 2
    assert out["mre"] == pytest.approx(b / 2)
    assert out["n_workloads"] == 2
    assert out["per_world_size"] == {
        "1": {"mre": 0.0, "n_workloads": 1},
        "2": {"mre": pytest.approx(b), "n_workloads": 1},
    }
    assert out["epoch_mre"] > 0


def test_profiles_compared_by_pass():
    f = pd.DataFrame({"workload_id": ["a", "a"], "pass": ["A", "B"], "iteration_ms": [10.0, 11.0]})
    out = label_reproducibility(f, {"a": 1}, group="pass")
    assert out["mre"] == pytest.approx((1 / 11 + 1 / 10) / 2)


def test_no_repeats_is_said_not_invented():
    assert label_reproducibility(frame([("a", 0, 10.0, 1.0)]), {"a": 1}) == {"n_workloads": 0}


def test_bad_values_are_errors():
    with pytest.raises(ValueError, match="iteration_ms"):
        repeat_relative_errors(frame([("a", 0, 0.0, 1.0), ("a", 1, 1.0, 1.0)]))
    with pytest.raises(ValueError, match="missing"):
        repeat_relative_errors(pd.DataFrame({"workload_id": ["a"]}))
