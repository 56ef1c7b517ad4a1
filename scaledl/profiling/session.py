"""One plain data-parallel workload on this rank: model, optimizer, batch, timed iterations, labels.

:class:`Session` builds the model (random weights, fixed seed), wraps it in DDP when training on
more than one rank, times one calibration iteration and ``instrumented_steps`` rounds of per-layer
forward/backward, per-bucket all-reduce and optimizer timing (:meth:`Session.instrumented`), then
runs real epochs until the stop rule is met (:meth:`Session.labels`). The worker
(:mod:`scaledl.profiling.worker`) runs it for a plain-DDP workload;
:class:`~scaledl.profiling.layout_session.LayoutSession` extends it for sharded, tensor- and
pipeline-parallel ones.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from scaledl.graph.layer_graph import build_layer_graph
from scaledl.graph.units import find_units
from scaledl.profiling.instrument import AllReduceRecorder, LayerInstrument
from scaledl.profiling.stopping import StopRule, label_halfwidth
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


def _step(model, batch, train: bool):
    if not train:
        with torch.inference_mode():
            model(**batch)
        return
    training_loss(model(**batch)).backward()


def _max_over_ranks(values: list[float], device: torch.device) -> list[float]:
    """Element-wise maximum over ranks (the same list on every rank afterwards)."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.cpu().tolist()


