"""``python -m pipelines.backfill``: every shard of ``profile_design`` as its own run, one process.

The module runs as ``make run`` runs it: a child process on a ``DAGSTER_HOME`` holding the
repository's ``dagster.yaml``, the definitions' resources from the environment (a two-workload
smoke design in two shards, each shard in its own profiles directory so one can be blocked).
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from smoke_presets import tiny_smoke

from pipelines.definitions import defs as load_defs
from pipelines.defs.config import ScaledlSettings
from pipelines.defs.resources import default_resources
from pipelines.home import prepare_home
from scaledl.profiling.shards import shard_dir, shard_keys

REPO = Path(__file__).resolve().parents[2]
KEYS = shard_keys(2)

pytestmark = pytest.mark.slow


def _env(home: Path, data: Path, preset: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "SCALEDL_PRESET": str(preset),
        "SCALEDL_DATA_DIR": str(data),
        "SCALEDL_PROFILING_SHARDS": str(len(KEYS)),
        "SCALEDL_SHARD_DIRECTORIES": "1",
    }


def _backfill(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.backfill", *args],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def _runs(home: Path, skip: int) -> list[tuple[str, str, bool, set[int]]]:
    """The shard runs after the first ``skip``, oldest first: ``(partition tag, status,
    materialised, pids of its step events)``."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(job_name="profile_design"))[::-1][skip:]
        out = []
        for run in runs:
            events = [e.dagster_event for e in instance.all_logs(run.run_id) if e.dagster_event]
            out.append((
                run.tags["dagster/partition"],
                run.status.value,
                any(e.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION for e in events),
                {e.pid for e in events if e.is_step_event},
            ))  # fmt: skip
    return out


@pytest.fixture(scope="module")
def designed(tmp_path_factory) -> dict[str, str]:
    """A tiny design (two workloads, one repeat, one rank) on a fresh ``DAGSTER_HOME``."""
    root = tmp_path_factory.mktemp("backfill")
    home, data = prepare_home(root / "home"), root / "data"
    preset = tiny_smoke(root, n_workloads=2)
    result = dg.materialize(
        list(load_defs().assets),
        selection=["search_space", "workload_design"],
        resources={
            **default_resources(),
            "settings": ScaledlSettings(preset=str(preset), data_dir=str(data)),
        },
    )
    assert result.success
    return _env(home, data, preset)


def test_every_shard_is_tried_in_one_process_and_a_failed_one_resumes(designed):
    home = Path(designed["DAGSTER_HOME"])
    blocked = shard_dir(Path(designed["SCALEDL_DATA_DIR"]) / "profiles", KEYS[0])
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where the shard's profiles directory goes")

    # The first shard cannot write its profiles: its run fails, the next one still runs.
    done, pid = _backfill(designed)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"shards failed: {KEYS[0]} (make run again: kept parts are reused)"
    )
    lines = done.stdout.splitlines()
    assert [line.split()[2:4] for line in lines] == [
        [KEYS[0], "(1/2)"], [KEYS[0], "failed"], [KEYS[1], "(2/2)"], [KEYS[1], "succeeded"],
    ]  # fmt: skip
    assert _runs(home, 0) == [
        (KEYS[0], "FAILURE", False, {pid}),
        (KEYS[1], "SUCCESS", True, {pid}),
    ]

    # Unblocked, a second backfill runs both shards, in its one process, one run each.
    blocked.unlink()
    done, pid = _backfill(designed)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _runs(home, 2) == [(KEYS[0], "SUCCESS", True, {pid}), (KEYS[1], "SUCCESS", True, {pid})]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        materialised = instance.get_materialized_partitions(dg.AssetKey("profiling_shard"))
    assert materialised == set(KEYS)


def test_an_unknown_shard_key_is_refused(designed):
    done, _ = _backfill(designed, "--shards", KEYS[1], "2-of-2")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "profile_design: error: --shards 2-of-2: not a shard key; valid keys: 0-of-2 1-of-2 "
        "(SCALEDL_PROFILING_SHARDS=2)"
    )


