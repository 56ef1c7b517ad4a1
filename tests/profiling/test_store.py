import errno
import json
import shutil

import pandas as pd
import pytest
from faults import FsyncSpy, count_io, crash_at, tmpfs
from profile_tables import ok_records
from tiny_specs import tiny

from scaledl.profiles.tables import PROFILE_TABLE_NAMES
from scaledl.profiling import store
from scaledl.profiling.store import (
    ProfileStoreError,
    check_writable,
    completed_parts,
    completed_workload_ids,
    consolidate,
    part_path,
    part_problem,
    part_statuses,
    parts_dir,
    read_probe_baselines,
    read_run,
    write_part,
    write_probe_baselines,
)

BERT = tiny("bert")
OTHER = BERT.model_copy(update={"batch_size": 4})
RUN = {"workload_id": BERT.workload_id, "status": "failed", "error": "boom", "host": "h"}


def test_ok_part_has_every_table_and_summary(tmp_path):
    part = write_part(tmp_path, BERT, {**RUN, "status": "ok", "error": ""}, ok_records(BERT))
    assert part == parts_dir(tmp_path) / BERT.workload_id / "r0"
    run = read_run(part)
    assert run["status"] == "ok" and run["run_id"].startswith(BERT.workload_id + "-r0-")
    assert run["repeat"] == 0 and run["interference"] is False
    assert run["measured_steps"] == 2
    assert run["label_ms"] == pytest.approx(10.0)
    assert run["instrumentation_overhead"] == pytest.approx(12.0 / 10.0 - 1.0)
    assert run["iteration_cv"] == pytest.approx(1.4826 * 1.0 / 10.0)  # robust: 1.4826 MAD/median
    layers = pd.read_parquet(part / "layer_timings.parquet")
    assert len(layers) == 10
    # Analytical features come from the layer graph.
    assert (layers["fwd_flops"] > 0).any() and layers["params"].notna().all()
    epochs = pd.read_parquet(part / "epochs.parquet")
    assert list(epochs["dataset_size"]) == [8]
    assert json.loads((part / "workload.json").read_text())["workload_id"] == BERT.workload_id
    assert completed_workload_ids(tmp_path) == {BERT.workload_id}
    assert list(epochs["epoch"]) == [0]


def test_repeats_are_parts_of_their_own(tmp_path):
    ok = {**RUN, "status": "ok", "error": ""}
    write_part(tmp_path, BERT, ok, ok_records(BERT))
    assert completed_workload_ids(tmp_path, repeats=2) == set()
    write_part(tmp_path, BERT, {**ok, "repeat": 1}, ok_records(BERT))
    assert completed_parts(tmp_path) == {(BERT.workload_id, 0), (BERT.workload_id, 1)}
    assert completed_workload_ids(tmp_path, repeats=2) == {BERT.workload_id}
    tables = consolidate(tmp_path)
    assert sorted(tables["runs"]["repeat"]) == [0, 1]
    assert len(tables["workloads"]) == 1  # the spec once, however many repeats
    assert tables["runs"]["run_id"].is_unique


def test_disturbed_part_is_not_complete(tmp_path):
    ok = {**RUN, "status": "ok", "error": ""}
    write_part(tmp_path, BERT, {**ok, "interference": True}, ok_records(BERT))
    assert completed_parts(tmp_path) == set()
    assert part_statuses(tmp_path)[(BERT.workload_id, 0)][0] == "ok"


def test_probe_baselines_round_trip(tmp_path):
    assert read_probe_baselines(tmp_path) == {}
    data = {"h/cpu/1/1": {"0": {"gemm_ms": 10.0, "allreduce_ms": float("nan")}}}
    write_probe_baselines(tmp_path, data)
    assert read_probe_baselines(tmp_path) == {
        "h/cpu/1/1": {"0": {"gemm_ms": 10.0, "allreduce_ms": None}}
    }
    (tmp_path / "probe_baselines.json").write_text("[1, 2]")
    with pytest.raises(ProfileStoreError, match="probe_baselines.json"):
        read_probe_baselines(tmp_path)


