"""Micro-benchmark of tensor parallelism's API cost, run in layout profiles without it.

PyTorch's tensor parallelism (``torch.distributed.tensor.parallel``) runs each column- and
row-wise linear layer on DTensors: besides its share of the FLOPs and Megatron's all-reduce,
every such layer pays DTensor's dispatch (sharding propagation, ``from_local`` /
``to_local`` redistributions) in forward and in backward. On the 2-core CPU VM of 2026-12-03
a Megatron MLP pair (column-wise ``h -> 4h``, row-wise ``4h -> h``, h = 128, 128-512 tokens) took
0.6-0.8 ms more in forward and 2.2-2.7 ms more in backward than the same local shard run as
plain tensors, beyond its all-reduce; the layer-wise models, fitted on layers that never ran
on DTensors, cannot know it.

So every layout profile without tensor parallelism (where the blocking all-reduce probes run,
:meth:`~scaledl.profiling.layout_session.LayoutSession._plan_step_collectives`) also times,
per instrumented step, the forward and the backward of one such pair (``h -> intermediate_size
-> h``, the workload's widths) parallelised over its data- or pipeline-parallel group
(:class:`TensorParallelProbe`), and of the local shard of it as plain modules
(``h -> intermediate_size / n -> h``), back to back after a barrier. The difference is one
``collective_timings`` row each, ``collective`` ``tp_pair_forward`` / ``tp_pair_backward``
(source ``microbenchmark``, ``collective_bytes`` the pair's output activation): the API's
cost of one column-then-row-wise pair, its blocking all-reduce included.
:class:`~scaledl.parallel.collectives.CollectiveModel` fits it by size, and the composition
adds, per tensor-parallel unit, that cost less the blocking all-reduce (which it adds itself)
per pair of parallelised linears (:mod:`scaledl.parallel.predict`). A difference that is not
positive (timing noise larger than the cost) is not recorded: the collective model fits on
the positive ones.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from scaledl.parallel.collectives import TP_PAIR
from scaledl.profiling.timers import Clock

#: The probe's rows: the collective model's tensor-parallel pair (the validation schema lists
#: them among its collectives).
PROBE_ROWS = TP_PAIR


def _pair(hidden: int, intermediate: int, dtype: torch.dtype, device: torch.device) -> nn.Module:
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
        self.parallel = _pair(hidden, intermediate, dtype, device)
        parallelize_module(self.parallel, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        self.local = _pair(hidden, intermediate // self.size, dtype, device)
        self.x = torch.randn(tokens, hidden, generator=gen).to(device=device, dtype=dtype)
        self.output_bytes = tokens * hidden * self.x.element_size()

    def _time(self, module: nn.Module, clock: Clock) -> tuple[float, float]:
        x = self.x.detach().requires_grad_(self.train)
        dist.barrier(group=self.group)
        t0 = clock.mark()
        y = module(x)
        t1 = clock.mark()
        if self.train:
            y.sum().backward()
        t2 = clock.mark()
        clock.synchronize()
        module.zero_grad(set_to_none=True)
        return clock.elapsed_ms(t0, t1), clock.elapsed_ms(t1, t2)

    def time(self, clock: Clock) -> list[dict[str, Any]]:
        """Time the pair on DTensors and its local shard; the differences as rows.

        Every rank of the group must call it (the parallel pair's all-reduces are collective).

        Args:
            clock: the device clock.

        Returns:
            ``collective_timings`` rows without ``collective_index`` (``tp_pair_forward``,
            ``tp_pair_backward`` when training; a non-positive difference is left out).
        """
        fwd_tp, bwd_tp = self._time(self.parallel, clock)
        fwd_local, bwd_local = self._time(self.local, clock)
        diffs = {"tp_pair_forward": fwd_tp - fwd_local}
        if self.train:
            diffs["tp_pair_backward"] = bwd_tp - bwd_local
        return [
            {"collective": name, "group": self.group_name, "group_size": self.size,
             "collective_bytes": self.output_bytes, "collective_ms": ms,
             "source": "microbenchmark"}
            for name, ms in diffs.items()
            if ms > 0
        ]  # fmt: skip
