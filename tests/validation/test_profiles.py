from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from profile_tables import make_profiles, write_profiles

from scaledl.profiles.schemas import PROFILE_TABLES
from scaledl.profiles.tables import PROFILE_TABLE_NAMES, RUN_TABLE_NAMES
from scaledl.validation import ValidationConfig, ValidationError, validate_profiles

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

QUARANTINE_COLUMNS = ["failed_expectation", "failed_column", "failed_value"]


def make_dirs(root: Path) -> dict[str, Path]:
    return {
        "profiles_dir": root / "profiles",
        "out_dir": root / "validated",
        "quarantine_dir": root / "quarantine",
        "report_dir": root / "reports" / "validation",
    }


def run(dirs: dict[str, Path], tables: dict[str, pd.DataFrame], **config):
    write_profiles(dirs["profiles_dir"], tables)
    report = validate_profiles(config=ValidationConfig(**config) if config else None, **dirs)
    valid = {n: pd.read_parquet(dirs["out_dir"] / f"{n}.parquet") for n in PROFILE_TABLES}
    bad = {n: pd.read_parquet(dirs["quarantine_dir"] / f"{n}.parquet") for n in PROFILE_TABLES}
    for name in PROFILE_TABLES:  # no row is ever lost or duplicated
        assert len(valid[name]) + len(bad[name]) == len(tables[name]), name
        assert report.tables[name].passed == len(valid[name])
        assert report.tables[name].quarantined == len(bad[name])
    return report, valid, bad


def rows_of(frame: pd.DataFrame, run_id: str) -> pd.DataFrame:
    return frame.loc[frame["run_id"] == run_id]


def layer_row(tables, run_id: str) -> int:
    return int(rows_of(tables["layer_timings"], run_id).index[0])


# --------------------------------------------------------------------------- good data
def test_good_data_passes_untouched(tmp_path):
    dirs = make_dirs(tmp_path)
    tables = make_profiles()
    report, valid, bad = run(dirs, tables)
    assert report.passed
    assert report.flags == []
    for name, frame in tables.items():
        out = valid[name].drop(columns=["flag_high_cv"], errors="ignore")
        pd.testing.assert_frame_equal(out, frame, check_dtype=False)
        assert bad[name].empty
        assert list(bad[name].columns) == list(frame.columns) + QUARANTINE_COLUMNS
    assert not valid["runs"]["flag_high_cv"].any()
    assert valid["layer_timings"]["rank"].dtype == np.int64
    assert all(e.success for e in report.expectations)
    html = (dirs["report_dir"] / "index.html").read_text()
    assert "PASSED" in html and "FAIL" not in html.replace("FAILED", "")
    for name in PROFILE_TABLES:
        assert f"<td>{name}</td>" in html
    assert "expect_column_values_to_be_between" in html
    assert "layer_sum_within_iteration" in html
    payload = json.loads(json.dumps(report.to_dict()))
    assert payload["passed"] is True
    assert payload["tables"]["layer_timings"]["passed"] == len(tables["layer_timings"])
    assert [p for d in dirs.values() for p in d.rglob("*.tmp")] == []


