"""Rank-side profiler, started by ``torchrun``: ``python -m scaledl.profiling.worker``.

One launch profiles a list of workloads that share a world size (imports cost seconds: they are
paid once per launch). Per workload, every rank:

1. builds the model (random weights, fixed seed), wraps it in DDP when training on more than one
   rank, and creates an AdamW optimizer;
2. runs ``warmup_steps`` iterations (DDP rebuilds its buckets after the first one);
3. runs ``instrumented_steps`` iterations with per-layer forward/backward timing, per-bucket
   all-reduce timing and the optimizer step timed (:mod:`scaledl.profiling.instrument`);
4. runs one real epoch, un-instrumented: ``dataset_size`` synthetic samples through a
   ``DataLoader`` with a ``DistributedSampler``; each step's time is an iteration label and the
   loop's wall time is the epoch label.

An iteration is forward + loss + backward (+ gradient all-reduce inside DDP) + AdamW step for
training, forward under ``torch.inference_mode()`` for inference. CPU ranks use gloo and
``perf_counter``; CUDA ranks use NCCL and CUDA events, synchronising only at step ends.

Rank 0 gathers every rank's records and writes the workload's tables atomically
(:func:`scaledl.profiling.store.write_part`). An exception inside a workload is recorded (status
``failed``, or ``oom``) and the batch goes on; a hang (a rank lost) ends the process when the
collective times out, and the launcher records the workload and relaunches the rest.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import socket
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from scaledl.graph.layer_graph import build_layer_graph
from scaledl.graph.units import find_units
from scaledl.profiling.instrument import AllReduceRecorder, LayerInstrument
from scaledl.profiling.store import current_marker_path, write_part
from scaledl.profiling.timers import Clock
from scaledl.workloads.builders import build_model, make_batch, training_loss
from scaledl.workloads.spec import Workload


class SyntheticDataset(Dataset):
    """``size`` synthetic samples of a workload; sample ``i`` is the same on every call."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload.model_copy(update={"batch_size": 1})
        self.size = workload.dataset_size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(index)
        return {k: v[0] for k, v in make_batch(self.workload, generator=gen).items()}


def _step(model, optimizer, batch, train: bool):
    if not train:
        with torch.inference_mode():
            model(**batch)
        return None
    loss = training_loss(model(**batch))
    loss.backward()
    return loss


def profile_workload(workload: Workload, settings: dict[str, Any], device: torch.device):
    """Profile one workload on this rank.

    Args:
        workload: the workload (``world_size`` must equal the process group's size).
        settings: ``warmup_steps``, ``instrumented_steps`` and ``seed``.
        device: this rank's device.

    Returns:
        A dict of record lists for this rank: ``layers``, ``iterations``, ``allreduce``,
        ``epoch``.
    """
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    if world != workload.world_size:
        raise ValueError(
            f"workload {workload.workload_id}: world_size={workload.world_size} but the launch "
            f"has {world} ranks"
        )
    torch.manual_seed(settings.get("seed", 0))
    train = workload.mode == "train"
    clock = Clock(device)
    model = build_model(workload, device=device)
    units = find_units(model)
    expected_layers = len(build_layer_graph(workload).layers)
    recorder = AllReduceRecorder()
    net = model
    if train and world > 1:
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
        net.register_comm_hook(recorder, AllReduceRecorder.hook)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4) if train else None
    gen = torch.Generator().manual_seed(1000 + rank)
    fixed_batch = {k: v.to(device) for k, v in make_batch(workload, generator=gen).items()}

    def iteration(batch) -> None:
        _step(net, optimizer, batch, train)
        if train:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    for _ in range(settings["warmup_steps"]):
        iteration(fixed_batch)
    clock.synchronize()

    layers, iterations, allreduce = [], [], []
    with LayerInstrument(units, clock, backward=train) as inst:
        for step in range(settings["instrumented_steps"]):
            inst.start_step()
            recorder.records.clear()
            recorder.enabled = True
            t0 = clock.mark()
            _step(net, optimizer, fixed_batch, train)
            t_bwd = clock.mark()
            t_opt0 = clock.mark()
            if train:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            t1 = clock.mark()
            clock.synchronize()
            recorder.enabled = False
            rows = inst.layer_times_ms(step_start=t0, backward_end=t_bwd)
            if len(rows) != expected_layers:
                raise RuntimeError(
                    f"workload {workload.workload_id}: {len(rows)} layer calls timed but the "
                    f"layer graph has {expected_layers}"
                )
            for r in rows:
                layers.append({"rank": rank, "step": step, **r})
            buckets = list(recorder.records)
            for b in buckets:
                allreduce.append({"rank": rank, "step": step, **b})
            iterations.append(
                {
                    "rank": rank,
                    "step": step,
                    "phase": "instrumented",
                    "iteration_ms": clock.elapsed_ms(t0, t1),
                    "forward_ms": sum(r["forward_ms"] for r in rows),
                    "backward_ms": sum(r["backward_ms"] for r in rows),
                    "optimizer_ms": clock.elapsed_ms(t_opt0, t1) if train else 0.0,
                    "allreduce_ms": sum(b["allreduce_ms"] for b in buckets),
                    "allreduce_bytes": sum(b["allreduce_bytes"] for b in buckets),
                }
            )

    dataset = SyntheticDataset(workload)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=workload.batch_size, sampler=sampler, num_workers=0)
    if world > 1:
        dist.barrier()
    epoch_start = time.perf_counter()
    steps = 0
    for step, batch in enumerate(loader):
        t0 = clock.mark()
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        iteration(batch)
        t1 = clock.mark()
        clock.synchronize()
        steps += 1
        iterations.append(
            {
                "rank": rank,
                "step": step,
                "phase": "label",
                "iteration_ms": clock.elapsed_ms(t0, t1),
                "forward_ms": 0.0,
                "backward_ms": 0.0,
                "optimizer_ms": 0.0,
                "allreduce_ms": 0.0,
                "allreduce_bytes": 0,
            }
        )
    epoch_s = time.perf_counter() - epoch_start
    epoch = [{"rank": rank, "epoch_s": epoch_s, "steps_per_epoch": steps}]
    return {"layers": layers, "iterations": iterations, "allreduce": allreduce, "epoch": epoch}