def test_failed_part_is_not_completed_but_is_consolidated(tmp_path):
    write_part(tmp_path, BERT, RUN, {})
    assert completed_workload_ids(tmp_path) == set()
    assert part_statuses(tmp_path)[(BERT.workload_id, 0)][0] == "failed"
    tables = consolidate(tmp_path)
    assert set(tables) == set(PROFILE_TABLE_NAMES)
    assert list(tables["runs"]["status"]) == ["failed"]
    assert tables["runs"]["error"].iloc[0] == "boom"
    assert tables["layer_timings"].empty
    for name in PROFILE_TABLE_NAMES:
        assert (tmp_path / f"{name}.parquet").exists()


def test_write_part_is_atomic(tmp_path):
    with pytest.raises(TypeError):
        write_part(tmp_path, BERT, {**RUN, "error": object()}, {})  # not JSON: fails mid-write
    # Neither the part nor a temporary directory.
    assert list((parts_dir(tmp_path) / BERT.workload_id).iterdir()) == []

    first = write_part(tmp_path, BERT, RUN, {})
    before = read_run(first)
    with pytest.raises(TypeError):
        write_part(tmp_path, BERT, {**RUN, "error": object()}, {})
    assert [p.name for p in (parts_dir(tmp_path) / BERT.workload_id).iterdir()] == ["r0"]
    assert read_run(first) == before  # the previous part is intact


def test_rewrite_replaces_the_part(tmp_path):
    first = read_run(write_part(tmp_path, BERT, RUN, {}))
    second = read_run(write_part(tmp_path, BERT, {**RUN, "error": "again"}, {}))
    assert first["run_id"] != second["run_id"]
    assert read_run(part_path(tmp_path, BERT.workload_id, 0))["error"] == "again"


def test_consolidate_names_the_unreadable_part_file(tmp_path):
    write_part(tmp_path, BERT, RUN, {})
    part = write_part(tmp_path, OTHER, {**RUN, "workload_id": OTHER.workload_id}, {})
    (part / "allreduce_timings.parquet").write_bytes(b"not parquet")
    with pytest.raises(ProfileStoreError) as info:
        consolidate(tmp_path)
    assert str(part / "allreduce_timings.parquet") in str(info.value)
    # Only the other workload: consolidates fine.
    tables = consolidate(tmp_path, workload_ids={BERT.workload_id})
    assert list(tables["workloads"]["workload_id"]) == [BERT.workload_id]


def test_consolidate_names_an_unreadable_run_record(tmp_path):
    part = write_part(tmp_path, BERT, RUN, {})
    (part / "run.json").write_text("{truncated")
    with pytest.raises(ProfileStoreError) as info:
        consolidate(tmp_path)
    assert str(part / "run.json") in str(info.value)


# ------------------------------------------------------------------ faults (issue 23)
def test_an_empty_or_unreadable_part_is_measured_again(tmp_path, caplog):
    part = write_part(tmp_path, BERT, {**RUN, "status": "ok"}, ok_records(BERT))
    assert completed_parts(tmp_path) == {(BERT.workload_id, 0)}
    (part / "layer_timings.parquet").write_bytes(b"")  # a crash on a file system without fsync
    with caplog.at_level("WARNING"):
        assert completed_parts(tmp_path) == set()
    assert f"{part}: unusable part, measured again" in caplog.text
    assert "layer_timings.parquet" in caplog.text
    assert part_statuses(tmp_path) == {}
    (part / "run.json").write_bytes(b"")
    assert completed_parts(tmp_path) == set()  # no traceback either
    write_part(tmp_path, BERT, {**RUN, "status": "ok"}, ok_records(BERT))  # the re-measurement
    assert completed_parts(tmp_path) == {(BERT.workload_id, 0)}


def test_a_crash_at_every_io_call_of_write_part_then_a_retry(tmp_path):
    folder = parts_dir(tmp_path) / BERT.workload_id
    part = part_path(tmp_path, BERT.workload_id, 0)

    def write():
        write_part(tmp_path, BERT, {**RUN, "error": "new"}, {})

    write_part(tmp_path, BERT, RUN, {})
    calls = count_io(write)
    assert calls > 10
    for n in range(1, calls + 1):
        write_part(tmp_path, BERT, RUN, {})
        crash_at(n, write)
        assert part_problem(part) is None, n  # whole: the old part or the new one
        assert read_run(part)["error"] in ("boom", "new")
        write()
        assert read_run(part)["error"] == "new"
        assert [p.name for p in folder.iterdir() if p.name[0] != "."] == ["r0"]