# --------------------------------------------------------------------------- one run per defect
SCENARIO_RUNS = {
    "r1": "w1",
    "r2": "w2",  # clean
    "nan_fwd": "w1",  # one NaN forward_ms: that row, and the run it leaves incomplete
    "neg_iter": "w1",  # negative label iteration_ms: idem
    "absurd_iter": "w2",  # 1e9 ms label iteration: idem
    "dup_layer": "w2",  # exact copy of a layer row: the copy only, the run is kept
    "conflict_layer": "w2",  # two different rows for one layer key: both, and the run
    "hole_layer": "w1",  # one layer row missing from the file: whole run
    "dup_run": "w1",  # runs row written twice, identical: the copy only
    "conflict_run": "w1",  # run_id twice in runs with different hosts: whole run
    "epoch_in_ms": "w1",  # epoch_s written in milliseconds: whole run, with the ratio
    "bad_steps": "w2",  # steps_per_epoch not ceil(dataset / (batch x world)): whole run
    "bad_ranks": "w2",  # layer rank 1 relabelled 2
    "missing_rank": "w2",  # epochs lacks rank 1
    "ws_mismatch": "w1",  # runs.world_size 4 vs workload 1
    "slow_layers": "w1",  # layer sum 9 ms > 7 ms * 1.25
    "within_tol": "w1",  # layer sum 9 ms <= 7.5 ms * 1.25: kept
    "bad_bytes": "w2",  # all-reduce bytes 6200 vs 2400
    "oom": "w2",  # status oom
    "noisy": "w1",  # iteration_cv 0.25: flagged, kept
    "nan_rank": "w1",  # NaN rank (int column) in its only epoch row
    "no_allreduce": "w2",  # training run with world size 2 but no all-reduce rows
    "bf16_ok": "w_bf16",  # bf16 gradients: 2 bytes per parameter, kept
    "bf16_as_fp32": "w_bf16",  # bf16 workload all-reducing 4 bytes per parameter
}
SCENARIO_WORKLOADS = {"w1": 1, "w2": 2, "w_bf16": 2}
# run -> (reason on its runs row, reason on its rows in the per-rank tables)
WHOLE_RUN = {
    "nan_fwd": ("run_complete",) * 2,
    "neg_iter": ("run_complete",) * 2,
    "absurd_iter": ("run_complete",) * 2,
    "conflict_layer": ("run_complete",) * 2,
    "hole_layer": ("run_complete",) * 2,
    "conflict_run": ("expect_column_values_to_be_unique", "run quarantined"),
    "epoch_in_ms": ("epoch_matches_iterations",) * 2,
    "bad_steps": ("steps_per_epoch_matches_dataset",) * 2,
    "bad_ranks": ("ranks_match_world_size",) * 2,
    "missing_rank": ("ranks_match_world_size",) * 2,
    "ws_mismatch": ("world_size_matches_workload",) * 2,
    "slow_layers": ("layer_sum_within_iteration",) * 2,
    "bad_bytes": ("allreduce_bytes_match_params",) * 2,
    "oom": ("expect_column_values_to_be_in_set", "run status failed"),
    "nan_rank": ("run_complete",) * 2,
    "no_allreduce": ("allreduce_bytes_match_params",) * 2,
    "bf16_as_fp32": ("allreduce_bytes_match_params",) * 2,
}


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    tables = make_profiles(SCENARIO_RUNS, SCENARIO_WORKLOADS)
    wl = tables["workloads"]
    wl.loc[wl["workload_id"] == "w_bf16", "precision"] = "bf16"
    ar = tables["allreduce_timings"]
    ar.loc[ar["run_id"] == "bf16_ok", "allreduce_bytes"] //= 2
    layers, it, epochs = (tables[n] for n in ("layer_timings", "iteration_timings", "epochs"))
    runs = tables["runs"]
    label = it["phase"] == "label"
    instrumented = it["phase"] == "instrumented"

    layers.loc[layer_row(tables, "nan_fwd"), "forward_ms"] = np.nan
    it.loc[it.index[(it["run_id"] == "neg_iter") & label][0], "iteration_ms"] = -3.0
    it.loc[it.index[(it["run_id"] == "absurd_iter") & label][0], "iteration_ms"] = 1e9
    layers.loc[(layers["run_id"] == "bad_ranks") & (layers["rank"] == 1), "rank"] = 2
    it.loc[(it["run_id"] == "slow_layers") & instrumented, "iteration_ms"] = 7.0
    it.loc[(it["run_id"] == "within_tol") & instrumented, "iteration_ms"] = 7.5
    runs.loc[runs["run_id"] == "ws_mismatch", "world_size"] = 4
    runs.loc[runs["run_id"] == "oom", ["status", "error"]] = ["oom", "CUDA out of memory"]
    runs.loc[runs["run_id"] == "noisy", "iteration_cv"] = 0.25
    ar = tables["allreduce_timings"]
    ar.loc[ar.index[ar["run_id"] == "bad_bytes"][0], "allreduce_bytes"] = 5000
    tables["allreduce_timings"] = ar.loc[ar["run_id"] != "no_allreduce"].reset_index(drop=True)
    epochs["rank"] = epochs["rank"].astype(float)
    epochs.loc[epochs["run_id"] == "nan_rank", "rank"] = np.nan
    epochs.loc[epochs["run_id"] == "epoch_in_ms", "epoch_s"] *= 1000.0
    epochs.loc[epochs["run_id"] == "bad_steps", "steps_per_epoch"] = 64  # 32 with 2 ranks
    tables["epochs"] = epochs.loc[
        ~((epochs["run_id"] == "missing_rank") & (epochs["rank"] == 1))
    ].reset_index(drop=True)
    other_host = rows_of(runs, "conflict_run").assign(host="h1")
    tables["runs"] = pd.concat([runs, rows_of(runs, "dup_run"), other_host], ignore_index=True)
    conflicting = layers.iloc[[layer_row(tables, "conflict_layer")]].assign(forward_ms=1.5)
    hole = (layers["run_id"] == "hole_layer") & (layers["step"] == 1) & (layers["layer_index"] == 2)
    tables["layer_timings"] = pd.concat(
        [layers.loc[~hole], layers.iloc[[layer_row(tables, "dup_layer")]], conflicting],
        ignore_index=True,
    )
    unknown = tables["layer_timings"].iloc[[0]].assign(run_id="r404")
    tables["layer_timings"] = pd.concat([tables["layer_timings"], unknown], ignore_index=True)

    dirs = make_dirs(tmp_path_factory.mktemp("scenario"))
    report, valid, bad = run(dirs, tables)
    return tables, report, valid, bad, dirs


