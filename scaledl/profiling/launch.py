"""Launch profiling with ``torchrun``: repeats, pinning, a quiet host, timeouts, failures, resume.

Workloads are grouped by ``(world_size, num_nodes)``. Each workload is measured in ``repeats``
independent launches: for repeat ``r`` = 0, 1, ... every group is profiled by one ``torchrun``
launch (``--nproc-per-node = world_size / num_nodes``) running :mod:`scaledl.profiling.worker`
over the group's workloads in a shuffled order (seeded per repeat; the first workload of a launch
is never the last of the group's previous launch), so two measurements of one workload are never
back to back and the label (median of the launch medians) averages over launch-to-launch
variation: model initialisation, memory layout, the state of the machine. A launch of one rank
runs the worker without ``torchrun`` (nothing to meet, no process group), and ``torchrun`` is
run as :mod:`scaledl.profiling.agent`: both exit without the interpreter's shutdown. On a CPU
node the launch's processes are forked from a zygote that imported torch, transformers and the
worker once per launcher process (:mod:`scaledl.profiling.zygote`), so a launch costs a fork, the
one-second host check and the probes' baselines, not an interpreter's imports.

Before every launch the launcher checks the load other processes put on the cores
(:func:`scaledl.profiling.hostload.wait_for_quiet_host`): it waits a bounded time for a quiet
host and logs what it saw. CPU ranks are pinned to cores of their own (``cores_per_rank``: by
default the host's cores divided by the largest local world size of the whole profile, so a
workload's ranks get the same cores at every world size), with one thread per core, and run with
glibc's dynamic mmap threshold fixed (``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_``,
mallopt(3)): measured on the quick preset, the default allocator returned large activation
buffers to the kernel and faulted them in again on some steps but not others, making step times
bimodal (BERT with 1,024 tokens: 19-32 ms; 20.7 ms stable with the threshold fixed).

The launcher watches the worker's marker file: a workload running longer than ``timeout_s`` gets
its process group killed and is recorded as ``timeout``; a launch that dies is recorded as
``failed`` for the workload it was on, with the tail of its log. In both cases the rest of the
launch is started again, so one bad workload never kills a batch. (workload, repeat) parts that
are complete (``ok`` and undisturbed) are skipped unless ``force`` is set.

One profiler writes into a profiles directory at a time (:mod:`scaledl.profiling.lock`). SIGINT
and SIGTERM stop a profile promptly (:mod:`scaledl.profiling.interrupt`): the signal is forwarded
to the launch's process group (``torchrun`` and its ranks), which gets ``STOP_GRACE_S`` seconds to
exit before it is killed; the workload in progress is recorded as ``interrupted`` (measured again
by the next run), finished parts stay, and :class:`ProfilingInterrupted` is raised with the
summary of what was done. ``kill -9`` of the launcher takes ``torchrun`` and its ranks with it
(:func:`~scaledl.profiling.interrupt.die_with_parent`), so the lock is never free while a rank
writes. The profiles directory is checked before anything is launched
(:func:`~scaledl.profiling.store.check_writable`: a read-only folder, one without room); a write
that fails later (disk full) ends the profile with :class:`ProfileStoreError` naming the folder,
every finished part kept.

Multi-node runs pass the rendezvous settings of :class:`Rendezvous` to torchrun (``--nnodes``,
``--node-rank``, ``--rdzv-backend c10d``, ``--rdzv-endpoint``); the same command must then be
started on every node.
"""

from __future__ import annotations

import atexit
import datetime as dt
import functools
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaledl.profiling.affinity import cores_per_rank_for
from scaledl.profiling.hostload import wait_for_quiet_host
from scaledl.profiling.interrupt import (
    ProfilingInterrupted,
    die_with_parent,
    interruption_reason,
    raise_if_stopped,
    stop_signals_raise,
)
from scaledl.profiling.lock import profiles_lock
from scaledl.profiling.progress import PartProgress
from scaledl.profiling.settings import ProfileSettings, Rendezvous
from scaledl.profiling.store import (
    UNWRITABLE_ERRNOS,
    ProfileStoreError,
    check_writable,
    completed_parts,
    current_marker_path,
    part_statuses,
    write_part,
)
from scaledl.profiling.zygote import ForkedProcess, Zygote
from scaledl.workloads.spec import Workload

