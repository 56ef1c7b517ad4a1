"""Real torchrun launches (gloo, CPU) of tiny workloads: the shared profile plus one relaunch."""

import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from scaledl_fixtures import SETTINGS, TIMEOUT_S
from tiny_specs import tiny

from scaledl.graph.layer_graph import build_layer_graph
from scaledl.profiling.launch import (
    MONITOR_INTERVAL_S,
    launch_command,
    launch_schedule,
    profile_workloads,
)
from scaledl.profiling.settings import ProfileSettings, Rendezvous
from scaledl.profiling.store import current_marker_path, part_path, read_run

pytestmark = pytest.mark.slow


def rows_of(profiled, table: str, name: str):
    frame = profiled.tables[table]
    return frame[frame["workload_id"] == profiled.workloads[name].workload_id]


def test_summary_counts(profiled):
    s = profiled.summary
    assert s.requested == 10 and s.skipped == 0
    assert s.ok == 8
    assert s.failed == {
        profiled.workloads["slow"].workload_id: "timeout",
        profiled.workloads["hf_bad"].workload_id: "failed",
    }


def test_every_workload_has_one_run_and_one_spec(profiled):
    runs = profiled.tables["runs"]
    ids = {w.workload_id for w in profiled.workloads.values()}
    assert set(runs["workload_id"]) == ids and runs["workload_id"].is_unique
    assert set(profiled.tables["workloads"]["workload_id"]) == ids
    # CPU ranks on one node are forked by the zygote: the worker's records and the
    # launcher's (the timed-out workload) say so.
    assert runs["fork_ranks"].tolist() == [True] * len(runs)
    for name in profiled.ok_names():
        run = profiled.run(name)
        assert run["status"] == "ok" and not run["error"], name
        assert run["device_type"] == "cpu"


@pytest.mark.parametrize("name", ["bert_ws2", "vit_ws2"])
def test_two_rank_tables(profiled, name):
    w = profiled.workloads[name]
    n_layers = len(build_layer_graph(w).layers)
    layers = rows_of(profiled, "layer_timings", name)
    assert set(layers["rank"]) == {0, 1}
    assert len(layers) == 2 * SETTINGS.instrumented_steps * n_layers
    assert (layers["forward_ms"] > 0).all() and (layers["backward_ms"] >= 0).all()
    assert layers.groupby("layer_index")["backward_ms"].max().gt(0).all()
    assert layers["fwd_flops"].notna().all() and layers["params"].sum() > 0
    allreduce = rows_of(profiled, "allreduce_timings", name)
    assert set(allreduce["rank"]) == {0, 1}
    assert (allreduce["allreduce_ms"] > 0).all()
    # One bucket (tiny model): every step all-reduces all fp32 gradients.
    params = int(build_layer_graph(w).layers["params"].sum())
    per_step = allreduce.groupby(["rank", "step"])["allreduce_bytes"].sum()
    assert len(per_step) == 2 * SETTINGS.instrumented_steps
    assert (per_step == 4 * params).all()
    iters = rows_of(profiled, "iteration_timings", name)
    assert set(iters["rank"]) == {0, 1}
    assert (iters["iteration_ms"] > 0).all()
    label = iters[iters["phase"] == "label"]
    run = profiled.run(name)
    assert len(label) == 2 * run["label_steps"] and run["label_steps"] >= 8
    epochs = rows_of(profiled, "epochs", name)
    # 8 samples, batch 2, 2 ranks: 2 steps an epoch, epochs until >= 8 label steps.
    assert set(epochs["rank"]) == {0, 1} and len(epochs) == 2 * run["label_epochs"]
    assert run["label_epochs"] * w.steps_per_epoch == run["label_steps"]
    assert (epochs["epoch_s"] > 0).all() and (epochs["steps_per_epoch"] == w.steps_per_epoch).all()
    assert run["affinity"] == "rank0:0;rank1:1"  # each rank pinned to a core of its own
    # Every label epoch is bracketed by the interleaved reference (drift correction).
    assert run["label_probes"] == run["label_epochs"] + 1
    assert run["label_probe_gemm_ms"] > 0 and run["label_probe_memory_ms"] > 0


def test_single_rank_workloads_have_no_allreduce(profiled):
    for name in ("bert_a", "vit_b", "t5_a"):
        assert rows_of(profiled, "allreduce_timings", name).empty
        layers = rows_of(profiled, "layer_timings", name)
        assert set(layers["rank"]) == {0}
        assert (layers["forward_ms"] > 0).all()
        run = profiled.run(name)
        assert run["measured_steps"] == run["label_steps"] >= 8
        assert run["measured_steps"] % profiled.workloads[name].steps_per_epoch == 0
        assert run["label_stop_reason"] in ("precise", "budget", "max_steps")
        assert 0 < run["label_halfwidth"] < 1
        assert run["attempts"] == 1 and run["repeat"] == 0
        assert run["affinity"] == "rank0:0"
        assert run["label_probes"] == run["label_epochs"] + 1
        assert run["label_probe_gemm_ms"] > 0 and run["label_probe_memory_ms"] > 0
        assert run["probe_before_gemm_ms"] > 0