def test_clean_runs_untouched(scenario):
    tables, report, valid, _, _ = scenario
    assert not report.passed
    for name in ("runs", *RUN_TABLE_NAMES):
        for run_id in ("r1", "r2", "within_tol", "noisy", "bf16_ok", "dup_layer", "dup_run"):
            got = rows_of(valid[name], run_id).drop(columns=["flag_high_cv"], errors="ignore")
            want = rows_of(tables[name], run_id).drop_duplicates()
            pd.testing.assert_frame_equal(
                got.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False
            )


@pytest.mark.parametrize(("run_id", "reasons"), sorted(WHOLE_RUN.items()))
def test_run_quarantined_whole_in_every_table(scenario, run_id, reasons):
    tables, _, valid, bad, _ = scenario
    for name in ("runs", *RUN_TABLE_NAMES):
        reason = reasons[0] if name == "runs" else reasons[1]
        expected = rows_of(tables[name], run_id)
        got = rows_of(bad[name], run_id)
        assert len(got) == len(expected), name
        assert got["failed_expectation"].str.contains(reason).all(), (name, reason)
        assert rows_of(valid[name], run_id).empty


def test_run_failure_messages(scenario):
    _, _, _, bad, _ = scenario
    value = {r: rows_of(bad["runs"], r)["failed_value"].iloc[0] for r in WHOLE_RUN}
    assert "layer_timings ranks [0, 2] != 0..1" in value["bad_ranks"]
    assert "epochs ranks [0] != 0..1" in value["missing_rank"]
    assert "world_size 4 != workload world_size 1" in value["ws_mismatch"]
    assert "sum 9 ms > iteration 7 ms x (1 + 0.25)" in value["slow_layers"]
    assert "6200 all-reduce bytes, expected 2400 (4 x 600 params)" in value["bad_bytes"]
    assert value["oom"] == "oom" and value["conflict_run"] == "conflict_run"
    assert "1 epochs row(s) quarantined, first rank null" in value["nan_rank"]
    assert (
        "run nan_fwd: 1 layer_timings row(s) quarantined, first rank 0 step 0 layer_index 0 "
        "(expect_column_values_to_not_be_null on forward_ms)"
    ) in value["nan_fwd"]
    assert (
        "iteration_timings row(s) quarantined, first rank 0 phase label step 2"
        in (value["neg_iter"])
    )
    assert "layer_timings row(s) quarantined" in value["conflict_layer"]
    assert "expect_compound_columns_to_be_unique" in value["conflict_layer"]
    assert "run hole_layer: layer_timings lacks rank 0 step 1 layer_index 2" in value["hole_layer"]
    assert (
        "run epoch_in_ms rank 0: epoch_s 806.4 s vs steps_per_epoch 64 x median label "
        "iteration 12 ms = 0.768 s: ratio 1050 outside [0.5, 3]"
    ) in value["epoch_in_ms"]
    assert (
        "run bad_steps rank 0: steps_per_epoch 64 != ceil(dataset_size 256 / (batch_size 4 x "
        "world_size 2)) = 32: ratio 2"
    ) in value["bad_steps"]
    assert "no all-reduce rows (expected 2400 bytes per step)" in value["no_allreduce"]
    assert "2400 all-reduce bytes, expected 1200 (2 x 600 params)" in value["bf16_as_fp32"]
    oom_layers = rows_of(bad["layer_timings"], "oom")
    assert set(oom_layers["failed_value"]) == {"oom"}
    assert set(oom_layers["failed_column"]) == {"status"}


