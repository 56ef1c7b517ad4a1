"""Launch profiling with ``torchrun``: batches per world size, timeouts, failures recorded, resume.

Workloads are grouped by ``(world_size, num_nodes)``; each group is profiled by one ``torchrun``
launch (``--nproc-per-node = world_size / num_nodes``) running
:mod:`scaledl.profiling.worker` over the group's task file, so the seconds of imports are paid
once per group. The launcher watches the worker's marker file: a workload running longer than
``timeout_s`` gets its process group killed and is recorded as ``timeout``; a launch that dies is
recorded as ``failed`` for the workload it was on, with the tail of its log. In both cases the
rest of the group is launched again, so one bad workload never kills a batch. Workloads whose part
already says ``ok`` are skipped unless ``force`` is set.

CPU ranks run with ``OMP_NUM_THREADS`` threads each (default 1: on 2 cores, 2 threads per rank
made BERT 6x slower through oversubscription). Multi-node runs pass the rendezvous settings of
:class:`Rendezvous` to torchrun (``--nnodes``, ``--node-rank``, ``--rdzv-backend c10d``,
``--rdzv-endpoint``); the same command must then be started on every node.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from scaledl.profiling.store import (
    completed_workload_ids,
    current_marker_path,
    parts_dir,
    read_run,
    write_part,
)
from scaledl.workloads.spec import Workload


@dataclass(frozen=True)
class Rendezvous:
    """Torchrun rendezvous settings for multi-node profiling.

    Attributes:
        endpoint: ``host:port`` of the c10d rendezvous (node 0's address).
        node_rank: this node's rank (0..nnodes-1).
        backend: rendezvous backend (``c10d``).
    """

    endpoint: str
    node_rank: int = 0
    backend: str = "c10d"


@dataclass
class ProfileSettings:
    """How each workload is profiled.

    Attributes:
        warmup_steps: iterations before measuring (DDP rebuilds buckets after the first).
        instrumented_steps: iterations timed per layer.
        timeout_s: seconds one workload may take before it is killed and recorded ``timeout``.
        threads_per_rank: ``OMP_NUM_THREADS`` of each CPU rank.
        seed: model initialisation seed.
        collective_timeout_s: process-group timeout (a lost rank fails the launch after it).
        startup_timeout_s: seconds a launch may take before its first workload starts
            (imports, rendezvous); past it the launch is killed and its first workload recorded
            ``timeout``.
        device: ``auto`` (CUDA when present) or ``cpu``.
        rendezvous: multi-node rendezvous, or ``None`` for single-node ``--standalone``.
    """

    warmup_steps: int = 2
    instrumented_steps: int = 2
    timeout_s: float = 300.0
    threads_per_rank: int = 1
    seed: int = 0
    collective_timeout_s: float = 120.0
    startup_timeout_s: float = 600.0
    device: str = "auto"
    rendezvous: Rendezvous | None = field(default=None)

    def worker_settings(self) -> dict[str, Any]:
        """The settings the worker reads from its task file."""
        return {
            "warmup_steps": self.warmup_steps,
            "instrumented_steps": self.instrumented_steps,
            "seed": self.seed,
            "collective_timeout_s": self.collective_timeout_s,
        }


@dataclass
class ProfileSummary:
    """What one :func:`profile_workloads` call did.

    Attributes:
        requested: workloads asked for.
        skipped: already profiled (``ok`` parts reused).
        ok: profiled now with status ``ok``.
        failed: workload id -> status (failed/oom/timeout) of those that did not succeed.
        wall_s: seconds spent.
    """

    requested: int
    skipped: int = 0
    ok: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0


def torchrun_command(
    nproc_per_node: int, nnodes: int, tasks: Path, out_dir: Path, rdzv: Rendezvous | None
) -> list[str]:
    """The ``torchrun`` command line of one launch."""
    cmd = [sys.executable, "-m", "torch.distributed.run"]
    if rdzv is None or nnodes == 1:
        cmd += ["--standalone", "--nnodes=1"]
    else:
        cmd += [
            f"--nnodes={nnodes}",
            f"--node-rank={rdzv.node_rank}",
            f"--rdzv-backend={rdzv.backend}",
            f"--rdzv-endpoint={rdzv.endpoint}",
        ]
    cmd += [
        f"--nproc-per-node={nproc_per_node}",
        "-m",
        "scaledl.profiling.worker",
        "--tasks",
        str(tasks),
        "--out",
        str(out_dir),
    ]
    return cmd


def profile_workloads(
    workloads: list[Workload],
    out_dir: Path,
    settings: ProfileSettings | None = None,
    force: bool = False,
    progress: bool = True,
) -> ProfileSummary:
    """Profile workloads with torchrun, skipping those already profiled.

    Args:
        workloads: the workloads to profile.
        out_dir: the profiles directory (parts are written under ``out_dir/parts``).
        settings: profiling settings (defaults of :class:`ProfileSettings`).
        force: profile again even where an ``ok`` part exists.
        progress: show a progress bar (done/total, ETA, failures).

    Returns:
        A :class:`ProfileSummary`. Failures are recorded as parts with their status and error,
        never raised.
    """
    settings = settings or ProfileSettings()
    out_dir = Path(out_dir)
    started = time.perf_counter()
    unique = list({w.workload_id: w for w in workloads}.values())
    summary = ProfileSummary(requested=len(unique))
    done = set() if force else completed_workload_ids(out_dir)
    todo = [w for w in unique if w.workload_id not in done]
    summary.skipped = len(unique) - len(todo)
    groups: dict[tuple[int, int], list[Workload]] = {}
    for w in todo:
        groups.setdefault((w.world_size, w.num_nodes), []).append(w)
    bar = tqdm(total=len(todo), disable=not progress, desc="profiling", unit="workload")
    try:
        for (world, nodes), group in sorted(groups.items()):
            _profile_group(group, world, nodes, out_dir, settings, summary, bar)
    finally:
        bar.close()
    summary.wall_s = time.perf_counter() - started
    return summary


def _profile_group(group, world, nodes, out_dir, settings, summary, bar) -> None:
    remaining = list(group)
    while remaining:
        before = _statuses(out_dir, remaining)
        failed_id, status, log_tail = _launch(remaining, world, nodes, out_dir, settings)
        after = _statuses(out_dir, remaining)
        newly = {k: v[0] for k, v in after.items() if before.get(k) != v}
        for wid, st in newly.items():
            if st == "ok":
                summary.ok += 1
            else:
                summary.failed[wid] = st
            bar.update(1)
        finished = set(newly)
        if failed_id is not None and failed_id not in finished:
            workload = next(w for w in remaining if w.workload_id == failed_id)
            _record_failure(out_dir, workload, status, log_tail, settings)
            summary.failed[failed_id] = status
            finished.add(failed_id)
            bar.update(1)
        elif status != "ok" and not newly:
            # The launch died before starting any workload: record the first, go on.
            workload = remaining[0]
            _record_failure(out_dir, workload, status, log_tail, settings)
            summary.failed[workload.workload_id] = status
            finished.add(workload.workload_id)
            bar.update(1)
        bar.set_postfix(failed=len(summary.failed))
        remaining = [w for w in remaining if w.workload_id not in finished]


def _statuses(out_dir: Path, workloads: list[Workload]) -> dict[str, tuple[str, str]]:
    """``workload_id -> (status, run_id)`` of the parts present now."""
    result = {}
    for w in workloads:
        part = parts_dir(out_dir) / w.workload_id
        if (part / "run.json").exists():
            run = read_run(part)
            result[w.workload_id] = (run["status"], run["run_id"])
    return result


def _launch(workloads, world, nodes, out_dir, settings) -> tuple[str | None, str, str]:
    """One torchrun launch; returns (workload it died on, status, log tail)."""
    marker = current_marker_path(out_dir)
    marker.unlink(missing_ok=True)
    tmpdir = Path(tempfile.mkdtemp(prefix="scaledl-launch-"))
    tasks = tmpdir / "tasks.json"
    tasks.write_text(
        json.dumps(
            {
                "settings": settings.worker_settings(),
                "device": settings.device,
                "workloads": [w.model_dump(mode="json") for w in workloads],
            }
        )
    )
    log_path = tmpdir / "torchrun.log"
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(settings.threads_per_rank)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["PYTHONUNBUFFERED"] = "1"
    cmd = torchrun_command(world // nodes, nodes, tasks, out_dir, settings.rendezvous)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        current, status = None, "ok"
        launched = time.time()
        last_id, last_start = None, launched
        while proc.poll() is None:
            time.sleep(0.2)
            info = _read_marker(marker)
            if info is not None and info["workload_id"] != last_id:
                last_id, last_start = info["workload_id"], info["started"]
            if last_id is not None and time.time() - last_start > settings.timeout_s:
                _kill(proc)
                current, status = last_id, "timeout"
                break
            if last_id is None and time.time() - launched > settings.startup_timeout_s:
                _kill(proc)
                current, status = workloads[0].workload_id, "timeout"
                break
        if proc.returncode not in (0, None) and status == "ok":
            current, status = last_id, "failed"
    tail = _tail(log_path)
    shutil.rmtree(tmpdir, ignore_errors=True)
    if current is None and status != "ok":
        return None, status, tail
    return current, status, tail


def _read_marker(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _kill(proc: subprocess.Popen) -> None:
    """Terminate the launch's whole process group (torchrun and every rank)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_bytes()[-limit:].decode(errors="replace")
    except OSError:
        return ""


def _record_failure(out_dir, workload: Workload, status: str, log_tail: str, settings) -> None:
    now = dt.datetime.now(dt.UTC).isoformat()
    run = {
        "workload_id": workload.workload_id,
        "status": status,
        "error": f"launch {status}; torchrun log tail:\n{log_tail}",
        "host": os.uname().nodename,
        "device_name": workload.device_name,
        "device_type": "unknown",
        "world_size": workload.world_size,
        "torch_version": "",
        "python_version": "",
        "warmup_steps": settings.warmup_steps,
        "instrumented_steps": settings.instrumented_steps,
        "started_at": now,
        "finished_at": now,
    }
    write_part(out_dir, workload, run, {})
