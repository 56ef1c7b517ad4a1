from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from profile_tables import make_profiles

from scaledl.validation import ValidationError, validate_design


def make_design() -> pd.DataFrame:
    design = make_profiles()["workloads"].assign(sampler="d_optimal", seed=7)
    vit = design.iloc[[0]].assign(
        workload_id="w3",
        family="vit",
        vocab_size=np.nan,
        image_size=32.0,
        patch_size=8.0,
        seq_len=np.nan,  # derived for vision families
    )
    return pd.concat([design, vit], ignore_index=True)


def write(tmp_path, frame: pd.DataFrame):
    path = tmp_path / "design" / "design.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path, index=False)
    return path


def test_good_design_passes(tmp_path):
    path = write(tmp_path, make_design())
    out = validate_design(path)
    pd.testing.assert_frame_equal(out, pd.read_parquet(path), check_dtype=False)
    assert out["batch_size"].dtype == np.int64


def test_minimal_design_columns_pass(tmp_path):
    design = make_design()[
        ["family", "seq_len", "batch_size", "world_size", "precision", "mode", "sampler", "seed"]
    ]
    assert len(validate_design(write(tmp_path, design))) == 3


def test_missing_column(tmp_path):
    path = write(tmp_path, make_design().drop(columns=["sampler"]))
    with pytest.raises(ValidationError) as info:
        validate_design(path)
    assert f"{path}: table 'design', column 'sampler': expect_column_to_exist failed" in str(
        info.value
    )


def test_bad_rows_are_fatal_and_named(tmp_path):
    design = make_design()
    design.loc[1, "family"] = None
    design.loc[2, "batch_size"] = 0
    design.loc[2, "workload_id"] = "w1"
    path = write(tmp_path, design)
    with pytest.raises(ValidationError) as info:
        validate_design(path)
    message = str(info.value)
    assert (
        "column 'family': expect_column_values_to_not_be_null failed (1 row(s): row 1: null)"
        in (message)
    )
    assert (
        "column 'batch_size': expect_column_values_to_be_between failed (1 row(s): row 2: 0)"
        in (message)
    )
    assert "column 'workload_id': expect_column_values_to_be_unique" in message
    assert len(info.value.failures) == 3


@pytest.mark.parametrize("damage", ["empty", "garbage"])
def test_empty_or_unreadable_design(tmp_path, damage):
    path = write(tmp_path, make_design().iloc[0:0])
    if damage == "garbage":
        path.write_bytes(b"not a parquet file")
    expectation = (
        "expect_table_row_count_to_be_between" if damage == "empty" else "readable_parquet"
    )
    with pytest.raises(ValidationError, match=f"table 'design': {expectation}"):
        validate_design(path)