def only_rows(bad, valid, tables, table, run_id, n_bad):
    assert len(rows_of(bad[table], run_id)) == n_bad
    for name in ("runs", *RUN_TABLE_NAMES):
        n = n_bad if name == table else 0
        assert len(rows_of(valid[name], run_id)) == len(rows_of(tables[name], run_id)) - n


def test_nan_time_row_keeps_its_own_reason(scenario):
    _, _, _, bad, _ = scenario
    rows = rows_of(bad["layer_timings"], "nan_fwd")
    row = rows[rows["failed_value"].str.startswith("null")].iloc[0]
    assert row["failed_expectation"] == "expect_column_values_to_not_be_null; run_complete"
    assert row["failed_column"] == "forward_ms; layer_timings"


@pytest.mark.parametrize(("run_id", "value"), [("neg_iter", "-3.0"), ("absurd_iter", "1e+09")])
def test_negative_or_absurd_time_row_keeps_its_own_reason(scenario, run_id, value):
    _, _, _, bad, _ = scenario
    rows = rows_of(bad["iteration_timings"], run_id)
    row = rows[rows["failed_expectation"].str.startswith("expect_")].iloc[0]
    assert row["failed_expectation"] == "expect_column_values_to_be_between; run_complete"
    assert row["failed_column"].startswith("iteration_ms")
    assert float(row["failed_value"].split(";")[0]) == float(value)


def test_exact_duplicate_layer_row_keeps_one_copy(scenario):
    tables, report, valid, bad, _ = scenario
    only_rows(bad, valid, tables, "layer_timings", "dup_layer", 1)
    got = rows_of(bad["layer_timings"], "dup_layer").iloc[0]
    assert (got["failed_expectation"], got["failed_column"]) == ("duplicate", "*")
    original = layer_row(tables, "dup_layer")
    assert got["failed_value"] == f"copy of row {original + 1}"
    kept = rows_of(valid["layer_timings"], "dup_layer")
    assert len(kept) == len(rows_of(tables["layer_timings"], "dup_layer")) - 1
    assert report.tables["layer_timings"].quarantine_reasons["duplicate"] == 1


def test_conflicting_layer_rows_quarantine_both_and_the_run(scenario):
    _, _, _, bad, _ = scenario
    got = rows_of(bad["layer_timings"], "conflict_layer")
    unique = got[got["failed_expectation"].str.contains("expect_compound_columns_to_be_unique")]
    assert len(unique) == 2
    assert (
        unique["failed_value"]
        .str.startswith("run_id=conflict_layer,rank=0,step=0,layer_index=0")
        .all()
    )


def test_exact_duplicate_run_row_keeps_one_copy(scenario):
    _, _, valid, bad, _ = scenario
    got = rows_of(bad["runs"], "dup_run")
    assert got["failed_expectation"].tolist() == ["duplicate"]
    assert len(rows_of(valid["runs"], "dup_run")) == 1


def test_conflicting_run_id(scenario):
    _, _, _, bad, _ = scenario
    got = rows_of(bad["runs"], "conflict_run")
    assert len(got) == 2
    assert set(got["failed_expectation"]) == {"expect_column_values_to_be_unique"}


def test_nan_in_integer_column_is_row_level(scenario):
    _, _, valid, bad, _ = scenario
    row = rows_of(bad["epochs"], "nan_rank").iloc[0]
    assert row["failed_expectation"].startswith("expect_column_values_to_not_be_null")
    assert row["failed_column"].startswith("rank")
    assert valid["epochs"]["rank"].dtype == np.int64


def test_unknown_run_id(scenario):
    _, _, _, bad, _ = scenario
    row = rows_of(bad["layer_timings"], "r404").iloc[0]
    assert row["failed_expectation"] == "run_id_known"