log = logging.getLogger(__name__)

#: The module every rank runs.
WORKER_MODULE = "scaledl.profiling.worker"

#: Seconds between the launcher's looks at a running launch (marker file, time-outs, stop
#: signals), and between torchrun's looks at its workers. The launch's exit is seen at once
#: (``Popen.wait``, a non-blocking ``waitpid`` every <= 50 ms in between); torchrun notices
#: that its ranks have exited only at its next look, so every torchrun launch waits half of
#: ``MONITOR_INTERVAL_S`` on average (it was 2 s; torchrun's default 0.1 s would run its
#: monitoring ten times a second on the ranks' cores).
POLL_S = 1.0
MONITOR_INTERVAL_S = 0.5
#: Seconds a stopped launch gets to exit after the forwarded signal before it is killed.
STOP_GRACE_S = 5.0

#: The environment ``torchrun`` would give the worker of a one-rank launch (which runs without it).
SINGLE_RANK_ENV = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}

#: glibc allocator settings of CPU ranks (fixed thresholds disable the dynamic mmap threshold).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "1073741824", "MALLOC_TRIM_THRESHOLD_": "4294967296"}


@dataclass
class ProfileSummary:
    """What one :func:`profile_workloads` call did.

    Attributes:
        requested: (workload, repeat) parts asked for.
        skipped: already complete (reused).
        ok: profiled now with status ``ok`` and no interference.
        failed: workload id -> status (failed/oom/timeout) of those that did not succeed.
        interference: workload id -> repeats recorded still disturbed after their retries.
        remeasured: parts that needed more than one attempt (disturbed, then measured again).
        host_checks: one line per launch saying how loaded the host was before it.
        interrupted: ``workload_id/r<repeat>`` of the part a stop signal interrupted, if any.
        wall_s: seconds spent.
    """

    requested: int
    skipped: int = 0
    ok: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    interference: dict[str, int] = field(default_factory=dict)
    remeasured: int = 0
    host_checks: list[str] = field(default_factory=list)
    interrupted: str | None = None
    wall_s: float = 0.0

    @property
    def done(self) -> int:
        """Complete parts: reused plus profiled now."""
        return self.skipped + self.ok


def launch_command(
    nproc_per_node: int,
    nnodes: int,
    tasks: Path,
    out_dir: Path,
    rdzv: Rendezvous | None,
    zygote_socket: str | None = None,
) -> list[str]:
    """The command line of one launch: ``torchrun``, or the worker alone for one rank.

    ``torchrun`` is run as :mod:`scaledl.profiling.agent` (torch's launcher, which exits
    without the interpreter's shutdown once a launch succeeded). A launch of one rank on one
    node has nothing to meet and no process group: it runs the worker directly, with the
    environment of :data:`SINGLE_RANK_ENV`, saving the agent's start (it imports torch) and
    its stop. With ``zygote_socket`` (a one-node launch) torchrun's ranks are forked by that
    zygote (:func:`scaledl.profiling.zygote.rank_main` is torchrun's entrypoint); the launcher
    then forks the command itself from the zygote too (it is always ``python -m MODULE ...``).
    """
    args = ["--tasks", str(tasks), "--out", str(out_dir)]
    worker = ["-m", WORKER_MODULE, *args]
    if nproc_per_node == 1 and nnodes == 1:
        return [sys.executable, *worker]
    if zygote_socket is not None:
        worker = ["-m", "scaledl.profiling.zygote", "rank", zygote_socket, WORKER_MODULE, *args]
    cmd = [sys.executable, "-m", "scaledl.profiling.agent"]
    if rdzv is None or nnodes == 1:
        cmd += ["--standalone", "--nnodes=1"]
    else:
        cmd += [
            f"--nnodes={nnodes}",
            f"--node-rank={rdzv.node_rank}",
            f"--rdzv-backend={rdzv.backend}",
            f"--rdzv-endpoint={rdzv.endpoint}",
        ]
    return [*cmd, f"--nproc-per-node={nproc_per_node}", f"--monitor-interval={MONITOR_INTERVAL_S}",
            *worker]  # fmt: skip