def _status_of(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".lower()
    return "oom" if ("out of memory" in text or isinstance(exc, MemoryError)) else "failed"


def run_tasks(tasks_path: Path, out_dir: Path) -> None:
    """Profile every workload of a task file on this rank (the torchrun entry point)."""
    spec = json.loads(Path(tasks_path).read_text())
    settings = spec["settings"]
    cuda = torch.cuda.is_available() and spec.get("device", "auto") != "cpu"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        device = torch.device("cpu")
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group(
            backend="nccl" if cuda else "gloo",
            timeout=dt.timedelta(seconds=settings.get("collective_timeout_s", 120)),
        )
    rank = dist.get_rank() if distributed else 0
    try:
        for record in spec["workloads"]:
            workload = Workload.parse(record, source=str(tasks_path))
            if rank == 0:
                current_marker_path(out_dir).write_text(
                    json.dumps({"workload_id": workload.workload_id, "started": time.time()})
                )
            started = dt.datetime.now(dt.UTC).isoformat()
            try:
                result, status, error = profile_workload(workload, settings, device), "ok", ""
            except Exception as exc:  # recorded, never hidden: status + error text
                result, status = None, _status_of(exc)
                error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
                if cuda:
                    torch.cuda.empty_cache()
            gathered = [None] * dist.get_world_size() if distributed else None
            payload = {"result": result, "status": status, "error": error}
            if distributed:
                dist.all_gather_object(gathered, payload)
            else:
                gathered = [payload]
            if rank == 0:
                _write(out_dir, workload, settings, gathered, started, device)
    finally:
        if distributed:
            dist.destroy_process_group()


def _write(out_dir, workload, settings, gathered, started, device) -> None:
    statuses = [g["status"] for g in gathered]
    status = next((s for s in statuses if s != "ok"), "ok")
    error = "\n".join(f"rank {r}: {g['error']}" for r, g in enumerate(gathered) if g["error"])
    tables: dict[str, list[dict[str, Any]]] = {
        "layers": [],
        "iterations": [],
        "allreduce": [],
        "epoch": [],
    }
    if status == "ok":
        for g in gathered:
            for name in tables:
                tables[name].extend(g["result"][name])
    run = {
        "workload_id": workload.workload_id,
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
        "started_at": started,
        "finished_at": dt.datetime.now(dt.UTC).isoformat(),
    }
    write_part(out_dir, workload, run, tables)


def main(argv: list[str] | None = None) -> None:
    """Command-line entry: ``--tasks FILE.json --out DIR``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    run_tasks(args.tasks, args.out)


if __name__ == "__main__":
    main()
