"""Rank-side profiler, started by ``torchrun`` (or alone): ``python -m scaledl.profiling.worker``.

One launch profiles a list of workloads that share a world size (imports cost seconds: they are
paid once per launch). At the start of a launch every rank pins itself to its own cores
(:mod:`scaledl.profiling.affinity`) and runs the calibration probe a few times; the fastest
figures are the launch's baseline (:mod:`scaledl.profiling.probe`). Per workload, every rank
then makes up to ``1 + max_retries`` *attempts*, each of which:

1. runs the probe (before), and rank 0 starts measuring the foreign load on the host
   (:mod:`scaledl.profiling.hostload`);
2. builds the model (random weights, fixed seed), wraps it in DDP when training on more than one
   rank, and creates an AdamW optimizer; runs ``warmup_steps`` iterations (DDP rebuilds its
   buckets after the first);
3. runs one calibration iteration and ``instrumented_steps`` rounds of ``layer_stride``
   iterations with per-layer forward/backward timing (each layer timed once per round), per-bucket
   all-reduce timing (first iteration of a round) and the optimizer step timed
   (:mod:`scaledl.profiling.instrument`);
4. runs real, un-instrumented epochs: ``dataset_size`` synthetic samples through a
   ``DataLoader`` with a ``DistributedSampler``; each step's time (the slowest rank's) is a label
   sample and each epoch's wall time an epoch sample; epochs continue until the adaptive stop
   rule says the label (the steps' 5% trimmed mean) is precise enough
   (:mod:`scaledl.profiling.stopping`); a short reference block of the probe runs before every
   epoch and after the last (the concurrent reference of the host-drift correction,
   :mod:`scaledl.profiling.drift`);
5. runs the probe again (after).

Drift of the host within the tolerances is corrected afterwards, not re-measured. An attempt
whose probes (before, after, or the mean of the interleaved GEMM blocks; :meth:`_Guard.drift`)
drifted from the baseline by more than their tolerances on any rank (``drift_tolerance`` for
the GEMM, ``memory_drift_tolerance`` for the memory sweep, ``allreduce_drift_tolerance`` for the
all-reduce), or during which other processes kept more than ``max_foreign_load_cores`` cores
busy, was disturbed beyond what the correction is trusted with: the worker waits (bounded) for
the host to be quiet and measures again, while retries have taken at most
``retry_budget_share`` of the launch's time. The last attempt is recorded either way; a still
disturbed one carries ``interference = True`` and its probe figures, and validation
quarantines it.

An iteration is forward + loss + backward (+ gradient all-reduce inside DDP) + AdamW step for
training, forward under ``torch.inference_mode()`` for inference. CPU ranks use gloo and
``perf_counter``; CUDA ranks use NCCL and CUDA events, synchronising only at step ends.

Rank 0 gathers every rank's records and writes the (workload, repeat) part atomically
(:func:`scaledl.profiling.store.write_part`). An exception inside a workload is recorded (status
``failed``, or ``oom``) and the batch goes on; a hang (a rank lost) ends the process when the
collective times out, and the launcher records the workload and relaunches the rest.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import gc
import json
import math
import os
import platform
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import psutil
import torch
import torch.distributed as dist

from scaledl.profiling.affinity import pin_local_rank
from scaledl.profiling.hostload import ForeignLoadMeter, wait_for_quiet_host
from scaledl.profiling.interrupt import (
    default_stop_signals,
    die_with_parent,
    exit_without_finalizing,
)
from scaledl.profiling.probe import (
    CalibrationProbe,
    ProbeResult,
    baseline_of,
    merge_baselines,
    probe_drift,
)
from scaledl.profiling.session import Session
from scaledl.profiling.stopping import StopRule
from scaledl.profiling.store import (
    current_marker_path,
    read_probe_baselines,
    write_part,
    write_probe_baselines,
)
from scaledl.workloads.spec import Workload

#: Probes taken at the start of a launch; the fastest figures are its baseline.
BASELINE_PROBES = 3


def needs_layout_session(workload: Workload) -> bool:
    """Whether a workload is profiled by :class:`~scaledl.profiling.layout_session.LayoutSession`.

    Sharded, tensor- or pipeline-parallel workloads are; any other runs as plain DDP, whatever
    its unused layout fields say.
    """
    return workload.tp_size > 1 or workload.pp_size > 1 or workload.sharding != "none"


def profile_workload(
    workload: Workload, settings: dict[str, Any], device: torch.device, interleave=None
):
    """Measure one workload on this rank (one attempt, without the guard's probes).

    Args:
        workload: the workload (``world_size`` must equal the process group's size).
        settings: the task file's settings (``warmup_steps``, ``instrumented_steps``,
            ``layer_stride``, ``seed``, the stop rule's ``label_*`` fields).
        device: this rank's device.
        interleave: the concurrent reference run between label epochs (``None``: none).

    A sharded, tensor- or pipeline-parallel workload is measured by
    :class:`scaledl.profiling.layout_session.LayoutSession` (the same steps, on the layout's
    parallel model).

    Returns:
        A dict of record lists for this rank (``layers``, ``iterations``, ``allreduce``,
        ``collectives``, ``pipeline``, ``epoch``) and the label measurement's
        ``label_steps``, ``label_halfwidth`` (relative 95% half-width of the label
        statistic), ``label_stop_reason``,
        ``label_epochs``, and the means of the interleaved reference ``label_probe_gemm_ms``
        and ``label_probe_memory_ms`` (``nan`` without one) over ``label_probes`` blocks.

    Raises:
        ValueError: the world size does not match the launch; a layout this profiler does not
            build (names the field, the value and the family).
        RuntimeError: the instrumented rounds did not time every layer call of the graph.
    """
    if needs_layout_session(workload):
        # A local import: layout_session's FSDP / tensor-parallel / pipelining imports would
        # cost every rank of a plain-DDP launch about a second.
        from scaledl.profiling.layout_session import LayoutSession

        session = LayoutSession(workload, settings, device)
    else:
        session = Session(workload, settings, device)
    session.warmup()
    result = session.instrumented()
    labels = session.labels(stop_rule_of(settings), interleave)
    result["iterations"] += labels.pop("iterations")
    result.update(labels)
    return result


def stop_rule_of(settings: dict[str, Any]) -> StopRule:
    """The :class:`StopRule` of a task file's settings (defaults where absent)."""
    keys = {
        "label_target_halfwidth": "target_rel_halfwidth",
        "label_min_steps": "min_steps",
        "label_max_steps": "max_steps",
        "label_budget_s": "budget_s",
    }
    return StopRule(**{field: settings[k] for k, field in keys.items() if k in settings})


def _status_of(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".lower()
    return "oom" if ("out of memory" in text or isinstance(exc, MemoryError)) else "failed"


class _Guard:
    """The interference guard of one launch on this rank: probe, baseline, foreign load."""

    def __init__(
        self, settings: dict[str, Any], device: torch.device, rank: int, out_dir: Path
    ) -> None:
        self.settings = settings
        self.rank = rank
        self.probe = CalibrationProbe(device, repeats=int(settings.get("probe_repeats", 5)))
        self.probe.run()  # warm-up: first-touch of the buffers, kernel selection
        own = baseline_of([self.probe.run() for _ in range(BASELINE_PROBES)])
        local_rank = os.environ.get("LOCAL_RANK", "0")
        local_world = os.environ.get("LOCAL_WORLD_SIZE", "1")
        key = (
            f"{socket.gethostname()}/{device.type}/local_world_size={local_world}/"
            f"cores_per_rank={settings.get('cores_per_rank') or 0}"
        )
        stored = read_probe_baselines(out_dir).get(key, {})
        self.baseline = merge_baselines(own, stored.get(local_rank))
        mine = {"key": key, "local_rank": local_rank, "baseline": self.baseline.to_dict()}
        if rank == 0:
            merged = read_probe_baselines(out_dir)
            for entry in _gather(mine):
                merged.setdefault(entry["key"], {})[entry["local_rank"]] = entry["baseline"]
            write_probe_baselines(out_dir, merged)
        else:
            _gather(mine)
        root = int(os.environ.get("SCALEDL_LAUNCHER_PID", os.getppid()))
        self.root_pid = root
        self.meter = ForeignLoadMeter(root) if rank == 0 else None
        self.tolerance = float(settings.get("drift_tolerance", 0.05))
        self.allreduce_tolerance = float(settings.get("allreduce_drift_tolerance", 0.25))
        self.memory_tolerance = float(settings.get("memory_drift_tolerance", 0.25))
        self.max_foreign = float(settings.get("max_foreign_load_cores", math.inf))
        self.retry_share = float(settings.get("retry_budget_share", 0.15))
        self.started = time.perf_counter()
        self.retry_s = 0.0

    def before(self) -> ProbeResult:
        probe = self.probe.run()
        if self.meter is not None:
            self.meter.start()
        return probe

    def after(self) -> tuple[ProbeResult, float]:
        foreign = self.meter.stop() if self.meter is not None else float("nan")
        return self.probe.run(), foreign

    def drift(
        self, before: ProbeResult, after: ProbeResult, result: dict[str, Any] | None = None
    ) -> dict[str, float]:
        """The worst drift of an attempt's probes, per figure (``nan`` ignored).

        The probes are the one before, the one after and, for the GEMM figure, the mean of the
        interleaved reference blocks when the attempt measured labels. The interleaved memory
        sweep is *not* judged against the baseline: one sweep between label epochs is not the
        baseline's measurement (the median of looped sweeps on a rested rank), and on a quiet
        host it takes a steady ~2x the baseline's time per sweep, which alone flagged over half
        of the parts of a fresh-clone run (``docs/history/2026-12-code-notes.md``). The
        interleaved memory figure feeds the drift correction, which compares it with the *same*
        figure of the profile's other launches (its own quiet quantile and validated range:
        :mod:`scaledl.profiling.drift`).
        """
        drifts = [probe_drift(before, self.baseline), probe_drift(after, self.baseline)]
        if result is not None and result.get("label_probes"):
            concurrent = ProbeResult(
                gemm_ms=result["label_probe_gemm_ms"], allreduce_ms=float("nan")
            )
            drifts.append(probe_drift(concurrent, self.baseline))
        out = {}
        for key in drifts[0]:
            values = [d[key] for d in drifts if d[key] == d[key]]
            out[key] = max(values) if values else float("nan")
        return out

    def may_retry(self) -> bool:
        """Whether a disturbed attempt may be measured again within the retry budget.

        Retries may take at most ``retry_budget_share`` of the launch's time so far (at least
        one minute's share), so a drifting host costs a bounded share of the profile instead
        of tripling it; beyond that, a still-disturbed attempt is recorded with
        ``interference`` (drift within the tolerances is corrected, not re-measured:
        :mod:`scaledl.profiling.drift`).
        """
        elapsed = time.perf_counter() - self.started
        return self.retry_s <= self.retry_share * max(elapsed, 60.0)

    def verdict(self, gathered: list[dict[str, Any]]) -> dict[str, Any]:
        """Drift and foreign load of an attempt over all ranks (the same on every rank)."""

        def worst(key: str) -> float:
            values = [g["drift"][key] for g in gathered if g["drift"][key] == g["drift"][key]]
            return max(values) if values else float("nan")

        gemm, allreduce, memory = worst("gemm"), worst("allreduce"), worst("memory")
        foreign = gathered[0]["foreign_load_cores"]
        disturbed = (
            gemm > self.tolerance
            or (allreduce == allreduce and allreduce > self.allreduce_tolerance)
            or (memory == memory and memory > self.memory_tolerance)
            or (foreign == foreign and foreign > self.max_foreign)
        )
        return {
            "probe_gemm_drift": gemm,
            "probe_allreduce_drift": allreduce,
            "probe_memory_drift": memory,
            "foreign_load_cores": foreign,
            "disturbed": disturbed,
        }

    def wait_for_quiet(self) -> float:
        """Rank 0 waits (bounded) for the host to be quiet; the others wait at a barrier."""
        waited = 0.0
        if self.rank == 0 and self.max_foreign < math.inf:
            report = wait_for_quiet_host(
                self.max_foreign, float(self.settings.get("retry_wait_s", 20.0)), 0.5, self.root_pid
            )
            waited = report.waited_s
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()
        return waited


def release_memory() -> None:
    """Free what the previous workload left: Python garbage, then glibc's free heap pages.

    With the mmap threshold fixed (:data:`scaledl.profiling.launch.MALLOC_ENV`) glibc never
    trims its heap by itself, so each workload would start from a heap shaped by the ones before
    it in the launch; ``malloc_trim(0)`` (malloc_trim(3)) gives the free pages back, so every
    workload starts from a compact heap whatever ran before it.

    The objects that survive the collection (imported code, caches, the guard's probe) are then
    moved to the collector's permanent generation (``gc.freeze``), so the collections Python
    starts by itself during the next workload's timed steps scan only that workload's objects: a
    full collection over the ~250,000 objects of torch and transformers takes about 0.15 s on the
    2-core reference host, a pause inside whichever step it hits (0.02 s frozen;
    ``docs/history/2026-12-run-timings.md``). A frozen object that later becomes cyclic garbage is
    not collected; a launch's ranks exit after its workloads, so that memory is bounded.
    """
    gc.collect()
    gc.freeze()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc: nothing to trim
        pass


def _gather(payload: dict[str, Any]) -> list[dict[str, Any]]:
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return [payload]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, payload)
    return gathered


def _attempts(workload: Workload, settings, device, guard: _Guard, cuda: bool):
    """Measure a workload until an attempt is undisturbed or the retries are spent.

    Returns:
        ``(gathered payloads of the last attempt, guard record)``.
    """
    max_retries = int(settings.get("max_retries", 2))
    history: list[dict[str, Any]] = []
    waited_s = 0.0
    retrying_since = None
    for attempt in range(max_retries + 1):
        before = guard.before()
        try:
            result = profile_workload(workload, settings, device, guard.probe.interleaved)
            status, error = "ok", ""
        except Exception as exc:  # recorded, never hidden: status + error text
            result, status = None, _status_of(exc)
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
            if cuda:
                torch.cuda.empty_cache()
        after, foreign = guard.after()
        drift = guard.drift(before, after, result)
        gathered = _gather(
            {
                "result": result,
                "status": status,
                "error": error,
                "drift": drift,
                "foreign_load_cores": foreign,
                "probe_before": before.to_dict(),
                "probe_after": after.to_dict(),
                "baseline": guard.baseline.to_dict(),
                "affinity": sorted(os.sched_getaffinity(0)),
            }
        )
        verdict = guard.verdict(gathered)
        history.append(verdict)
        if retrying_since is not None:
            guard.retry_s += time.perf_counter() - retrying_since
        failed = any(g["status"] != "ok" for g in gathered)
        # Every rank takes the same decision: the budget is rank 0's.
        retry = _gather({"retry": guard.may_retry()})[0]["retry"]
        if failed or not verdict["disturbed"] or attempt == max_retries or not retry:
            break
        retrying_since = time.perf_counter()
        waited_s += guard.wait_for_quiet()
    record = {
        "attempts": len(history),
        "quiet_wait_s": waited_s,
        "interference": bool(history[-1]["disturbed"]) and not failed,
        "probe_gemm_drift": history[-1]["probe_gemm_drift"],
        "probe_allreduce_drift": history[-1]["probe_allreduce_drift"],
        "probe_memory_drift": history[-1]["probe_memory_drift"],
        "foreign_load_cores": history[-1]["foreign_load_cores"],
        "disturbed_attempts": sum(h["disturbed"] for h in history),
    }
    return gathered, record


def run_tasks(tasks_path: Path, out_dir: Path) -> None:
    """Profile every workload of a task file on this rank (the torchrun entry point)."""
    spec = json.loads(Path(tasks_path).read_text())
    settings = spec["settings"]
    cuda = torch.cuda.is_available() and spec.get("device", "auto") != "cpu"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cores_per_rank = settings.get("cores_per_rank")
    if cores_per_rank:
        pin_local_rank(local_rank, int(cores_per_rank))
    if cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        if not cores_per_rank:
            torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        device = torch.device("cpu")
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group(
            backend="nccl" if cuda else "gloo",
            timeout=dt.timedelta(seconds=settings.get("collective_timeout_s", 120)),
        )
    rank = dist.get_rank() if distributed else 0
    repeat = int(spec.get("repeat", 0))
    try:
        guard = _Guard(settings, device, rank, out_dir)
        for record in spec["workloads"]:
            workload = Workload.parse(record, source=str(tasks_path))
            if rank == 0:
                current_marker_path(out_dir).write_text(
                    json.dumps(
                        {
                            "workload_id": workload.workload_id,
                            "repeat": repeat,
                            "started": time.time(),
                        }
                    )
                )
            started = dt.datetime.now(dt.UTC).isoformat()
            release_memory()
            gathered, guard_record = _attempts(workload, settings, device, guard, cuda)
            if rank == 0:
                _write(out_dir, workload, settings, gathered, guard_record, started, device, repeat)
    finally:
        if distributed:
            dist.destroy_process_group()


def _write(out_dir, workload, settings, gathered, guard_record, started, device, repeat) -> None:
    statuses = [g["status"] for g in gathered]
    status = next((s for s in statuses if s != "ok"), "ok")
    error = "\n".join(f"rank {r}: {g['error']}" for r, g in enumerate(gathered) if g["error"])
    tables: dict[str, list[dict[str, Any]]] = {
        "layers": [],
        "iterations": [],
        "allreduce": [],
        "collectives": [],
        "pipeline": [],
        "epoch": [],
    }
    run = {
        "workload_id": workload.workload_id,
        "repeat": repeat,
        "status": status,
        "error": error,
        "host": socket.gethostname(),
        "device_name": workload.device_name,
        "device_type": device.type,
        "world_size": workload.world_size,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "warmup_steps": settings["warmup_steps"],
        "instrumented_steps": settings["instrumented_steps"],
        "layer_stride": int(settings.get("layer_stride", 1)),
        "fork_ranks": bool(settings.get("fork_ranks", False)),  # forked by the zygote
        "started_at": started,
        "finished_at": dt.datetime.now(dt.UTC).isoformat(),
        "affinity": ";".join(
            f"rank{r}:{','.join(map(str, g['affinity']))}" for r, g in enumerate(gathered)
        ),
        "probe_gemm_ms": max(g["probe_after"]["gemm_ms"] for g in gathered),
        "probe_allreduce_ms": max(g["probe_after"]["allreduce_ms"] for g in gathered),
        "baseline_gemm_ms": max(g["baseline"]["gemm_ms"] for g in gathered),
        "baseline_allreduce_ms": max(g["baseline"]["allreduce_ms"] for g in gathered),
        "probe_memory_ms": gathered[0]["probe_after"]["memory_ms"],
        "probe_before_gemm_ms": max(g["probe_before"]["gemm_ms"] for g in gathered),
        "probe_before_memory_ms": gathered[0]["probe_before"]["memory_ms"],
        "baseline_memory_ms": gathered[0]["baseline"]["memory_ms"],
        **guard_record,
    }
    if status == "ok":
        first = gathered[0]["result"]
        run.update({k: first[k] for k in ("label_steps", "label_halfwidth", "label_stop_reason")})
        run["label_epochs"] = first["label_epochs"]
        run["label_probes"] = first["label_probes"]
        # The slowest rank's reference (its steps set the label), the memory bus of node 0.
        run["label_probe_gemm_ms"] = max(g["result"]["label_probe_gemm_ms"] for g in gathered)
        run["label_probe_memory_ms"] = first["label_probe_memory_ms"]
        for g in gathered:
            for name in tables:
                tables[name].extend(g["result"][name])
    write_part(out_dir, workload, run, tables)


def main(argv: list[str] | None = None) -> None:
    """Command-line entry: ``--tasks FILE.json --out DIR``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    default_stop_signals()  # torchrun's SIGTERM stops this rank, whatever its parent ignored
    die_with_parent()  # torchrun's death (it dies with the launcher) ends this rank too
    launcher = int(os.environ.get("SCALEDL_LAUNCHER_PID", "0"))
    if launcher and not psutil.pid_exists(launcher):
        sys.exit("scaledl worker: the launcher died while this rank started")
    run_tasks(args.tasks, args.out)
    # Every part is written and the process group destroyed: skip the interpreter's shutdown.
    exit_without_finalizing(0)


if __name__ == "__main__":
    main()