def launch_schedule(
    workloads: list[Workload], repeats: int, done: set[tuple[str, int]], seed: int = 0
) -> list[tuple[int, int, int, list[Workload]]]:
    """The launches of a profile: ``(repeat, world_size, num_nodes, workloads)`` in order.

    Repeat by repeat, one launch per ``(world_size, num_nodes)`` group, each in its own
    shuffled order (seeded by ``seed`` and the repeat); when a group's launch would start with
    the workload its previous launch ended with, the order is rotated by one, so a workload is
    never measured twice back to back.

    Args:
        workloads: distinct workloads.
        repeats: launches per workload.
        done: (workload id, repeat) parts already complete (left out).
        seed: seed of the orders.

    Returns:
        The launches that have something to do.
    """
    groups: dict[tuple[int, int], list[Workload]] = {}
    for w in workloads:
        groups.setdefault((w.world_size, w.num_nodes), []).append(w)
    last: dict[tuple[int, int], str] = {}
    schedule = []
    for repeat in range(repeats):
        for key in sorted(groups):
            order = list(groups[key])
            random.Random(f"{seed}-{repeat}-{key}").shuffle(order)
            if len(order) > 1 and order[0].workload_id == last.get(key):
                order = order[1:] + order[:1]
            if order:
                last[key] = order[-1].workload_id
            todo = [w for w in order if (w.workload_id, repeat) not in done]
            if todo:
                schedule.append((repeat, key[0], key[1], todo))
    return schedule


def profile_workloads(
    workloads: list[Workload],
    out_dir: Path,
    settings: ProfileSettings | None = None,
    force: bool = False,
    progress: bool = True,
    on_part: Callable[[str], None] | None = None,
) -> ProfileSummary:
    """Profile workloads with torchrun, ``settings.repeats`` launches each, skipping done parts.

    Args:
        workloads: the workloads to profile.
        out_dir: the profiles directory (parts are written under ``out_dir/parts``).
        settings: profiling settings (defaults of :class:`ProfileSettings`).
        force: profile again even where a complete part exists.
        progress: show a progress bar (done/total, ETA, failures).
        on_part: called with a line for every finished part (done/total, attempts,
            re-measured, flagged, failed, time left): the Dagster asset logs them.

    Returns:
        A :class:`ProfileSummary`. Failures are recorded as parts with their status and error,
        never raised.

    Raises:
        scaledl.profiling.lock.ProfilesLocked: another profiler writes into ``out_dir``.
        scaledl.profiling.store.ProfileStoreError: ``out_dir`` cannot be written (read-only,
            no room: checked before launching) or a write failed later (disk full); names the
            folder, finished parts are kept.
        ProfilingInterrupted: SIGINT, SIGTERM or a ``KeyboardInterrupt`` stopped the profile;
            its ``summary`` says what was done, no process of the launch survives.
    """
    settings = settings or ProfileSettings()
    out_dir = Path(out_dir)
    check_writable(out_dir)
    try:
        with profiles_lock(out_dir, settings.lock_timeout_s):
            return _profile_locked(workloads, out_dir, settings, force, progress, on_part)
    except OSError as exc:
        if exc.errno not in UNWRITABLE_ERRNOS:
            raise
        raise ProfileStoreError(
            f"{out_dir}: cannot write profiles ({exc.strerror}: {exc.filename or out_dir}); "
            "the finished parts are kept: make room and run the same command to resume"
        ) from None


