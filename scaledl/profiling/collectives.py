"""Per-collective timing of the parallel layouts: measured in the iteration or micro-benchmarked.

Rows of the ``collective_timings`` table (:mod:`scaledl.profiling.store`): one per collective
call of an instrumented step and rank, with ``collective`` (:data:`COLLECTIVES`), ``group``
(``dp``, ``tp``, ``pp``), ``group_size``, ``collective_bytes`` (the bytes of the rank's buffer:
the full buffer of an all-reduce or broadcast, the *gathered* output of an all-gather, the
*unreduced* input of a reduce-scatter, the tensor of a send/recv), ``collective_ms`` and
``source``:

* ``measured``: timed inside the instrumented iteration itself. DDP's gradient buckets (the
  communication hook of :class:`scaledl.profiling.instrument.AllReduceRecorder`: ``dp``
  all-reduce, for ``sharding`` ``none`` and ``zero1``) and FSDP2's all-gathers and
  reduce-scatters (:class:`TimedAllGather`, :class:`TimedReduceScatter`, installed with
  ``FSDPModule.set_custom_all_gather`` / ``set_custom_reduce_scatter``: each call is timed from
  its issue to its completion on the calling thread, CPU, or between CUDA events on FSDP's
  communication stream).
  Tensor parallelism's all-reduces (DTensor's ``Partial -> Replicate`` redistribution after
  each row-wise linear in forward, and of the input gradient of each column-wise linear in
  backward) are timed the same way by :class:`TimedTensorParallelAllReduce`.
* ``microbenchmark``: collectives PyTorch issues where no hook reaches them are recorded by
  size while the instrumented steps run and timed right after them, in the same launch, on the
  same process group (:func:`time_collectives`): the pipeline's activation and gradient
  send/recv between stages, ZeRO-1's parameter broadcasts after the optimizer step
  (``ZeroRedundancyOptimizer`` broadcasts each rank's updated partition), and, in a layout
  without tensor parallelism, blocking all-reduces of one micro-batch's activation (the size
  tensor parallelism would all-reduce: the probe of the blocking all-reduce,
  :meth:`scaledl.profiling.layout_session.LayoutSession._plan_step_collectives`). The same
  layouts add the tensor-parallel API probe's rows (``tp_colwise_forward``,
  ``tp_rowwise_forward``, ``tp_colwise_backward``, ``tp_rowwise_backward``:
  :mod:`scaledl.profiling.tp_probe`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
    DefaultAllGather,
    DefaultReduceScatter,
)

from scaledl.profiling.timers import Clock

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv")
GROUPS = ("dp", "tp", "pp")
SOURCES = ("measured", "microbenchmark")


@dataclass
class CollectiveLog:
    """Collective calls of the current iteration (timed or to be micro-benchmarked).

    Attributes:
        clock: the device clock (marks of the measured calls).
        enabled: record calls only while true (the instrumented iterations).
        pending: measured calls of this iteration: dicts with the row fields and the
            ``start``/``end`` marks, turned into milliseconds by :meth:`rows`.
        planned: calls to micro-benchmark: ``(collective, group, bytes, spec)``, ``spec`` the
            argument of :func:`time_collectives`.
    """

    clock: Clock
    enabled: bool = False
    pending: list[dict[str, Any]] = field(default_factory=list)
    planned: list[dict[str, Any]] = field(default_factory=list)

    def clear(self) -> None:
        """Forget the previous iteration's calls."""
        self.pending.clear()
        self.planned.clear()

    def measured(self, collective: str, group: str, group_size: int, nbytes: int, start, end):
        """Record one call timed in the iteration (``start``/``end``: clock marks)."""
        if self.enabled:
            self.pending.append(
                {"collective": collective, "group": group, "group_size": group_size,
                 "collective_bytes": int(nbytes), "start": start, "end": end}
            )  # fmt: skip

    def plan(self, collective: str, group: str, group_size: int, nbytes: int, **spec: Any):
        """Record one call to time after the measured steps (:func:`time_collectives`)."""
        if self.enabled:
            self.planned.append(
                {"collective": collective, "group": group, "group_size": group_size,
                 "collective_bytes": int(nbytes), **spec}
            )  # fmt: skip

    def rows(self) -> list[dict[str, Any]]:
        """The measured calls of the iteration as rows (after ``clock.synchronize()``)."""
        out = []
        for call in self.pending:
            row = {k: v for k, v in call.items() if k not in ("start", "end")}
            row["collective_ms"] = self.clock.elapsed_ms(call["start"], call["end"])
            row["source"] = "measured"
            out.append(row)
        return out


class TimedAllGather(DefaultAllGather):
    """FSDP2's default all-gather, each call timed into a :class:`CollectiveLog` (``dp``)."""

    def __init__(self, log: CollectiveLog) -> None:
        super().__init__()
        self.log = log

    def __call__(self, output_tensor, input_tensor, group, async_op: bool = False):
        """All-gather ``input_tensor`` into ``output_tensor``, to completion (returns None)."""
        start = self.log.clock.mark()
        work = super().__call__(output_tensor, input_tensor, group, async_op=async_op)
        if work is not None:
            work.wait()
        end = self.log.clock.mark()
        nbytes = output_tensor.numel() * output_tensor.element_size()
        self.log.measured("all_gather", "dp", dist.get_world_size(group), nbytes, start, end)
        return None