DEAD_RUN = """
import os
import sys

import dagster as dg
from dagster._core.events import EngineEventData  # not exported: a step event by hand
from pipelines.defs.jobs import PROFILING_TAGS

with dg.DagsterInstance.get() as instance:
    run = instance.add_run(
        dg.DagsterRun(job_name="profile_design", tags=PROFILING_TAGS,
                      status=dg.DagsterRunStatus.STARTED)
    )
    event = dg.DagsterEvent(event_type_value="ENGINE_EVENT", job_name="profile_design",
                            message="started", pid=os.getpid(),  # as a step's events carry it
                            event_specific_data=EngineEventData())
    instance.report_dagster_event(event, run_id=run.run_id)
    instance.event_log_storage.set_concurrency_slots("scaledl_profiling", 1)
    instance.event_log_storage.claim_concurrency_slot("scaledl_profiling", run.run_id, "step")
    print(run.run_id)
"""


def test_a_run_whose_process_died_is_failed_and_frees_its_pool_slot(tmp_path, monkeypatch):
    # kill -9 of a shard run leaves it STARTED, holding the profiling pool's only slot.
    import dagster as dg

    from pipelines.backfill import release_dead_runs

    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(REPO)}
    made = subprocess.run([sys.executable, "-c", DEAD_RUN], env=env, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    run_id = made.stdout.split()[-1]
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        assert (
            instance.event_log_storage.get_concurrency_info("scaledl_profiling").active_slot_count
            == 1
        )
        assert release_dead_runs(instance) == [run_id]
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
        assert (
            instance.event_log_storage.get_concurrency_info("scaledl_profiling").active_slot_count
            == 0
        )
        assert release_dead_runs(instance) == []  # nothing left to release


def _pool(home: Path) -> tuple[set[str], set[str]]:
    """The run ids holding a slot of the profiling pool and those waiting for one."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        info = instance.event_log_storage.get_concurrency_info("scaledl_profiling")
        return info.active_run_ids, info.pending_run_ids


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_the_wait_for_a_pool_slot_another_live_run_holds(
    designed, tmp_path, signum
):
    # A live process holds the profiling pool's only slot (another shard run profiling).
    home = prepare_home(tmp_path / "home")
    env = {**designed, "DAGSTER_HOME": str(home), "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen(
        [sys.executable, "-c", DEAD_RUN + "    sys.stdin.read()  # alive until stdin closes\n"],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    backfill = None
    try:
        holding = holder.stdout.readline().strip()
        assert holding and _pool(home) == ({holding}, set())
        backfill = subprocess.Popen(
            [sys.executable, "-m", "pipelines.backfill"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while not _pool(home)[1] and time.monotonic() < deadline:  # its step waits
            assert backfill.poll() is None, backfill.communicate()
            time.sleep(0.2)
        (waiting,) = _pool(home)[1]
        backfill.send_signal(signum)
        out, err = backfill.communicate(timeout=120)
    finally:
        if backfill is not None and backfill.poll() is None:  # it ignored the signal
            backfill.kill()
            backfill.communicate()
        holder.stdin.close()
        holder.wait(timeout=60)
    name = signal.Signals(signum).name
    assert backfill.returncode == 128 + signum, err[-3000:]
    assert err.strip().splitlines()[-1] == (
        f"profile_design: stopped by {name}; failed: {KEYS[0]}; not started: {KEYS[1]}"
    )
    assert [line.split()[2:4] for line in out.splitlines()] == [
        [KEYS[0], "(1/2)"], [KEYS[0], "failed"],
    ]  # fmt: skip
    # The waiting run failed without profiling and withdrew its claim; the holder kept its slot.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run = instance.get_run_by_id(waiting)
        assert run.status == dg.DagsterRunStatus.FAILURE
        assert run.tags["dagster/partition"] == KEYS[0]
        steps = {e.dagster_event.event_type for e in instance.all_logs(waiting)
                 if e.dagster_event is not None}  # fmt: skip
        assert dg.DagsterEventType.STEP_START not in steps
    assert _pool(home) == ({holding}, set())
