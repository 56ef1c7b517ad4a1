"""One workload of a parallel layout on this rank: ZeRO/FSDP, tensor or pipeline parallelism.

The layout's model is built with PyTorch's own parallel APIs (no re-implementation):

* ``sharding="zero1"``: DDP (its gradient all-reduce timed per bucket, as for plain DDP) with
  ``torch.distributed.optim.ZeroRedundancyOptimizer`` over AdamW
  (``parameters_as_bucket_view=True``: each rank broadcasts its updated partition as one
  bucket after the step);
* ``sharding="zero2"`` / ``"fsdp"``: FSDP2, ``torch.distributed.fsdp.fully_shard`` on every
  transformer block, then on the root, with ``reshard_after_forward=False`` (ZeRO-2: the
  parameters stay gathered from forward to backward) or ``True`` (ZeRO-3: gathered again in
  backward); every all-gather and reduce-scatter is timed (:mod:`scaledl.profiling.collectives`);
* ``tp_size > 1``: ``torch.distributed.tensor.parallel.parallelize_module`` with the Megatron
  plan of :func:`scaledl.profiling.layout_models.tensor_parallel_plan` on a 1-D ``DeviceMesh``;
* ``pp_size > 1``: ``torch.distributed.pipelining.PipelineStage`` on this rank's stage
  (:func:`scaledl.profiling.layout_models.stage_module`) run by ``ScheduleGPipe`` or
  ``Schedule1F1B`` with ``micro_batches`` micro-batches; every stage forward and backward of a
  micro-batch is timed (``pipeline_timings``).

Ranks of one tensor- or pipeline-parallel group see the same samples: the synthetic batch and
the label epochs' ``DistributedSampler`` are those of the data-parallel replica
(``dp_size`` replicas; the ranks of a 1-D tensor or pipeline layout form one replica).

Layer rows keep the ``layer_index`` and ``layer_name`` of the full model's layer graph; under
pipeline parallelism each rank times only its stage's layers, once per micro-batch call
(``micro_batch``), and under tensor parallelism each row says over how many ranks its unit's
weights are split (``tp_shards``: ``tp_size`` for the attention and feed-forward units of the
plan, 1 for the replicated embeddings, norms and head).

A layout without tensor parallelism also micro-benchmarks, per instrumented step, blocking
all-reduces of one micro-batch's activation and one Megatron linear pair on DTensors against its
local shard, each linear timed on its own (:mod:`scaledl.profiling.tp_probe`), so that every
layout profile measures what a tensor-parallel layout adds on this host. Likewise a training
layout without ``zero2`` / ``fsdp`` sharding times one Megatron pair under FSDP2 against plain
modules (:mod:`scaledl.profiling.fsdp_probe`): what a sharded layout adds. A tensor-parallel
layout's AdamW steps its DTensor and its plain parameters as two for-each parameter groups (a
for-each kernel refuses the mix; until 2026-12-03 it stepped tensor by tensor, unlike every
other layout).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
import torch.distributed as dist

from scaledl.graph.layer_graph import build_layer_graph
from scaledl.graph.units import find_units
from scaledl.profiling.collectives import (
    CollectiveLog,
    TimedAllGather,
    TimedReduceScatter,
    TimedTensorParallelAllReduce,
    time_collectives,
)
from scaledl.profiling.fsdp_probe import ShardingProbe
from scaledl.profiling.instrument import AllReduceRecorder, LayerInstrument
from scaledl.profiling.layout_models import (
    block_modules,
    check_supported,
    pipeline_loss,
    stage_module,
    tensor_parallel_plan,
)
from scaledl.profiling.session import Session
from scaledl.profiling.timers import Clock
from scaledl.profiling.tp_probe import TensorParallelProbe
from scaledl.workloads.builders import build_model, make_batch, torch_dtype
from scaledl.workloads.spec import micro_batch_activation_bytes

#: Blocking all-reduces micro-benchmarked per instrumented iteration of a layout without
#: tensor parallelism (:meth:`LayoutSession._plan_step_collectives`).
BLOCKING_ALL_REDUCES = 2


class LayoutSession(Session):
    """A sharded, tensor- or pipeline-parallel workload (:mod:`scaledl.workloads.parallelism`).

    Args:
        workload: the workload (``world_size`` ranks in this launch).
        settings: the task file's settings.
        device: this rank's device.

    Raises:
        ValueError: a layout this profiler does not build
            (:func:`~scaledl.profiling.layout_models.check_supported`), the launch's world size
            differs from the workload's, or a pipeline whose label epochs would end with a
            batch that does not split into ``micro_batches`` (names ``dataset_size``).
    """

    def __init__(self, workload, settings: dict[str, Any], device: torch.device) -> None:
        check_supported(workload)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        if self.world != workload.world_size:
            raise ValueError(
                f"workload {workload.workload_id}: world_size={workload.world_size} but the "
                f"launch has {self.world} ranks"
            )
        w = workload
        self.workload, self.settings, self.device = w, settings, device
        self.train = w.mode == "train"
        self.replicas = w.dp_size
        self.replica_rank = self.rank if w.dp_size > 1 else 0
        self.clock = Clock(device)
        self.log = CollectiveLog(self.clock)
        self.recorder = AllReduceRecorder()
        self.pipe_log: list[dict[str, Any]] | None = None
        self._micro_batch_of: dict[int, int] | None = None
        self.schedule = None
        self.stage_index = 0
        torch.manual_seed(settings.get("seed", 0))
        self.model = build_model(w, device=device)
        units = find_units(self.model)
        names = build_layer_graph(w).layers.set_index("layer_name")["layer_index"]
        if not names.index.is_unique:
            raise ValueError(
                f"workload {w.workload_id}: a layer unit is called more than once per forward "
                f"(family={w.family!r}); parallel layouts need one call per unit"
            )
        self.layer_index = names.to_dict()
        self.groups = {"dp": None, "tp": None, "pp": None}
        if w.tp_size > 1:
            self._tensor_parallel()
        elif w.pp_size > 1:
            units = self._pipeline(units)
        elif w.sharding == "zero1":
            self._zero1()
        else:
            self._fsdp(reshard=w.sharding == "fsdp")
        self.units = units
        self.shards = self._tp_shards(units)
        self.tp_probe = self._tp_probe()
        self.sharding_probe = self._sharding_probe()
        gen = torch.Generator().manual_seed(1000 + self.replica_rank)
        self.batch = {k: v.to(device) for k, v in make_batch(w, generator=gen).items()}

    # ------------------------------------------------------------------ building the layout
    def _mesh(self, name: str, size: int):
        # torch.distributed's parallel APIs: each only for the layouts that use it.
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(self.device.type, (size,), mesh_dim_names=(name,))
        self.groups[name] = mesh.get_group(name)
        return mesh

    def _zero1(self) -> None:
        # torch.distributed's parallel APIs: each only for the layouts that use it.
        from torch.distributed.optim import ZeroRedundancyOptimizer

        self.groups["dp"] = dist.group.WORLD
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.net = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
        self.net.register_comm_hook(self.recorder, AllReduceRecorder.hook)
        self.optimizer = ZeroRedundancyOptimizer(
            self.model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-4,
            parameters_as_bucket_view=True,
        )  # fmt: skip
        self._partition_bytes = [
            sum(p.numel() * p.element_size() for g in groups for p in g["params"])
            for groups in self.optimizer._partition_parameters()
        ]

    def _fsdp(self, reshard: bool) -> None:
        # torch.distributed's parallel APIs: each only for the layouts that use it.
        from torch.distributed.fsdp import fully_shard

        mesh = self._mesh("dp", self.workload.dp_size)
        modules = [*block_modules(self.model), self.model]
        for module in modules:
            fully_shard(module, mesh=mesh, reshard_after_forward=reshard)
            module.set_custom_all_gather(TimedAllGather(self.log))
            module.set_custom_reduce_scatter(TimedReduceScatter(self.log))
        self.net = self.model
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)

    def _tensor_parallel(self) -> None:
        # torch.distributed's parallel APIs: each only for the layouts that use it.
        from torch.distributed.tensor.parallel import parallelize_module

        mesh = self._mesh("tp", self.workload.tp_size)
        plan = tensor_parallel_plan(self.model, self.workload.family)
        parallelize_module(self.model, mesh, plan)
        self.tp_modules = {id(self.model.get_submodule(name)) for name in plan}
        self.net = self.model
        # The sharded weights are DTensors, the replicated ones plain tensors: a for-each
        # (multi-tensor) kernel refuses such a mix, so each kind is its own parameter group
        # (AdamW steps group by group), and the step stays for-each as in every other layout.
        from torch.distributed.tensor import DTensor

        params = list(self.model.parameters())
        groups = [{"params": [p for p in params if isinstance(p, DTensor) == dt]}
                  for dt in (True, False)]  # fmt: skip
        self.optimizer = torch.optim.AdamW([g for g in groups if g["params"]], lr=1e-4)

    def _tp_probe(self) -> TensorParallelProbe | None:
        """The tensor-parallel API probe of a layout without tensor parallelism (else ``None``).

        Over the same group as the blocking all-reduce probes (:meth:`_plan_step_collectives`),
        at one micro-batch's tokens: :mod:`scaledl.profiling.tp_probe`. None either where the
        workload's ``intermediate_size`` does not split over that group (no tensor-parallel
        layout of it could run there): the workload is measured without the probe.
        """
        w = self.workload
        if w.tp_size > 1 or max(w.dp_size, w.pp_size) == 1:
            return None
        name = "dp" if w.dp_size > 1 else "pp"
        if w.intermediate_size % max(w.dp_size, w.pp_size):
            return None
        tokens = (w.batch_size // w.micro_batches) * w.seq_len
        return TensorParallelProbe(self.groups[name], name, w.hidden_size, w.intermediate_size,
                                   tokens, torch_dtype(w), self.device, self.train)  # fmt: skip

    def _sharding_probe(self) -> ShardingProbe | None:
        """The FSDP2 API probe of a training layout without ``zero2`` / ``fsdp`` (else ``None``).

        Over the layout's data-, tensor- or pipeline-parallel group (the first of more than one
        rank), at one micro-batch's tokens: :mod:`scaledl.profiling.fsdp_probe` (its widths
        rounded to the group, so any ``intermediate_size``).
        """
        w = self.workload
        if not self.train or w.sharding in ("zero2", "fsdp"):
            return None
        sizes = {"dp": w.dp_size, "tp": w.tp_size, "pp": w.pp_size}
        name = next((g for g, n in sizes.items() if n > 1), None)
        if name is None:
            return None
        tokens = (w.batch_size // w.micro_batches) * w.seq_len
        return ShardingProbe(self.groups[name], name, w.hidden_size, w.intermediate_size,
                             tokens, torch_dtype(w), self.device)  # fmt: skip

    def _tp_shards(self, units) -> dict[str, int]:
        tp_ids = getattr(self, "tp_modules", set())
        split = {u.name for u in units if any(id(m) in tp_ids for m in u.module.modules())}
        return {u.name: self.workload.tp_size if u.name in split else 1 for u in units}

    def _pipeline(self, units):
        # torch.distributed's parallel APIs: each only for the layouts that use it.
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        w = self.workload
        per_replica = math.ceil(w.dataset_size / w.dp_size)
        if per_replica % w.batch_size:
            raise ValueError(
                f"field 'dataset_size' (value {w.dataset_size}): the label epochs of a pipeline "
                f"would end with a batch of {per_replica % w.batch_size} samples, which does not "
                f"split into micro_batches={w.micro_batches}; use a multiple of "
                f"batch_size * dp_size = {w.batch_size * w.dp_size}"
            )
        self.groups["pp"] = dist.group.WORLD
        self.stage_index = self.rank
        self.stages = w.pp_size
        sub = stage_module(self.model, w.family, self.stage_index, self.stages)
        stage = PipelineStage(sub, self.stage_index, self.stages, self.device)
        loss = pipeline_loss(w.family, w.vocab_size)
        self._loss_fn = loss
        cls = ScheduleGPipe if w.pipeline_schedule == "gpipe" else Schedule1F1B
        self.schedule = cls(stage, n_microbatches=w.micro_batches, loss_fn=self._timed_loss)
        self._wrap_stage(stage)
        self.stage = stage
        self.net = sub
        self.optimizer = torch.optim.AdamW(sub.parameters(), lr=1e-4)
        inside = {id(m) for m in sub.modules()}
        rotary = getattr(sub, "rotary_emb", None)
        if self.stage_index > 0 and rotary is not None:
            inside -= {id(m) for m in rotary.modules()}  # recomputed, not the model's call
        return [u for u in units if id(u.module) in inside]

    def _wrap_stage(self, stage) -> None:
        """Time every forward and backward micro-batch of the stage (and the loss, as forward)."""
        forward, backward = stage.forward_one_chunk, stage.backward_one_chunk

        def timed_forward(chunk, *args, **kwargs):
            start = self.clock.mark()
            out = forward(chunk, *args, **kwargs)
            self._pipe_record("forward", chunk, start, self.clock.mark())
            return out

        def timed_backward(chunk, *args, **kwargs):
            start = self.clock.mark()
            out = backward(chunk, *args, **kwargs)
            self._pipe_record("backward", chunk, start, self.clock.mark())
            return out

        stage.forward_one_chunk = timed_forward
        stage.backward_one_chunk = timed_backward

    def _timed_loss(self, logits, labels):
        loss = self._loss_fn(logits, labels)
        if self.pipe_log:
            last = self.pipe_log[-1]
            if last["phase"] == "forward":
                last["end"] = self.clock.mark()  # the loss belongs to the forward of its chunk
        return loss

    def _pipe_record(self, phase: str, chunk: int, start, end) -> None:
        if self.pipe_log is not None:
            self.pipe_log.append({"phase": phase, "micro_batch": int(chunk), "start": start,
                                  "end": end})  # fmt: skip

    # ------------------------------------------------------------------ one iteration
    def _step(self, batch) -> None:
        if self.schedule is None:
            # builders loads transformers' model classes; only building a model needs them.
            from scaledl.workloads.builders import training_loss

            if not self.train:
                with torch.inference_mode():
                    self.net(**batch)
                return
            training_loss(self.net(**batch)).backward()
            return
        if self.stage_index == 0:
            self.schedule.step(batch["input_ids"])
        elif self.stage_index == self.stages - 1:
            self.schedule.step(target=batch["labels"])
        else:
            self.schedule.step()

    def iteration(self, batch) -> None:
        """One un-instrumented iteration of the layout (a label step)."""
        self._step(batch)
        self.optimizer_step()

    def _plan_step_collectives(self) -> None:
        """The collectives of one iteration that no hook times (micro-benchmarked later).

        Besides ZeRO-1's broadcasts and the pipeline's send/recv, a layout without tensor
        parallelism micro-benchmarks :data:`BLOCKING_ALL_REDUCES` blocking all-reduces of the
        size tensor parallelism would all-reduce after a block at this micro-batch (one
        micro-batch's activation, ``batch / m * seq_len * hidden`` elements), over its data- or
        pipeline-parallel group: so every layout profile measures the blocking all-reduce a
        tensor-parallel layout puts on its critical path
        (:class:`~scaledl.parallel.collectives.CollectiveModel`'s ``blocking_all_reduce``),
        not only the tensor-parallel workloads themselves.
        """
        w = self.workload
        activation = micro_batch_activation_bytes(w)
        if w.tp_size == 1 and max(w.dp_size, w.pp_size) > 1:
            group, size = ("dp", w.dp_size) if w.dp_size > 1 else ("pp", w.pp_size)
            for _ in range(BLOCKING_ALL_REDUCES):
                self.log.plan("all_reduce", group, size, activation)
        if w.sharding == "zero1":
            for src, nbytes in enumerate(self._partition_bytes):
                self.log.plan("broadcast", "dp", w.dp_size, nbytes, src=src)
        if self.schedule is not None:
            nbytes = activation
            for boundary in range(self.stages - 1):
                for direction in ("forward", "backward"):
                    sender = boundary if direction == "forward" else boundary + 1
                    receiver = boundary + 1 if direction == "forward" else boundary
                    for _ in range(w.micro_batches):
                        if self.rank == sender:
                            self.log.plan("send", "pp", self.stages, nbytes, peer=receiver)
                        elif self.rank == receiver:
                            self.log.plan("recv", "pp", self.stages, nbytes, peer=sender)

    def instrumented(self) -> dict[str, list[dict[str, Any]]]:
        """One calibration iteration, then rounds of ``layer_stride`` timed iterations.

        Returns:
            Record lists of this rank: ``layers``, ``iterations``, ``allreduce``,
            ``collectives`` and ``pipeline`` (empty without a pipeline).
        """
        stride = int(self.settings.get("layer_stride", 1))
        rounds = int(self.settings["instrumented_steps"])
        out: dict[str, list[dict[str, Any]]] = {
            k: [] for k in ("layers", "iterations", "allreduce", "collectives", "pipeline")
        }
        # Tensor parallelism's all-reduces are timed only during the instrumented iterations
        # (the label steps run without the wrapper).
        with contextlib.ExitStack() as stack:
            if self.workload.tp_size > 1:
                stack.enter_context(TimedTensorParallelAllReduce(self.log, self.workload.tp_size))
            inst = stack.enter_context(
                LayerInstrument(self.units, self.clock, self.train, stride=stride)
            )
            self._rounds(inst, rounds, stride, out)
        return out

    def _rounds(self, inst: LayerInstrument, rounds: int, stride: int, out) -> None:
        inst.start_step()
        expected = len(self._timed_iteration(inst, record=False)["rows"])  # calibration
        for r in range(rounds):
            got = []
            for j in range(stride):
                inst.start_step()
                got.append(self._timed_iteration(inst, record=j == 0))
            rows = [row for g in got for row in g["rows"]]
            if len(rows) != expected:
                raise RuntimeError(
                    f"workload {self.workload.workload_id}: round {r} timed {len(rows)} "
                    f"layer calls on rank {self.rank}, the calibration iteration {expected}"
                )
            buckets = [b for g in got for b in g["buckets"]]
            planned = [c for g in got for c in g["planned"]]
            collectives = [c for g in got for c in g["collectives"]]
            collectives += time_collectives(planned, self.groups, self.clock, self.device)
            for probe in (self.tp_probe, self.sharding_probe):
                if probe is not None:
                    collectives += probe.time(self.clock)
            tag = {"rank": self.rank, "step": r}
            out["layers"] += [{**tag, **row} for row in rows]
            out["allreduce"] += [{**tag, **b} for b in buckets]
            out["collectives"] += [
                {**tag, "collective_index": i, **c} for i, c in enumerate(collectives)
            ]
            out["pipeline"] += [
                {**tag, "stage": self.stage_index, **p} for g in got for p in g["pipeline"]
            ]
            out["iterations"].append(
                {
                    **tag,
                    "phase": "instrumented",
                    "iteration_ms": sum(g["iteration_ms"] for g in got) / len(got),
                    "forward_ms": sum(row["forward_ms"] for row in rows),
                    "backward_ms": sum(row["backward_ms"] for row in rows),
                    "optimizer_ms": sum(g["optimizer_ms"] for g in got) / len(got),
                    "allreduce_ms": sum(b["allreduce_ms"] for b in buckets),
                    "allreduce_bytes": sum(b["allreduce_bytes"] for b in buckets),
                }
            )

    def _timed_iteration(self, inst: LayerInstrument, record: bool) -> dict[str, Any]:
        self.recorder.records.clear()
        self.log.clear()
        self.recorder.enabled = self.log.enabled = record
        self.pipe_log = [] if self.schedule is not None else None
        t0 = self.clock.mark()
        self._step(self.batch)
        t_bwd = self.clock.mark()
        self.optimizer_step()
        t1 = self.clock.mark()
        self.clock.synchronize()
        if record:
            self._plan_step_collectives()
        self.recorder.enabled = self.log.enabled = False
        pipe = self.pipe_log or []
        bounds = tuple(p["end"] for p in pipe if p["phase"] == "backward")
        rows = self._layer_rows(inst.layer_times_ms(step_start=t0, backward_end=t_bwd,
                                                    bounds=bounds))  # fmt: skip
        result = {
            "rows": rows,
            "iteration_ms": self.clock.elapsed_ms(t0, t1),
            "optimizer_ms": self.clock.elapsed_ms(t_bwd, t1) if self.train else 0.0,
            "buckets": list(self.recorder.records),
            "collectives": [
                {
                    "collective": "all_reduce",
                    "group": "dp",
                    "group_size": self.workload.dp_size,
                    "collective_bytes": b["allreduce_bytes"],
                    "collective_ms": b["allreduce_ms"],
                    "source": "measured",
                }
                for b in self.recorder.records
            ]
            + self.log.rows(),  # fmt: skip
            "planned": list(self.log.planned),
            "pipeline": [
                {
                    "phase": p["phase"],
                    "micro_batch": p["micro_batch"],
                    "start_ms": self.clock.elapsed_ms(t0, p["start"]),
                    "end_ms": self.clock.elapsed_ms(t0, p["end"]),
                }
                for p in pipe
            ]
            if record
            else [],  # fmt: skip
        }
        self.pipe_log = None
        return result

    def _layer_rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Rows with the full model's ``layer_index``, ``micro_batch`` and ``tp_shards``.

        The instrument numbers calls in this rank's execution order; the first (calibration)
        iteration has every call, so the k-th call of a unit there is its call for micro-batch
        k (a stage runs the forwards of its micro-batches in order).
        """
        if self._micro_batch_of is None:
            seen: dict[str, int] = {}
            self._micro_batch_of = {}
            for row in sorted(rows, key=lambda r: r["layer_index"]):
                k = seen.get(row["layer_name"], 0)
                seen[row["layer_name"]] = k + 1
                self._micro_batch_of[row["layer_index"]] = k
        out = []
        for row in rows:
            name = row["layer_name"]
            extra = (
                {"micro_batch": self._micro_batch_of[row["layer_index"]]}
                if self.schedule is not None
                else {}
            )
            out.append(
                {**row, "layer_index": int(self.layer_index[name]),
                 "tp_shards": self.shards[name], **extra}
            )  # fmt: skip
        return out