class TimedReduceScatter(DefaultReduceScatter):
    """FSDP2's default reduce-scatter, each call timed into a :class:`CollectiveLog` (``dp``)."""

    def __init__(self, log: CollectiveLog) -> None:
        super().__init__()
        self.log = log

    def __call__(self, output_tensor, input_tensor, group, op, async_op: bool = False):
        """Reduce-scatter ``input_tensor`` into ``output_tensor``, to completion (None)."""
        start = self.log.clock.mark()
        work = super().__call__(output_tensor, input_tensor, group, op, async_op=async_op)
        if work is not None:
            work.wait()
        end = self.log.clock.mark()
        nbytes = input_tensor.numel() * input_tensor.element_size()
        self.log.measured("reduce_scatter", "dp", dist.get_world_size(group), nbytes, start, end)
        return None


class TimedTensorParallelAllReduce:
    """While entered, every DTensor all-reduce is timed to completion into a log (``tp``).

    DTensor reduces a ``Partial`` placement through
    ``torch.distributed._functional_collectives.all_reduce`` (``Partial._reduce_value``, read
    from the module at each call), which returns an ``AsyncCollectiveTensor`` waited on at its
    first use. Inside the context that function is wrapped: the call is issued, waited on at
    once (tensor parallelism's next operator needs the reduced activation or gradient anyway)
    and logged with the bytes of the local buffer, from issue to completion on the calling
    thread (CPU) or between events of the current CUDA stream. PyTorch has no hook for these
    calls (DDP has its communication hook, FSDP2 ``set_custom_all_gather``), hence the wrapper;
    the original is restored on exit, also after an error.

    Args:
        log: where the calls go (recorded only while ``log.enabled``).
        group_size: ranks of the tensor-parallel group.
    """

    def __init__(self, log: CollectiveLog, group_size: int) -> None:
        self.log, self.group_size = log, int(group_size)
        self._original = None

    def __enter__(self) -> TimedTensorParallelAllReduce:
        if self._original is not None:
            raise RuntimeError("TimedTensorParallelAllReduce: already entered")
        self._original = funcol.all_reduce
        funcol.all_reduce = self._timed
        return self

    def __exit__(self, *exc) -> None:
        funcol.all_reduce, self._original = self._original, None

    def _timed(self, tensor: torch.Tensor, reduceOp: str, group, tag: str = ""):  # noqa: N803
        start = self.log.clock.mark()
        out = self._original(tensor, reduceOp, group, tag)
        if isinstance(out, funcol.AsyncCollectiveTensor):
            out = out.wait()
        end = self.log.clock.mark()
        self.log.measured("all_reduce", "tp", self.group_size,
                          out.numel() * out.element_size(), start, end)  # fmt: skip
        return out


def time_collectives(
    planned: list[dict[str, Any]], groups: dict[str, Any], clock: Clock, device: torch.device
) -> list[dict[str, Any]]:
    """Time planned collective calls one by one on their process groups (micro-benchmark).

    Every rank of a group must call this with the same list (the calls are collectives; a
    send on one rank is matched by the recv at the same place of its peer's list). Each call
    allocates its buffer (``collective_bytes`` of float32 elements; outside the timed
    interval) and synchronises the ranks it involves (a barrier of the group; a one-element
    exchange of the two peers for send/recv), then times the one collective.

    Args:
        planned: :attr:`CollectiveLog.planned` entries; ``send``/``recv`` entries carry ``peer``
            (the other stage's global rank); ``broadcast`` entries carry ``src``.
        groups: process group per group name (``dp``, ``tp``, ``pp``).
        clock: the device clock.
        device: where the buffers live.

    Returns:
        The rows (``source = "microbenchmark"``), in the order of ``planned``.

    Raises:
        ValueError: an unknown collective.
    """
    rows = []
    for call in planned:
        kind, group = call["collective"], groups[call["group"]]
        numel = max(1, int(call["collective_bytes"]) // 4)
        buf = torch.zeros(numel, dtype=torch.float32, device=device)
        if kind in ("send", "recv"):
            _handshake(kind, call["peer"], group, device)
        else:
            dist.barrier(group=group)
        start = clock.mark()
        if kind == "all_reduce":
            dist.all_reduce(buf, group=group)
        elif kind == "broadcast":
            dist.broadcast(buf, src=call["src"], group=group)
        elif kind == "send":
            dist.send(buf, dst=call["peer"], group=group)
        elif kind == "recv":
            dist.recv(buf, src=call["peer"], group=group)
        else:
            raise ValueError(f"time_collectives: unknown collective {kind!r}")
        end = clock.mark()
        clock.synchronize()
        row = {k: call[k] for k in ("collective", "group", "group_size", "collective_bytes")}
        row.update(collective_ms=clock.elapsed_ms(start, end), source="microbenchmark")
        rows.append(row)
    return rows


def _handshake(kind: str, peer: int, group, device: torch.device) -> None:
    """One element the same way as the timed send/recv: both peers then start together."""
    token = torch.zeros(1, device=device)
    if kind == "send":
        dist.send(token, dst=peer, group=group)
    else:
        dist.recv(token, src=peer, group=group)
