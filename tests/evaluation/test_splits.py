import pandas as pd
import pytest

from scaledl.evaluation.splits import (
    SplitError,
    extrapolation_split,
    leave_one_family_out,
    random_split,
)


def _labels():
    rows = []
    for fam, n in (("a", 10), ("b", 6), ("c", 1)):
        for k in range(n):
            rows.append(
                {
                    "workload_id": f"{fam}{k}",
                    "family": fam,
                    "batch_size": 2 ** (k % 4),
                    "seq_len": 16 * (k + 1),
                }
            )
    return pd.DataFrame(rows)


def test_random_split_stratified_disjoint():
    labels = _labels()
    s = random_split(labels, 0.2, 0.15, seed=3)
    assert not set(s.train_ids) & set(s.test_ids)
    assert set(s.train_ids) | set(s.test_ids) == set(labels["workload_id"])
    fam = labels.set_index("workload_id")["family"]
    test_fams = fam.loc[list(s.test_ids)].value_counts()
    assert test_fams["a"] == 2 and test_fams["b"] == 1
    assert "c" not in test_fams  # a single-workload family stays in training
    assert set(s.val_ids) <= set(s.train_ids) and len(s.val_ids) == round(0.15 * 13)
    assert random_split(labels, 0.2, 0.15, seed=3) == s
    assert random_split(labels.set_axis(labels.index + 100), 0.2, 0.15, seed=3) == s
    assert random_split(labels, 0.2, 0.15, seed=4).test_ids != s.test_ids


def test_leave_one_family_out_excludes_family():
    labels = _labels()
    splits = leave_one_family_out(labels)
    assert [s.name for s in splits] == ["ood/a", "ood/b", "ood/c"]
    fam = labels.set_index("workload_id")["family"]
    for s in splits:
        target = s.name.split("/")[1]
        assert set(fam.loc[list(s.test_ids)]) == {target}
        assert target not in set(fam.loc[list(s.train_ids)])
    assert leave_one_family_out(labels[labels["family"] == "a"]) == []


def test_extrapolation_tests_the_largest():
    labels = _labels()
    s = extrapolation_split(labels, quantile=0.8)
    tokens = (labels["batch_size"] * labels["seq_len"]).set_axis(labels["workload_id"])
    assert tokens.loc[list(s.test_ids)].min() > tokens.loc[list(s.train_ids)].max()
    assert 0 < len(s.test_ids) <= 0.3 * len(labels)
    same = labels.assign(batch_size=1, seq_len=1)
    with pytest.raises(SplitError, match="nothing smaller"):
        extrapolation_split(same)


def test_a_bad_validation_fraction_is_a_split_error():
    with pytest.raises(SplitError, match="validation fraction"):
        random_split(_labels(), 0.2, 1.0, seed=0)