def test_failure_inside_the_worker_is_recorded(profiled):
    run = profiled.run("hf_bad")
    assert run["status"] == "failed"
    assert "no_such_activation" in run["error"] and "cannot build the model" in run["error"]
    assert "rank 0:" in run["error"] and "rank 1:" in run["error"]
    for table in ("layer_timings", "iteration_timings", "allreduce_timings", "epochs"):
        assert rows_of(profiled, table, "hf_bad").empty
    # The workload after it in the same launch was profiled normally.
    assert profiled.run("vit_ws2")["status"] == "ok"
    assert len(rows_of(profiled, "layer_timings", "vit_ws2")) > 0


def test_timeout_is_recorded_and_the_rest_proceed(profiled):
    run = profiled.run("slow")
    assert run["status"] == "timeout"
    assert "launch timeout" in run["error"]
    assert rows_of(profiled, "iteration_timings", "slow").empty
    # Before and after it in the same group: all ok (the rest ran in a relaunch).
    for name in ("bert_a", "vit_a", "t5_a", "bert_b", "vit_b", "t5_b"):
        assert profiled.run(name)["status"] == "ok", name
    assert TIMEOUT_S < 60


def test_resume_skips_ok_workloads(profiled):
    ok = [profiled.workloads[n] for n in profiled.ok_names()]
    before = {w.workload_id: read_run(part_path(profiled.out_dir, w.workload_id, 0)) for w in ok}
    summary = profile_workloads(ok, profiled.out_dir, SETTINGS, progress=False)
    assert (summary.requested, summary.skipped, summary.ok, summary.failed) == (8, 8, 0, {})
    assert summary.wall_s < 5  # nothing launched
    for wid, run in before.items():
        assert read_run(part_path(profiled.out_dir, wid, 0))["run_id"] == run["run_id"]


def test_force_profiles_again(profiled, tmp_path):
    w = profiled.workloads["bert_a"]
    shutil.copytree(
        part_path(profiled.out_dir, w.workload_id, 0), part_path(tmp_path, w.workload_id, 0)
    )
    old = read_run(part_path(tmp_path, w.workload_id, 0))["run_id"]
    summary = profile_workloads([w, w], tmp_path, SETTINGS, progress=False)
    assert (summary.requested, summary.skipped, summary.ok) == (1, 1, 0)
    summary = profile_workloads([w], tmp_path, SETTINGS, force=True, progress=False)
    assert (summary.skipped, summary.ok, summary.failed) == (0, 1, {})
    run = read_run(part_path(tmp_path, w.workload_id, 0))
    assert run["status"] == "ok" and run["run_id"] != old


def test_launch_command_runs_torchrun_as_the_agent():
    tasks, out = Path("/t/tasks.json"), Path("/t/out")
    cmd = launch_command(2, 1, tasks, out, None)
    assert cmd[:3] == [sys.executable, "-m", "scaledl.profiling.agent"]
    assert "--standalone" in cmd and "--nproc-per-node=2" in cmd
    assert f"--monitor-interval={MONITOR_INTERVAL_S}" in cmd
    assert cmd[-6:] == ["-m", "scaledl.profiling.worker", "--tasks", str(tasks), "--out", str(out)]
    multi = launch_command(4, 2, tasks, out, Rendezvous("10.0.0.1:29500", node_rank=1))
    assert "--standalone" not in multi
    assert {
        "--nnodes=2",
        "--node-rank=1",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.0.0.1:29500",
        "--nproc-per-node=4",
    } <= set(multi)


def test_launch_command_of_one_rank_runs_the_worker_alone():
    tasks, out = Path("/t/tasks.json"), Path("/t/out")
    cmd = launch_command(1, 1, tasks, out, None)
    assert cmd == [sys.executable, "-m", "scaledl.profiling.worker", "--tasks", str(tasks),
                   "--out", str(out)]  # fmt: skip
    # One rank on each of two nodes still meets through torchrun.
    assert launch_command(1, 2, tasks, out, Rendezvous("10.0.0.1:29500"))[2] == (
        "scaledl.profiling.agent"
    )


def test_startup_timeout_records_the_first_workload(tmp_path, monkeypatch):
    # A launch that never starts a workload (a hung rendezvous, here a process that sleeps) is
    # killed after startup_timeout_s and its first workload is recorded as a timeout. Fresh
    # interpreters (fork_ranks off): the zygote runs modules, not `python -c`.
    import sys

    import scaledl.profiling.launch as launch

    hang = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(launch, "launch_command", lambda *args, **kwargs: hang)
    settings = ProfileSettings(
        **{**SETTINGS.__dict__, "startup_timeout_s": 1.0, "fork_ranks": False}
    )
    w = tiny("bert")
    summary = profile_workloads([w], tmp_path, settings, progress=False)
    assert summary.failed == {w.workload_id: "timeout"} and summary.ok == 0
    run = read_run(part_path(tmp_path, w.workload_id, 0))
    assert run["status"] == "timeout" and "launch timeout" in run["error"]
    assert run["fork_ranks"] is False