def test_write_part_fsyncs_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    write_part(tmp_path, BERT, RUN, {})
    spy = FsyncSpy().install(monkeypatch)
    write_part(tmp_path, BERT, {**RUN, "status": "ok"}, ok_records(BERT))
    spy.assert_durable()
    assert [dst.name for _, _, dst, _ in spy.replaces()] == ["r0"]
    spy.events.clear()
    consolidate(tmp_path)
    spy.assert_durable()


def test_a_read_only_profiles_folder_is_named_before_launching(tmp_path, monkeypatch):
    # Tests run as root, for whom a chmod'd folder stays writable: the file system says EROFS.
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(store.tempfile, "TemporaryFile", read_only)
    with pytest.raises(ProfileStoreError) as info:
        check_writable(tmp_path)
    assert str(parts_dir(tmp_path)) in str(info.value)
    assert "cannot write profiles here: Read-only file system" in str(info.value)


def test_a_full_disk_is_named_before_launching(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(store.shutil, "disk_usage", lambda _: usage._replace(free=1 << 20))
    with pytest.raises(ProfileStoreError, match=r"only 1.0 MiB free, profiling needs at least 64"):
        check_writable(tmp_path)


def test_a_disk_full_while_profiling_is_a_named_error_keeping_the_parts(tmp_path, monkeypatch):
    from scaledl.profiling import launch

    kept = write_part(tmp_path, BERT, {**RUN, "status": "ok"}, ok_records(BERT))

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(parts_dir(tmp_path) / "x"))

    monkeypatch.setattr(launch, "_profile_locked", disk_full)
    with pytest.raises(ProfileStoreError) as info:
        launch.profile_workloads([OTHER], tmp_path)
    assert f"{tmp_path}: cannot write profiles (No space left on device" in str(info.value)
    assert "finished parts are kept" in str(info.value)
    assert part_problem(kept) is None


def test_a_real_full_disk_keeps_the_old_part_and_leaves_no_temporary(tmp_path):
    with tmpfs(tmp_path / "small", size="1m") as out:
        old = write_part(out, BERT, RUN, {})
        filler = out / "filler"
        with pytest.raises(OSError) as info:
            with open(filler, "wb") as f:
                while True:
                    f.write(b"\0" * 65536)
        assert info.value.errno == errno.ENOSPC
        with pytest.raises(OSError) as info:
            write_part(out, BERT, {**RUN, "status": "ok"}, ok_records(BERT))
        assert info.value.errno == errno.ENOSPC
        assert read_run(old)["error"] == "boom" and part_problem(old) is None
        assert [p.name for p in old.parent.iterdir()] == ["r0"]
        with pytest.raises(ProfileStoreError, match=r"MiB free, profiling needs at least"):
            check_writable(out)


def test_parts_of_shard_directories_count_as_the_directory_s_own(tmp_path):
    from scaledl.profiling.shards import shard_dir

    ok = {**RUN, "status": "ok", "error": ""}
    write_part(tmp_path, BERT, ok, ok_records(BERT))
    write_part(shard_dir(tmp_path, "1-of-2"), OTHER, {**ok, "workload_id": OTHER.workload_id},
               ok_records(OTHER))  # fmt: skip
    both = {(BERT.workload_id, 0), (OTHER.workload_id, 0)}
    assert completed_parts(tmp_path) == both
    assert set(part_statuses(tmp_path)) == both
    # A shard's own directory sees only its parts (its resume is its own).
    assert completed_parts(shard_dir(tmp_path, "1-of-2")) == {(OTHER.workload_id, 0)}
    tables = consolidate(tmp_path)
    assert set(tables["runs"]["workload_id"]) == {BERT.workload_id, OTHER.workload_id}
    assert (tmp_path / "runs.parquet").is_file()


def test_a_part_in_two_shard_directories_is_named(tmp_path):
    from scaledl.profiling.shards import shard_dir

    ok = {**RUN, "status": "ok", "error": ""}
    write_part(shard_dir(tmp_path, "0-of-2"), BERT, ok, ok_records(BERT))
    write_part(shard_dir(tmp_path, "1-of-4"), BERT, ok, ok_records(BERT))
    with pytest.raises(ProfileStoreError, match="0-of-2.*also in.*1-of-4|1-of-4.*also in.*0-of-2"):
        consolidate(tmp_path)
