import json

import pandas as pd
import pytest
from tiny_specs import tiny

from scaledl.profiling.store import (
    TABLES,
    ProfileStoreError,
    atomic_write_parquet,
    completed_parts,
    completed_workload_ids,
    consolidate,
    part_path,
    part_statuses,
    parts_dir,
    read_probe_baselines,
    read_run,
    write_part,
    write_probe_baselines,
)
from scaledl.workloads.spec import Workload

BERT = tiny("bert")
OTHER = BERT.model_copy(update={"batch_size": 4})
RUN = {"workload_id": BERT.workload_id, "status": "failed", "error": "boom", "host": "h"}


def ok_records(workload: Workload) -> dict[str, list[dict]]:
    layers = [
        {
            "rank": 0,
            "step": s,
            "layer_index": i,
            "layer_name": f"l{i}",
            "layer_type": "x",
            "forward_ms": 1.0 + i,
            "backward_ms": 2.0,
        }
        for s in (0, 1)
        for i in range(5)
    ]
    iterations = [
        {
            "rank": 0,
            "step": s,
            "phase": phase,
            "iteration_ms": ms,
            "forward_ms": 0.0,
            "backward_ms": 0.0,
            "optimizer_ms": 0.0,
            "allreduce_ms": 0.0,
            "allreduce_bytes": 0,
        }
        for phase, values in (("instrumented", (12.0, 12.0)), ("label", (9.0, 11.0)))
        for s, ms in enumerate(values)
    ]
    epoch = [{"rank": 0, "epoch": 0, "epoch_s": 0.05, "steps_per_epoch": 4}]
    return {"layers": layers, "iterations": iterations, "epoch": epoch}


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
    assert set(tables) == set(TABLES)
    assert list(tables["runs"]["status"]) == ["failed"]
    assert tables["runs"]["error"].iloc[0] == "boom"
    assert tables["layer_timings"].empty
    for name in TABLES:
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


def test_atomic_write_parquet_leaves_no_temporary_file(tmp_path):
    path = atomic_write_parquet(pd.DataFrame({"a": [1, 2]}), tmp_path / "sub" / "t.parquet")
    assert pd.read_parquet(path)["a"].tolist() == [1, 2]
    with pytest.raises(ValueError):  # pyarrow cannot convert an object column
        atomic_write_parquet(pd.DataFrame({"a": [object()]}), path)
    assert [p.name for p in path.parent.iterdir()] == ["t.parquet"]
    assert pd.read_parquet(path)["a"].tolist() == [1, 2]
