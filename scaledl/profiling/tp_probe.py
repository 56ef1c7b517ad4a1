"""Micro-benchmark of tensor parallelism's API cost, run in layout profiles without it.

PyTorch's tensor parallelism (``torch.distributed.tensor.parallel``) runs each column- and
row-wise linear layer on DTensors: besides its share of the FLOPs, every such layer pays
DTensor's dispatch (sharding propagation, ``from_local`` / ``to_local`` redistributions) and
its own collectives: a row-wise linear all-reduces its output in forward, a column-wise one
all-reduces its input's gradient in backward (one per column-wise linear: an attention unit's
query, key and value projections do three, where Megatron-LM's fused ``f`` operator does one).
On a 2-core CPU VM a column-wise ``h -> 4h`` linear cost 0.3-1.4 ms more than its local shard
run as plain tensors, the row-wise ``4h -> h`` one 0.8-1.2 ms, forward and backward
(``docs/history/2026-12-code-notes.md``): the two kinds differ, so a unit's cost follows how
many of each it holds (an attention unit: three column-wise, one row-wise).
The layer-wise models, fitted on layers that never ran on DTensors, cannot know it.

So every layout profile without tensor parallelism (where the blocking all-reduce probes run,
:meth:`~scaledl.profiling.layout_session.LayoutSession._plan_step_collectives`) also times,
per instrumented step, one Megatron pair (``h -> intermediate_size -> h``, the workload's
widths) parallelised over its data- or pipeline-parallel group (:class:`TensorParallelProbe`),
and the local shard of it as plain modules (``h -> intermediate_size / n -> h``), each once
untimed and then timed after a barrier, each linear separately: forward marks between the
column-wise linear and the rest, backward a gradient hook on the column-wise linear's output
(the row-wise linear and the activation's backward end there, the column-wise linear's
begins). The differences are one
``collective_timings`` row each (:data:`PROBE_ROWS`, source ``microbenchmark``,
``collective_bytes`` the pair's output activation): the API's cost of one column-wise and of
one row-wise linear, forward and backward, their all-reduces included. The untimed call first:
the first DTensor call after other work runs cold (about twice as slow), where a model's
parallelised linears run back to back (measurements: the same page).
:class:`~scaledl.parallel.collectives.CollectiveModel` fits each by size, and the composition
adds, per tensor-parallel unit, its column-wise linears times the column-wise cost and its
row-wise ones times the row-wise cost, less the blocking all-reduce it adds itself
(:mod:`scaledl.parallel.predict`). A difference that is not positive (timing noise larger than
the cost) is not recorded: the collective model fits on the positive ones.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from scaledl.profiles.tables import TP_API
from scaledl.profiling.timers import Clock

#: The probe's rows: the collective model's tensor-parallel API costs (the validation schema
#: lists them among its collectives), in the order of :meth:`TensorParallelProbe._time`.
PROBE_ROWS = TP_API


def megatron_pair(
    hidden: int, intermediate: int, dtype: torch.dtype, device: torch.device
) -> nn.Module:
    """``Linear(h, i) -> GELU -> Linear(i, h)``, the probes' Megatron MLP pair, on ``device``."""
    pair = nn.Sequential(
        nn.Linear(hidden, intermediate), nn.GELU(), nn.Linear(intermediate, hidden)
    )
    return pair.to(device=device, dtype=dtype)


class TensorParallelProbe:
    """One Megatron MLP pair on DTensors and its local shard as plain modules (module docstring).

    Args:
        group: the process group to parallelise over (``None``: the default group).
        group_name: its name in the rows (``dp`` or ``pp``).
        hidden: the workload's hidden size ``h``.
        intermediate: the pair's inner width (the workload's ``intermediate_size``).
        tokens: rows of the input (one micro-batch's ``batch / m * seq_len``).
        dtype: the workload's dtype.
        device: this rank's device.
        train: time the backward too.

    Raises:
        ValueError: ``intermediate`` does not split over the group's ranks.
    """

    def __init__(
        self,
        group,
        group_name: str,
        hidden: int,
        intermediate: int,
        tokens: int,
        dtype: torch.dtype,
        device: torch.device,
        train: bool,
    ) -> None:
        # torch.distributed's tensor-parallel API: only this probe's worker needs it.
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )

        self.group = group or dist.group.WORLD
        self.size = dist.get_world_size(self.group)
        if intermediate % self.size:
            raise ValueError(
                f"tensor-parallel probe: intermediate_size={intermediate} does not split over "
                f"the {self.size} ranks of group {group_name!r}"
            )
        self.group_name, self.train = group_name, train
        mesh = DeviceMesh.from_group(self.group, device.type)
        gen = torch.Generator().manual_seed(0)
        self.parallel = megatron_pair(hidden, intermediate, dtype, device)
        parallelize_module(self.parallel, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        self.local = megatron_pair(hidden, intermediate // self.size, dtype, device)
        self.x = torch.randn(tokens, hidden, generator=gen).to(device=device, dtype=dtype)
        self.output_bytes = tokens * hidden * self.x.element_size()

    def _time(self, module: nn.Module, clock: Clock) -> dict[str, float]:
        """Each linear's forward and backward time, ms, keyed by :data:`PROBE_ROWS`.

        The row-wise times hold the activation's too (the local shard's run has it as well);
        without training only the forward times.
        """
        x = self.x.detach().requires_grad_(self.train)
        marks: list[Any] = []
        dist.barrier(group=self.group)
        t0 = clock.mark()
        inner = module[0](x)
        t1 = clock.mark()
        if self.train:
            inner.register_hook(lambda grad: marks.append(clock.mark()))
        y = module[2](module[1](inner))
        t2 = clock.mark()
        if self.train:
            y.sum().backward()
            marks.append(clock.mark())
        clock.synchronize()
        module.zero_grad(set_to_none=True)
        ms = {"tp_colwise_forward": clock.elapsed_ms(t0, t1),
              "tp_rowwise_forward": clock.elapsed_ms(t1, t2)}  # fmt: skip
        if self.train:  # backward runs the row-wise linear first, then the column-wise one
            ms["tp_rowwise_backward"] = clock.elapsed_ms(t2, marks[0])
            ms["tp_colwise_backward"] = clock.elapsed_ms(marks[0], marks[1])
        return ms

    def _time_warm(self, module: nn.Module, clock: Clock) -> dict[str, float]:
        """:meth:`_time` after one untimed call (the first call after other work runs cold)."""
        self._time(module, clock)
        return self._time(module, clock)

    def time(self, clock: Clock) -> list[dict[str, Any]]:
        """Time the pair on DTensors and its local shard; the differences per linear as rows.

        Every rank of the group must call it (the parallel pair's all-reduces are collective).

        Args:
            clock: the device clock.

        Returns:
            ``collective_timings`` rows without ``collective_index``, in the order of
            :data:`PROBE_ROWS` (the two ``..._backward`` rows only when training); a
            non-positive difference is left out.
        """
        parallel, local = (self._time_warm(m, clock) for m in (self.parallel, self.local))
        diffs = {name: parallel[name] - local[name] for name in PROBE_ROWS if name in parallel}
        return [
            {"collective": name, "group": self.group_name, "group_size": self.size,
             "collective_bytes": self.output_bytes, "collective_ms": ms,
             "source": "microbenchmark"}
            for name, ms in diffs.items()
            if ms > 0
        ]  # fmt: skip