def test_high_cv_flagged_not_dropped(scenario):
    _, report, valid, _, dirs = scenario
    flagged = valid["runs"].set_index("run_id")["flag_high_cv"]
    assert flagged["noisy"] and not flagged.drop("noisy").any()
    assert [(f.key, f.flag, f.value) for f in report.flags] == [("noisy", "flag_high_cv", "0.25")]
    assert "flag_high_cv" in (dirs["report_dir"] / "index.html").read_text()


def test_report_counts_and_html(scenario):
    tables, report, _, bad, dirs = scenario
    reasons = report.tables["layer_timings"].quarantine_reasons
    assert reasons["run status failed"] == len(rows_of(tables["layer_timings"], "oom"))
    assert reasons["expect_column_values_to_not_be_null"] == 1
    incomplete = ("nan_fwd", "neg_iter", "absurd_iter", "conflict_layer", "hole_layer", "nan_rank")
    # bad_ranks lacks its rank-1 layer rows too (they were written as rank 2).
    incomplete += ("bad_ranks",)
    assert reasons["run_complete"] == sum(
        len(rows_of(tables["layer_timings"], r)) for r in incomplete
    )
    failed = {(e.table, e.expectation) for e in report.expectations if not e.success}
    assert ("layer_timings", "layer_sum_within_iteration") in failed
    assert ("iteration_timings", "expect_column_values_to_be_between") in failed
    html = (dirs["report_dir"] / "index.html").read_text()
    assert "FAILED" in html and "ranks_match_world_size" in html
    assert json.loads(json.dumps(report.to_dict()))["passed"] is False
    assert all(b["failed_value"].map(type).eq(str).all() for b in bad.values())


# --------------------------------------------------------------------------- configuration
def test_world_size_one_profiles_with_custom_config(tmp_path):
    """An empty all-reduce table is fine without multi-rank runs; max_time_ms is honoured."""
    tables = make_profiles({"r1": "w1", "r2": "w1"})
    tables["workloads"] = tables["workloads"].iloc[[0]]
    assert tables["allreduce_timings"].empty
    tables["layer_timings"].loc[0, "forward_ms"] = 25.0  # fine under the default maximum
    config = {"max_time_ms": 20.0, "layer_sum_tolerance": 5.0}
    report, valid, bad = run(make_dirs(tmp_path), tables, **config)
    first = bad["layer_timings"].iloc[0]
    assert first["failed_value"].startswith("25.0; run r1: 1 layer_timings row(s) quarantined")
    assert first["failed_column"] == "forward_ms; layer_timings"
    assert set(bad["layer_timings"]["run_id"]) == {"r1"}  # r1 is incomplete: quarantined whole
    assert report.config["max_time_ms"] == 20.0
    assert valid["allreduce_timings"].empty
    assert len(valid["layer_timings"]) == len(rows_of(tables["layer_timings"], "r2"))
    assert valid["runs"]["run_id"].tolist() == ["r2"]


# --------------------------------------------------------------------------- table-level
def test_missing_column_stops_with_message(tmp_path):
    dirs = make_dirs(tmp_path)
    tables = make_profiles()
    tables["layer_timings"] = tables["layer_timings"].drop(columns=["backward_ms"])
    write_profiles(dirs["profiles_dir"], tables)
    with pytest.raises(ValidationError) as info:
        validate_profiles(**dirs)
    message = str(info.value)
    assert str(dirs["profiles_dir"] / "layer_timings.parquet") in message
    assert "table 'layer_timings', column 'backward_ms': expect_column_to_exist" in message
    assert isinstance(info.value, ValueError)
    assert info.value.report is not None and not info.value.report.passed
    assert "expect_column_to_exist" in (dirs["report_dir"] / "index.html").read_text()
    assert not dirs["out_dir"].exists()


