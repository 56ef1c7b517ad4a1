import hashlib
from types import SimpleNamespace

import pytest
from tiny_specs import tiny

from scaledl.profiling.shards import (
    DEFAULT_SHARDS,
    SHARDS_ENV,
    parse_shard_key,
    parse_shard_spec,
    shard_count_from_env,
    shard_dir,
    shard_key,
    shard_keys,
    shard_of,
    shard_workloads,
)


def _rows(start: int, stop: int) -> list[SimpleNamespace]:
    """Design rows with workload ids shaped like ScaleDL's (16 hex digits)."""
    return [
        SimpleNamespace(workload_id=hashlib.sha256(str(i).encode()).hexdigest()[:16])
        for i in range(start, stop)
    ]


@pytest.mark.parametrize("n_shards", [1, 2, 4, 7])
def test_every_row_is_in_exactly_one_shard(n_shards):
    design = _rows(0, 336)  # the reference dataset's size
    shards = [shard_workloads(design, k, n_shards) for k in range(n_shards)]
    ids = [w.workload_id for shard in shards for w in shard]
    assert sorted(ids) == sorted(w.workload_id for w in design)  # complete, none twice
    assert all(shards), "a shard of 336 rows is empty"
    for k, shard in enumerate(shards):  # in the design's order
        assert shard == [w for w in design if shard_of(w.workload_id, n_shards) == k]


def test_adding_rows_to_a_design_moves_no_existing_row():
    design, added = _rows(0, 200), _rows(200, 260)
    before = {w.workload_id: shard_of(w.workload_id, 4) for w in design}
    grown = design + added
    after = {w.workload_id: k for k in range(4) for w in shard_workloads(grown, k, 4)}
    assert {i: after[i] for i in before} == before
    # Nor does the order of the rows.
    reordered = {w.workload_id: shard_of(w.workload_id, 4) for w in reversed(grown)}
    assert reordered == after


def test_shard_of_a_real_workload_is_its_ids():
    workload = tiny("bert")
    assert shard_of(workload.workload_id, 4) == shard_of(str(workload.workload_id), 4)
    assert shard_workloads([workload], shard_of(workload.workload_id, 4), 4) == [workload]


def test_keys_and_specs_round_trip():
    assert shard_keys(4) == ["0-of-4", "1-of-4", "2-of-4", "3-of-4"]
    assert parse_shard_key(shard_key(3, 4)) == (3, 4)
    assert parse_shard_spec(shard_key(2, 4)) == parse_shard_spec("2/4") == (2, 4)
    assert parse_shard_spec(" 0-of-1 ") == parse_shard_spec(" 0 / 1 ") == (0, 1)


@pytest.mark.parametrize(
    "text", ["4/4", "4-of-4", "-1/4", "1", "a/b", "1/0", "0-of-0", "1of4", "1-of-", ""]
)
def test_a_bad_shard_spec_names_the_value(text):
    with pytest.raises(ValueError, match="--shard"):
        parse_shard_spec(text)


@pytest.mark.parametrize("key", ["4-of-4", "1of4", "x-of-2", "0-of-0"])
def test_a_bad_shard_key_names_it(key):
    with pytest.raises(ValueError, match="shard key"):
        parse_shard_key(key)


def test_bad_counts_and_shards_are_refused():
    with pytest.raises(ValueError, match="n_shards"):
        shard_of("abc", 0)
    with pytest.raises(ValueError, match="workload_id"):
        shard_of("", 4)
    with pytest.raises(ValueError, match="not in 0..3"):
        shard_workloads([], 4, 4)


def test_shard_count_from_env():
    assert shard_count_from_env({}) == DEFAULT_SHARDS == 4
    assert shard_count_from_env({SHARDS_ENV: "8"}) == 8
    for bad in ("0", "-2", "four", "2.5"):
        with pytest.raises(ValueError, match=f"{SHARDS_ENV}={bad!r}"):
            shard_count_from_env({SHARDS_ENV: bad})


def test_shard_dir_is_below_the_profiles_directory(tmp_path):
    assert shard_dir(tmp_path, "1-of-4") == tmp_path / "shards" / "1-of-4"
    with pytest.raises(ValueError, match="shard key"):
        shard_dir(tmp_path, "../x")