class Session:
    """One workload's model, optimizer and fixed batch on this rank (plain DDP, or one rank)."""

    def __init__(self, workload: Workload, settings: dict[str, Any], device: torch.device) -> None:
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        if self.world != workload.world_size:
            raise ValueError(
                f"workload {workload.workload_id}: world_size={workload.world_size} but the "
                f"launch has {self.world} ranks"
            )
        torch.manual_seed(settings.get("seed", 0))
        self.workload, self.settings, self.device = workload, settings, device
        self.train = workload.mode == "train"
        # The label epochs' sampler: every rank is a data-parallel replica of its own.
        self.replicas, self.replica_rank = self.world, self.rank
        self.clock = Clock(device)
        self.model = build_model(workload, device=device)
        self.units = find_units(self.model)
        self.recorder = AllReduceRecorder()
        self.net = self.model
        if self.train and self.world > 1:
            self.net = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[device.index] if device.type == "cuda" else None
            )
            self.net.register_comm_hook(self.recorder, AllReduceRecorder.hook)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4) if self.train else None
        gen = torch.Generator().manual_seed(1000 + self.rank)
        self.batch = {k: v.to(device) for k, v in make_batch(workload, generator=gen).items()}

    def optimizer_step(self) -> None:
        """One AdamW step and zeroed gradients (nothing in inference)."""
        if self.train:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)

    def iteration(self, batch) -> None:
        """One untimed iteration on ``batch``: forward (and backward and step when training)."""
        _step(self.net, batch, self.train)
        self.optimizer_step()

    def warmup(self) -> None:
        """``warmup_steps`` iterations on the fixed batch (DDP rebuilds its buckets after one)."""
        for _ in range(self.settings["warmup_steps"]):
            self.iteration(self.batch)
        self.clock.synchronize()

    def instrumented(self) -> dict[str, list[dict[str, Any]]]:
        """One calibration iteration, then rounds of ``layer_stride`` timed iterations."""
        stride = int(self.settings.get("layer_stride", 1))
        rounds = int(self.settings["instrumented_steps"])
        expected = len(build_layer_graph(self.workload).layers)
        layers, iterations, allreduce = [], [], []
        with LayerInstrument(self.units, self.clock, backward=self.train, stride=stride) as inst:
            inst.start_step()
            self._timed_iteration(inst, record_allreduce=False)
            for r in range(rounds):
                round_rows, round_iters, round_buckets = [], [], []
                for j in range(stride):
                    inst.start_step()
                    rows, it, buckets = self._timed_iteration(inst, record_allreduce=j == 0)
                    round_rows += rows
                    round_iters.append(it)
                    round_buckets += buckets
                indices = sorted(row["layer_index"] for row in round_rows)
                if indices != list(range(expected)):
                    raise RuntimeError(
                        f"workload {self.workload.workload_id}: round {r} timed layer calls "
                        f"{len(indices)} but the layer graph has {expected}"
                    )
                layers += [{"rank": self.rank, "step": r, **row} for row in round_rows]
                allreduce += [{"rank": self.rank, "step": r, **b} for b in round_buckets]
                n = len(round_iters)
                iterations.append(
                    {
                        "rank": self.rank,
                        "step": r,
                        "phase": "instrumented",
                        "iteration_ms": sum(i["iteration_ms"] for i in round_iters) / n,
                        "forward_ms": sum(row["forward_ms"] for row in round_rows),
                        "backward_ms": sum(row["backward_ms"] for row in round_rows),
                        "optimizer_ms": sum(i["optimizer_ms"] for i in round_iters) / n,
                        "allreduce_ms": sum(b["allreduce_ms"] for b in round_buckets),
                        "allreduce_bytes": sum(b["allreduce_bytes"] for b in round_buckets),
                    }
                )
        collectives = [
            {
                "rank": b["rank"],
                "step": b["step"],
                "collective_index": b["bucket_index"],
                "collective": "all_reduce",
                "group": "dp",
                "group_size": self.world,
                "collective_bytes": b["allreduce_bytes"],
                "collective_ms": b["allreduce_ms"],
                "source": "measured",
            }
            for b in allreduce
        ]
        return {
            "layers": layers,
            "iterations": iterations,
            "allreduce": allreduce,
            "collectives": collectives,
            "pipeline": [],
        }

    def _timed_iteration(self, inst: LayerInstrument, record_allreduce: bool):
        self.recorder.records.clear()
        self.recorder.enabled = record_allreduce
        t0 = self.clock.mark()
        _step(self.net, self.batch, self.train)
        t_bwd = self.clock.mark()
        self.optimizer_step()
        t1 = self.clock.mark()
        self.clock.synchronize()
        self.recorder.enabled = False
        rows = inst.layer_times_ms(step_start=t0, backward_end=t_bwd)
        it = {
            "iteration_ms": self.clock.elapsed_ms(t0, t1),
            "optimizer_ms": self.clock.elapsed_ms(t_bwd, t1) if self.train else 0.0,
        }
        return rows, it, list(self.recorder.records)

    def labels(self, rule: StopRule, interleave=None) -> dict[str, Any]:
        """Real epochs until the stop rule is met; label steps and epoch wall times.

        ``interleave`` (a :meth:`CalibrationProbe.interleaved`) runs before every epoch and
        after the last, outside the timed epochs, so every epoch is bracketed by a concurrent
        reference of the host's speed (:mod:`scaledl.profiling.drift`).
        """
        dataset = SyntheticDataset(self.workload)
        sampler = DistributedSampler(
            dataset, num_replicas=self.replicas, rank=self.replica_rank, shuffle=True, seed=0
        )
        loader = DataLoader(
            dataset, batch_size=self.workload.batch_size, sampler=sampler, num_workers=0
        )
        iterations, epochs, slowest, probes = [], [], [], []
        started = time.perf_counter()
        epoch, reason = 0, None
        while reason is None:
            sampler.set_epoch(epoch)
            if interleave is not None:
                probes.append(interleave())
            if self.world > 1:
                dist.barrier()
            epoch_start = time.perf_counter()
            local = []
            for batch in loader:
                t0 = self.clock.mark()
                batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
                self.iteration(batch)
                t1 = self.clock.mark()
                self.clock.synchronize()
                local.append(self.clock.elapsed_ms(t0, t1))
            epoch_s = time.perf_counter() - epoch_start
            agreed = _max_over_ranks([*local, epoch_s, time.perf_counter() - started], self.device)
            for i, ms in enumerate(local):
                iterations.append(
                    {
                        "rank": self.rank,
                        "step": len(slowest) + i,
                        "phase": "label",
                        "iteration_ms": ms,
                        "forward_ms": 0.0,
                        "backward_ms": 0.0,
                        "optimizer_ms": 0.0,
                        "allreduce_ms": 0.0,
                        "allreduce_bytes": 0,
                    }
                )
            epochs.append(
                {
                    "rank": self.rank,
                    "epoch": epoch,
                    "epoch_s": epoch_s,
                    "steps_per_epoch": len(local),
                }
            )
            slowest += agreed[:-2]
            reason = rule.reason_to_stop(slowest, agreed[-1])
            epoch += 1
        if interleave is not None:
            probes.append(interleave())
        figures = np.array(probes, dtype=float).reshape(-1, 2)  # (gemm_ms, memory_ms) rows
        gemm, memory = figures[:, 0], figures[:, 1]
        return {
            "label_probe_gemm_ms": float(gemm.mean()) if len(gemm) else float("nan"),
            "label_probe_memory_ms": (
                float(np.nanmean(memory)) if np.isfinite(memory).any() else float("nan")
            ),
            "label_probes": len(probes),
            "iterations": iterations,
            "epoch": epochs,
            "label_steps": len(slowest),
            "label_halfwidth": label_halfwidth(slowest),
            "label_stop_reason": reason,
            "label_epochs": epoch,
        }