def test_wrong_dtype_stops(tmp_path):
    dirs = make_dirs(tmp_path)
    tables = make_profiles()
    tables["runs"]["world_size"] = tables["runs"]["world_size"].astype(str)
    tables["layer_timings"]["layer_name"] = 7
    write_profiles(dirs["profiles_dir"], tables)
    with pytest.raises(ValidationError) as info:
        validate_profiles(**dirs)
    lines = str(info.value).splitlines()[1:]
    assert len(lines) == 2
    assert "table 'runs', column 'world_size': expect_column_values_to_be_in_type_list" in lines[0]
    assert "dtype str, expected one of ['int8'" in lines[0]
    assert "table 'layer_timings', column 'layer_name'" in lines[1]


def test_fork_ranks_is_a_bool_column_null_in_older_parts(tmp_path):
    tables = make_profiles()
    tables["runs"]["fork_ranks"] = pd.Series([True, None], dtype=object)  # r2: an older part
    report, valid, _ = run(make_dirs(tmp_path / "bool"), tables)
    assert report.passed and valid["runs"]["fork_ranks"].tolist() == [True, None]
    tables["runs"]["fork_ranks"] = ["yes", "no"]
    dirs = make_dirs(tmp_path / "text")
    write_profiles(dirs["profiles_dir"], tables)
    with pytest.raises(ValidationError) as info:
        validate_profiles(**dirs)
    assert (
        "table 'runs', column 'fork_ranks': expect_column_values_to_be_in_type_list failed "
        "(dtype str, expected one of ['bool']"
    ) in str(info.value)


def test_empty_tables_stop(tmp_path):
    dirs = make_dirs(tmp_path)
    tables = make_profiles()
    for table in ("runs", "layer_timings"):
        tables[table] = tables[table].iloc[0:0]
    write_profiles(dirs["profiles_dir"], tables)
    with pytest.raises(ValidationError) as info:
        validate_profiles(**dirs)
    message = str(info.value)
    for table in ("runs", "layer_timings"):
        assert (
            f"{table}.parquet: table '{table}': expect_table_row_count_to_be_between failed "
            "(observed 0)"
        ) in message
    assert len(info.value.failures) == 2


@pytest.mark.parametrize("damage", ["truncate", "garbage", "missing"])
def test_unreadable_file_stops(tmp_path, damage):
    dirs = make_dirs(tmp_path)
    write_profiles(dirs["profiles_dir"], make_profiles())
    path = dirs["profiles_dir"] / "iteration_timings.parquet"
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "garbage":
        path.write_bytes(b"PAR1" + b"\x00\xff" * 300 + b"PAR1")
    else:
        path.unlink()
    with pytest.raises(ValidationError) as info:
        validate_profiles(**dirs)
    message = str(info.value)
    assert f"{path}: table 'iteration_timings'" in message
    assert ("file_exists" if damage == "missing" else "readable_parquet") in message
    assert (dirs["report_dir"] / "index.html").is_file()


# --------------------------------------------------------------------------- interference
def test_disturbed_run_is_quarantined_whole_with_the_probe_figures(tmp_path):
    dirs = make_dirs(tmp_path)
    tables = make_profiles()
    runs = tables["runs"]
    disturbed = runs["run_id"].iloc[0]
    runs["interference"] = runs["run_id"] == disturbed
    runs["attempts"] = np.where(runs["interference"], 3, 1)
    runs["probe_gemm_drift"] = np.where(runs["interference"], 0.84, 0.01)
    runs["probe_allreduce_drift"] = np.nan
    runs["foreign_load_cores"] = np.where(runs["interference"], 1.02, 0.0)
    report, valid, bad = run(dirs, tables)
    assert disturbed not in set(valid["runs"]["run_id"])
    for name in RUN_TABLE_NAMES:
        assert disturbed not in set(valid[name]["run_id"])
        assert (rows_of(bad[name], disturbed)["failed_expectation"] == "interference").all()
    reason = rows_of(bad["runs"], disturbed)["failed_value"].iloc[0]
    assert "3 attempt(s)" in reason and "probe_gemm_drift 0.84" in reason
    assert "foreign_load_cores 1.02" in reason
    # Every other run is kept.
    assert set(valid["runs"]["run_id"]) == set(runs["run_id"]) - {disturbed}


def test_the_schemas_cover_the_profile_tables_in_order():
    assert tuple(PROFILE_TABLES) == PROFILE_TABLE_NAMES
    for name in RUN_TABLE_NAMES:
        assert {"run_id", "workload_id", "rank"} <= {c.name for c in PROFILE_TABLES[name].columns}