def _profile_locked(workloads, out_dir: Path, settings: ProfileSettings, force, progress, on_part):
    started = time.perf_counter()
    unique = list({w.workload_id: w for w in workloads}.values())
    summary = ProfileSummary(requested=len(unique) * settings.repeats)
    done = set() if force else completed_parts(out_dir)
    schedule = launch_schedule(unique, settings.repeats, done, settings.seed)
    todo = sum(len(ws) for *_, ws in schedule)
    summary.skipped = summary.requested - todo
    cuda = _uses_cuda(settings)
    cores = settings.cores_per_rank
    if cores is None:
        local_worlds = [world // nodes for _, world, nodes, _ in schedule] or [1]
        cores = 0 if cuda else cores_per_rank_for(max(local_worlds))
    bar = PartProgress(todo, out_dir, show_bar=progress, on_part=on_part)
    try:
        with stop_signals_raise():
            for repeat, world, nodes, group in schedule:
                raise_if_stopped()
                limit = settings.foreign_load_limit(cuda)
                check = wait_for_quiet_host(limit, settings.quiet_wait_s)
                line = f"launch r{repeat} world size {world}: {check.describe()}"
                (log.info if check.quiet else log.warning)(line)
                summary.host_checks.append(line)
                _profile_launch(group, repeat, world, nodes, out_dir, settings, cores, summary, bar)
    except (ProfilingInterrupted, KeyboardInterrupt) as exc:
        stopped = exc if isinstance(exc, ProfilingInterrupted) else ProfilingInterrupted(2)
        summary.wall_s = time.perf_counter() - started
        stopped.summary = summary
        raise stopped from None
    finally:
        bar.close()
    summary.wall_s = time.perf_counter() - started
    return summary


def forks_ranks(settings: ProfileSettings, cuda: bool, nodes: int) -> bool:
    """Whether a launch's ranks are forked by the zygote (:mod:`scaledl.profiling.zygote`).

    Only CPU launches on one Linux node with ``settings.fork_ranks`` set.
    """
    return settings.fork_ranks and not cuda and nodes == 1 and sys.platform.startswith("linux")


_zygote: Zygote | None = None


def shared_zygote(settings: ProfileSettings) -> Zygote:
    """The zygote of this process, started on first use (or again if it died) and kept until exit.

    One zygote serves every profile of the process (a ``make run`` profiles its shards in one
    process, so its launches share one set of imports). It runs with the ranks' allocator
    settings (:data:`MALLOC_ENV`).

    Raises:
        scaledl.profiling.zygote.ZygoteError: it did not start within
            ``settings.startup_timeout_s`` (the message holds its log; ``fork_ranks: false``
            launches fresh interpreters instead).
    """
    global _zygote
    if _zygote is not None and not _zygote.alive():
        _zygote.close()
        _zygote = None
    if _zygote is None:
        _zygote = Zygote({**os.environ, **MALLOC_ENV}, settings.startup_timeout_s)
        atexit.register(_zygote.close)
    return _zygote


def _uses_cuda(settings: ProfileSettings) -> bool:
    if settings.device == "cpu":
        return False
    # torch: only probing the local devices needs it.
    import torch

    return torch.cuda.is_available()


def _profile_launch(group, repeat, world, nodes, out_dir, settings, cores, summary, bar) -> None:
    remaining = list(group)
    while remaining:
        raise_if_stopped()
        keys = {(w.workload_id, repeat) for w in remaining}
        before = {k: v for k, v in part_statuses(out_dir).items() if k in keys}
        try:
            failed_id, status, log_tail = _launch(
                remaining, repeat, world, nodes, out_dir, settings, cores, bar
            )
        except _LaunchStopped as stop:
            after = {k: v for k, v in part_statuses(out_dir).items() if k in keys}
            _count_new(out_dir, {k[0]: v[0] for k, v in after.items() if before.get(k) != v},
                       repeat, summary)  # fmt: skip
            if stop.workload_id is not None and (stop.workload_id, repeat) not in {
                k for k, v in after.items() if before.get(k) != v
            }:
                workload = next(w for w in remaining if w.workload_id == stop.workload_id)
                reason = interruption_reason(stop.signum, stop.elapsed_s)
                _record_failure(out_dir, workload, repeat, "interrupted", reason, settings)
                summary.interrupted = f"{stop.workload_id}/r{repeat}"
            raise stop.original from None
        after = {k: v for k, v in part_statuses(out_dir).items() if k in keys}
        newly = {k[0]: v[0] for k, v in after.items() if before.get(k) != v}
        _count_new(out_dir, newly, repeat, summary)
        for wid in newly:
            bar.finished(wid, repeat)
        finished = set(newly)
        if failed_id is not None and failed_id not in finished:
            workload = next(w for w in remaining if w.workload_id == failed_id)
            _record_failure(out_dir, workload, repeat, status, _launch_error(status, log_tail),
                            settings)  # fmt: skip
            summary.failed[failed_id] = status
            finished.add(failed_id)
            bar.finished(failed_id, repeat)
        elif status != "ok" and not newly:
            # The launch died before starting any workload: record the first, go on.
            workload = remaining[0]
            _record_failure(out_dir, workload, repeat, status, _launch_error(status, log_tail),
                            settings)  # fmt: skip
            summary.failed[workload.workload_id] = status
            finished.add(workload.workload_id)
            bar.finished(workload.workload_id, repeat)
        remaining = [w for w in remaining if w.workload_id not in finished]


def _count_new(out_dir: Path, newly: dict[str, str], repeat: int, summary: ProfileSummary):
    # the store loads the layer graph (torch); only counting finished parts needs it.
    from scaledl.profiling.store import part_path, read_run

    for wid, status in newly.items():
        if status != "ok":
            summary.failed[wid] = status
            continue
        run = read_run(part_path(out_dir, wid, repeat))
        if run.get("interference"):
            summary.interference[wid] = summary.interference.get(wid, 0) + 1
        else:
            summary.ok += 1
        if run.get("attempts", 1) > 1:
            summary.remeasured += 1


def _launch(workloads, repeat, world, nodes, out_dir, settings, cores, progress=None):
    """One launch (torchrun, or the worker alone); returns (workload it died on, status, log tail).

    ``progress`` (a :class:`PartProgress`) hears of each workload as the worker moves past it.
    """
    marker = current_marker_path(out_dir)
    marker.unlink(missing_ok=True)
    # Scratch only (the task file, the launch log): the parts are written under out_dir.
    tmpdir = Path(tempfile.mkdtemp(prefix="scaledl-launch-"))
    try:
        return _launch_in(tmpdir, workloads, repeat, world, nodes, out_dir, settings, cores,
                          progress)  # fmt: skip
    finally:  # a stop signal or any error as well as the launch's end
        shutil.rmtree(tmpdir, ignore_errors=True)


def _launch_in(tmpdir, workloads, repeat, world, nodes, out_dir, settings, cores, progress):
    """:func:`_launch` with its scratch folder ``tmpdir`` (removed by the caller)."""
    marker = current_marker_path(out_dir)
    tasks = tmpdir / "tasks.json"
    cuda = _uses_cuda(settings)
    forked = forks_ranks(settings, cuda, nodes)
    tasks.write_text(
        json.dumps(
            {
                # fork_ranks: how this launch starts its ranks, recorded in the runs table.
                "settings": {**settings.worker_settings(cores, cuda), "fork_ranks": forked},
                "device": settings.device,
                "repeat": repeat,
                "workloads": [w.model_dump(mode="json") for w in workloads],
            }
        )
    )
    log_path = tmpdir / "launch.log"
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(cores or settings.threads_per_rank)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["PYTHONUNBUFFERED"] = "1"
    env["SCALEDL_LAUNCHER_PID"] = str(os.getpid())
    if not cuda:
        env.update(MALLOC_ENV)
    zygote = shared_zygote(settings) if forked else None
    if world == 1:
        env.update(SINGLE_RANK_ENV)
    with open(log_path, "wb") as log_file:
        socket_path = zygote.socket_path if zygote is not None else None
        cmd = launch_command(world // nodes, nodes, tasks, out_dir, settings.rendezvous,
                             socket_path)  # fmt: skip
        proc: subprocess.Popen | ForkedProcess
        if zygote is not None:  # cmd is [python, "-m", module, *args]
            with open(os.devnull, "rb") as devnull:
                streams = (devnull.fileno(), log_file.fileno(), log_file.fileno())
                proc = zygote.fork(cmd[2], cmd[3:], env, streams)
        else:
            proc = subprocess.Popen(
                cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                preexec_fn=functools.partial(die_with_parent, os.getpid()),
            )  # fmt: skip
        current, status = None, "ok"
        launched = time.time()
        last_id, last_start = None, launched
        try:
            while True:
                raise_if_stopped()
                try:  # returns as soon as the launch exits, not at the next look
                    proc.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                info = _read_marker(marker)
                if info is not None and info["workload_id"] != last_id:
                    if last_id is not None and progress is not None:
                        progress.finished(last_id, repeat)
                    last_id, last_start = info["workload_id"], info["started"]
                if last_id is not None and time.time() - last_start > settings.timeout_s:
                    _kill(proc)
                    current, status = last_id, "timeout"
                    break
                if last_id is None and time.time() - launched > settings.startup_timeout_s:
                    _kill(proc)
                    current, status = workloads[0].workload_id, "timeout"
                    break
        except (ProfilingInterrupted, KeyboardInterrupt) as exc:
            signum = exc.signum if isinstance(exc, ProfilingInterrupted) else signal.SIGINT
            _kill(proc, first=signum)
            info = _read_marker(marker)
            log_file.flush()
            since = info["started"] if info else launched
            raise _LaunchStopped(
                exc, signum, info["workload_id"] if info else None, _tail(log_path),
                time.time() - since,
            ) from None  # fmt: skip
        finally:
            if proc.poll() is None:  # any other exception: no launch outlives its launcher
                _kill(proc)
        if proc.returncode not in (0, None) and status == "ok":
            current, status = last_id, "failed"
    tail = _tail(log_path)
    if zygote is not None and isinstance(proc, ForkedProcess) and proc.zygote_died:
        tail += f"\nscaledl launcher: {zygote.death()}\n"
    if current is None and status != "ok":
        return None, status, tail
    return current, status, tail


def _read_marker(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


class _LaunchStopped(Exception):  # noqa: N818
    """A stop signal ended a launch; carries what the launcher records.

    Attributes:
        original: the :class:`ProfilingInterrupted` or ``KeyboardInterrupt`` re-raised.
        signum: the stop signal.
        workload_id: the workload running when it came (``None``: none started).
        log_tail: the end of the launch log (the ranks' tracebacks of the signal; kept for
            debugging, not stored in the part).
        elapsed_s: seconds the workload (else the launch) had run.
    """

    def __init__(
        self, original, signum: int, workload_id: str | None, log_tail: str, elapsed_s: float
    ) -> None:
        super().__init__(str(original))
        self.original = original
        self.signum = int(signum)
        self.workload_id = workload_id
        self.log_tail = log_tail
        self.elapsed_s = float(elapsed_s)


def _kill(proc: subprocess.Popen | ForkedProcess, first: int = signal.SIGTERM) -> None:
    """Stop the launch's whole process group (torchrun and every rank).

    Sends ``first`` to the group, waits up to :data:`STOP_GRACE_S` seconds, then sends SIGKILL
    to the group (ranks that ignored the signal, or were orphaned by torchrun, included).
    """
    try:
        os.killpg(proc.pid, first)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group
    except ProcessLookupError:
        pass
    proc.wait()


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_bytes()[-limit:].decode(errors="replace")
    except OSError:
        return ""


def _launch_error(status: str, log_tail: str) -> str:
    """The ``error`` of a part a launch failed on: its status and the launch log's tail."""
    return f"launch {status}; launch log tail:\n{log_tail}"


def _record_failure(
    out_dir, workload: Workload, repeat: int, status: str, error: str, settings
) -> None:
    """Write the part of a workload its launch ended without the worker writing it.

    Args:
        out_dir: the profiles directory.
        workload: the workload.
        repeat: the repeat.
        status: ``failed``, ``timeout`` or ``interrupted``.
        error: the part's ``error``: :func:`_launch_error` of a failure or timeout, the
            one line of :func:`~scaledl.profiling.interrupt.interruption_reason` of a stop.
        settings: the profile's settings.
    """
    now = dt.datetime.now(dt.UTC).isoformat()
    run = {
        "workload_id": workload.workload_id,
        "repeat": repeat,
        "status": status,
        "error": error,
        "host": os.uname().nodename,
        "device_name": workload.device_name,
        "device_type": "unknown",
        "world_size": workload.world_size,
        "torch_version": "",
        "python_version": "",
        "warmup_steps": settings.warmup_steps,
        "instrumented_steps": settings.instrumented_steps,
        "fork_ranks": forks_ranks(settings, _uses_cuda(settings), workload.num_nodes),
        "started_at": now,
        "finished_at": now,
    }
    write_part(out_dir, workload, run, {})