def test_a_zygote_killed_mid_launch_is_named_and_the_next_launch_has_a_new_one(tmp_path):
    import scaledl.profiling.launch as launch

    slow, quick = tiny("bert", dataset_size=2_000_000), tiny("bert", batch_size=4)
    marker, killed = current_marker_path(tmp_path), []

    def kill_the_zygote_once_the_workload_runs() -> None:
        deadline = time.monotonic() + 300
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        killed.append(launch._zygote.pid)
        os.kill(killed[0], signal.SIGKILL)

    killer = threading.Thread(target=kill_the_zygote_once_the_workload_runs, daemon=True)
    killer.start()
    summary = profile_workloads([slow], tmp_path, SETTINGS, progress=False)
    killer.join()
    assert summary.failed == {slow.workload_id: "failed"}
    error = read_run(part_path(tmp_path, slow.workload_id, 0))["error"]
    assert (
        f"the profiling zygote (pid {killed[0]}) died during the launch (killed by signal 9)"
    ) in error
    assert "profiling.fork_ranks: false launches fresh interpreters instead" in error
    summary = profile_workloads([quick], tmp_path, SETTINGS, progress=False)
    assert (summary.ok, summary.failed) == (1, {})
    assert launch._zygote.pid != killed[0] and launch._zygote.alive()


def test_schedule_interleaves_repeats_and_never_back_to_back():
    ws1 = [tiny("bert", batch_size=b) for b in (2, 4, 6)]
    ws2 = [tiny("vit", world_size=2, batch_size=b) for b in (2, 4)]
    schedule = launch_schedule(ws1 + ws2, repeats=3, done=set(), seed=0)
    assert [(r, ws) for r, ws, _, _ in schedule] == [(r, ws) for r in range(3) for ws in (1, 2)]
    for _, ws, _, group in schedule:
        assert len(group) == (3 if ws == 1 else 2)
    for ws in (1, 2):
        launches = [g for _, w, _, g in schedule if w == ws]
        for prev, nxt in zip(launches, launches[1:], strict=False):
            assert prev[-1].workload_id != nxt[0].workload_id
    orders = [[w.workload_id for w in g] for _, w, _, g in schedule if w == 1]
    assert len({tuple(o) for o in orders}) > 1  # shuffled per repeat


def test_schedule_resumes_per_repeat():
    ws = [tiny("bert", batch_size=b) for b in (2, 4)]
    done = {(ws[0].workload_id, 0), (ws[0].workload_id, 1), (ws[1].workload_id, 0)}
    schedule = launch_schedule(ws, repeats=2, done=done, seed=0)
    assert [(r, [w.workload_id for w in g]) for r, _, _, g in schedule] == [
        (1, [ws[1].workload_id])
    ]


# The part a launch ended on, recorded by the launcher (no torchrun: the launch is replaced).

TRACEBACK = "Traceback (most recent call last):\n" + '  File "worker.py", line 1\n' * 150


def _launch_ends(monkeypatch, tmp_path, launch_result):
    """Run ``_profile_launch`` of one workload whose launch raises or returns ``launch_result``."""
    import scaledl.profiling.launch as launch
    from scaledl.profiling.progress import PartProgress

    w = tiny("bert")

    def fake_launch(*args, **kwargs):
        if isinstance(launch_result, BaseException):
            raise launch_result
        return launch_result(w.workload_id)

    monkeypatch.setattr(launch, "_launch", fake_launch)
    summary = launch.ProfileSummary(requested=1)
    bar = PartProgress(1, tmp_path, show_bar=False)
    return (
        w,
        summary,
        lambda: launch._profile_launch([w], 0, 1, 1, tmp_path, SETTINGS, 0, summary, bar),
    )


def test_an_interrupted_part_stores_a_one_line_reason_not_the_traceback(tmp_path, monkeypatch):
    import signal

    from scaledl.profiling.launch import _LaunchStopped

    w0 = tiny("bert")
    stop = _LaunchStopped(KeyboardInterrupt(), signal.SIGINT, w0.workload_id,
                          TRACEBACK + "KeyboardInterrupt\n", 12.4)  # fmt: skip
    w, summary, run_launch = _launch_ends(monkeypatch, tmp_path, stop)
    with pytest.raises(KeyboardInterrupt):
        run_launch()
    run = read_run(part_path(tmp_path, w.workload_id, 0))
    assert run["status"] == "interrupted"
    assert run["error"] == "interrupted (SIGINT) after 12 s"
    assert summary.interrupted == f"{w.workload_id}/r0"


def test_a_failed_launch_keeps_its_log_tail(tmp_path, monkeypatch):
    tail = TRACEBACK + "RuntimeError: gloo connection reset\n"
    w, summary, run_launch = _launch_ends(monkeypatch, tmp_path, lambda wid: (wid, "failed", tail))
    run_launch()
    run = read_run(part_path(tmp_path, w.workload_id, 0))
    assert run["status"] == "failed" and summary.failed == {w.workload_id: "failed"}
    assert run["error"] == f"launch failed; launch log tail:\n{tail}"
