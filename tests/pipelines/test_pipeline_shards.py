"""Profiling in shards on one host, through Dagster, with the repository's instance config.

Each Dagster run is a child process on one ``DAGSTER_HOME`` holding the repository's
``dagster.yaml`` (as ``make run``'s runs are): a shard stopped after its first part and
materialised again measures only what it lacks; two shards started at once never profile at
the same time (the ``scaledl_profiling`` pool, limit 1).
"""

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from smoke_presets import tiny_smoke

from pipelines.defs.assets.profiling import design_workloads, unmeasured_by_shard
from pipelines.home import prepare_home
from scaledl.design import read_design
from scaledl.profiling.shards import shard_key, shard_of
from scaledl.profiling.store import part_statuses

REPO = Path(__file__).resolve().parents[2]
#: Shards of the children's definitions (``SCALEDL_PROFILING_SHARDS``): two of two workloads.
N_SHARDS = 2

RUN = """
import json
import sys

import dagster as dg

from pipelines.definitions import defs as load_defs
from pipelines.defs.config import ScaledlSettings
from pipelines.defs.resources import DvcResource, LocalPredictorStore, LocalTorchrunLauncher


class StopAfterFirstPart(LocalTorchrunLauncher):
    # A Ctrl-C as soon as the shard's first part is written (the launch is stopped).
    def profile(self, workloads, out_dir, profiling, force=False, on_part=None):
        def stop(line):
            raise KeyboardInterrupt

        return super().profile(workloads, out_dir, profiling, force, on_part=stop)


data, preset, target, launcher = sys.argv[1:5]
resources = {
    "settings": ScaledlSettings(preset=preset, data_dir=data),
    "launcher": StopAfterFirstPart() if launcher == "stop" else LocalTorchrunLauncher(),
    "predictor_store": LocalPredictorStore(),
    "dvc": DvcResource(),
}
assets = list(load_defs().assets)
with dg.DagsterInstance.get() as instance:
    if target == "design":
        selection, key = ["search_space", "workload_design"], None
    else:
        selection, key = ["profiling_shard"], target
    result = dg.materialize(assets, selection=selection, partition_key=key, resources=resources,
                            instance=instance, raise_on_error=False)
    metadata = {}
    for event in result.asset_materializations_for_node(selection[-1]):
        metadata = {k: v.value for k, v in event.metadata.items()}
print("METADATA " + json.dumps(metadata, default=str))
sys.exit(0 if result.success else 3)
"""

pytestmark = pytest.mark.slow


def _start(home: Path, data: Path, preset: Path, target: str, launcher: str = "local"):
    return subprocess.Popen(
        [sys.executable, "-c", RUN, str(data), str(preset), target, launcher],
        cwd=REPO,
        env={**os.environ, "DAGSTER_HOME": str(home), "SCALEDL_PROFILING_SHARDS": str(N_SHARDS)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen) -> tuple[int, dict]:
    out, err = proc.communicate(timeout=600)
    lines = [line for line in out.splitlines() if line.startswith("METADATA ")]
    assert lines, err[-3000:]
    return proc.returncode, json.loads(lines[-1].removeprefix("METADATA "))


def _run(*args, **kwargs) -> tuple[int, dict]:
    return _finish(_start(*args, **kwargs))


def test_shards_resume_alone_and_never_overlap(tmp_path):
    home, data = prepare_home(tmp_path / "home"), tmp_path / "data"
    # Four workloads, one repeat, all on one rank: a shard's workloads share one launch (world
    # sizes and repeats are launch groups, tested in tests/profiling/test_launch.py).
    preset = tiny_smoke(tmp_path, n_workloads=4)
    assert _run(home, data, preset, "design")[0] == 0
    workloads = design_workloads(read_design(data / "design" / "design.parquet"))
    by_shard = {
        shard_key(k, N_SHARDS): {w.workload_id for w in workloads
                                 if shard_of(w.workload_id, N_SHARDS) == k}
        for k in range(N_SHARDS)
    }  # fmt: skip
    first, second = sorted(by_shard, key=lambda k: -len(by_shard[k]))
    assert len(by_shard[first]) >= 2, by_shard
    profiles = data / "profiles"

    # A shard stopped after its first part fails; its parts so far are kept.
    code, _ = _run(home, data, preset, first, "stop")
    assert code == 3
    kept = {p: run_id for p, (s, run_id) in part_statuses(profiles).items() if s == "ok"}
    assert kept and {w for w, _ in kept} <= by_shard[first]

    # Retried alone, it measures only what it lacks: the kept parts are not measured again,
    # and no other shard's workload is measured.
    code, meta = _run(home, data, preset, first)
    assert code == 0, meta
    assert meta["shard"] == first and meta["reused"] == len(kept)
    assert meta["profiled_now"] + meta["failed"] == meta["requested_parts"] - len(kept)
    statuses = part_statuses(profiles)
    assert {p: statuses[p][1] for p in kept} == kept  # same run ids: not re-measured
    assert {w for w, _ in statuses} == by_shard[first]
    assert meta["parts_kept"] + meta["failed"] >= meta["requested_parts"] - meta["disturbed_parts"]

    assert unmeasured_by_shard(workloads, {w for w, _ in statuses}, N_SHARDS) == (
        {second: sorted(by_shard[second], key=[w.workload_id for w in workloads].index)}
        if by_shard[second]
        else {}
    )

    # Both shards started at once: the pool runs one profiling step at a time.
    procs = [_start(home, data, preset, key) for key in (second, first)]
    results = [_finish(p) for p in procs]
    assert [code for code, _ in results] == [0, 0], results
    spans = sorted(
        (dt.datetime.fromisoformat(m["started_at"]), dt.datetime.fromisoformat(m["finished_at"]))
        for _, m in results
    )
    assert spans[0][1] <= spans[1][0], f"shards {second} and {first} overlapped: {spans}"
    assert results[1][1]["reused"] == results[1][1]["requested_parts"]  # nothing lacked
    assert {w for w, _ in part_statuses(profiles)} == by_shard[first] | by_shard[second]
