"""Micro-benchmark of FSDP2's per-unit cost, run by the layouts that do not shard like it.

FSDP2 (``torch.distributed.fsdp.fully_shard``) runs each unit (a transformer block, the root)
on DTensor shards: before the unit's forward it all-gathers the parameters (copy-in into one
flat buffer, the all-gather, copy-out into the unsharded parameters), after the forward it frees
them (``reshard_after_forward=True``, FSDP; ``False``, ZeRO-2: kept until the backward), in the
backward it gathers them again (FSDP only), and after the unit's backward it reduce-scatters the
gradients (copy-in, the reduce-scatter, copy-out into the sharded gradients) and the root waits
for the last one; the optimizer then steps DTensor shards, one tensor at a time through
DTensor's dispatch on a CPU. On the 2-core CPU VM of 2026-12-04 (h = 128, gloo; the committed
profile ``datasets/layouts-cpu/validated``, medians) that cost 1.3-2.6 ms per 0.5-2 MB unit in
forward and 4.8-8.7 ms in backward beyond the same module's compute, where the all-gathers and
reduce-scatters FSDP ran in that profile's iterations took 0.8 and 2.6 ms per 1 MB: the
collectives are a part of it. A layout model that costs an FSDP unit by its collectives (as
:mod:`scaledl.parallel.compose` did, from the all-reduce model of DDP's buckets) is off by the
rest, and no layout kind but FSDP's runs it, so a fold that holds FSDP out cannot learn it.

So every ZeRO-1, tensor- and pipeline-parallel training workload of a layout profile (the
layout profiler's, :mod:`scaledl.profiling.layout_session`; not ``zero2`` / ``fsdp``, which run
it themselves) times, per instrumented step, one Megatron pair (``h -> intermediate_size ->
h``, the workload's widths, and once more four times as wide, :data:`WIDTH_SCALES`; at one
micro-batch's tokens) three ways over a 2+ rank group of the layout (:class:`ShardingProbe`):
as plain modules (at most :data:`MAX_PAIR_BYTES` of weights: :func:`probe_widths`), under
``fully_shard`` with ``reshard_after_forward=True`` and with
``False``; each one untimed call, then one timed after a barrier (forward, backward, AdamW
step); plus the step of the pair's local shard as plain modules (``h -> intermediate_size / n
-> h``: the same tensors at a shard's size). The differences are one ``collective_timings``
row each (:data:`PROBE_ROWS`, source ``microbenchmark``):

* ``fsdp_forward``: the sharded forward less the plain one (either resharding; the FSDP one),
  ``collective_bytes`` the pair's parameter bytes (the unit's unsharded size);
* ``fsdp_backward`` / ``zero2_backward``: the backward with / without resharding after the
  forward less the plain one, same bytes;
* ``fsdp_step``: the FSDP step less the local shard's plain step, *per parameter tensor*,
  ``collective_bytes`` the mean tensor's unsharded bytes: a rank's step costs its tensors times
  it.

:class:`~scaledl.parallel.collectives.CollectiveModel` fits each by size
(:data:`~scaledl.parallel.collectives.FSDP_API`); the composition charges every FSDP / ZeRO-2
unit its forward and backward cost on the critical path, in place of its all-gathers and
reduce-scatters (they are inside the probe's difference), and a sharded rank's step its tensors
times the step cost. A difference that is not positive (noise larger than the cost) is not
recorded, as for :mod:`scaledl.profiling.tp_probe`; with the slowest rank's row kept per call
(:func:`scaledl.parallel.training.collective_rows`) that biases the small, noisy costs
(``zero2_backward``, ``fsdp_step``) upward, a choice shared with that probe.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from scaledl.profiles.tables import FSDP_API
from scaledl.profiling.timers import Clock
from scaledl.profiling.tp_probe import megatron_pair

#: The probe's rows, the collective model's FSDP costs (module docstring).
PROBE_ROWS = FSDP_API
#: The pair's inner width as multiples of the workload's ``intermediate_size``: two sizes, so
#: that the collective model's fit by bytes separates a unit's fixed cost from its per-byte
#: one (every workload of a profile may have the same widths).
WIDTH_SCALES = (1, 4)
#: The largest pair the probe builds, parameter bytes: a wide model's pair (``h = 4096``,
#: ``intermediate_size = 16384``: 2 GiB of FP32 weights at the wide scale, four such modules
#: before AdamW's states) would take the device memory the workload needs; a unit's cost is
#: fitted by bytes, so the probe's sizes need only differ (:func:`probe_widths`).
MAX_PAIR_BYTES = 32 * 2**20


def probe_widths(hidden: int, intermediate: int, ranks: int, element_bytes: int) -> tuple[int, ...]:
    """The probe pair's inner width at each of :data:`WIDTH_SCALES`, within the byte cap.

    ``intermediate_size`` times each scale, the widest capped so that the pair's weights stay
    within :data:`MAX_PAIR_BYTES` and the others kept that many times narrower; each a
    multiple of ``ranks`` (at least ``ranks``), so that it shards evenly.

    Args:
        hidden: the workload's ``h``.
        intermediate: its ``intermediate_size``.
        ranks: ranks of the probe's group.
        element_bytes: bytes per parameter of the workload's dtype.

    Returns:
        One width per scale, in the order of :data:`WIDTH_SCALES`.
    """
    cap = max(MAX_PAIR_BYTES // (2 * hidden * element_bytes), ranks)
    top = max(WIDTH_SCALES)
    widest = min(intermediate * top, cap)
    widths = [min(intermediate * k, widest * k // top) for k in WIDTH_SCALES]
    return tuple(max(w - w % ranks, ranks) for w in widths)


def _pair(hidden: int, intermediate: int, dtype: torch.dtype, device: torch.device) -> nn.Module:
    """The tensor-parallel probe's pair, initialised from seed 0 (the workload's RNG kept)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return megatron_pair(hidden, intermediate, dtype, device)


class ShardingProbe:
    """One Megatron pair as plain modules and under FSDP2, both reshardings (module docstring).

    Args:
        group: the process group to shard over (``None``: the default group).
        group_name: its name in the rows (``dp``, ``tp`` or ``pp``).
        hidden: the workload's hidden size ``h``.
        intermediate: the pair's inner width (the workload's ``intermediate_size``).
        tokens: rows of the input (one micro-batch's ``batch / m * seq_len``).
        dtype: the workload's dtype.
        device: this rank's device.

    The pair's widths are rounded to the group's ranks (:func:`probe_widths`), so any
    ``intermediate_size`` is probed.
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
    ) -> None:
        # torch.distributed's FSDP API: only this probe's worker needs it.
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard

        self.group = group or dist.group.WORLD
        self.size = dist.get_world_size(self.group)
        self.group_name = group_name
        mesh = DeviceMesh.from_group(self.group, device.type)
        self.modules: dict[tuple[int, str], nn.Module] = {}
        element_bytes = torch.empty(0, dtype=dtype).element_size()
        widths = probe_widths(hidden, intermediate, self.size, element_bytes)
        for scale, width in zip(WIDTH_SCALES, widths, strict=True):
            self.modules[scale, "plain"] = _pair(hidden, width, dtype, device)
            for name, reshard in (("fsdp", True), ("zero2", False)):
                module = _pair(hidden, width, dtype, device)
                fully_shard(module, mesh=mesh, reshard_after_forward=reshard)
                self.modules[scale, name] = module
            self.modules[scale, "shard"] = _pair(hidden, width // self.size, dtype, device)
        self.optimizers = {
            key: torch.optim.AdamW(m.parameters(), lr=1e-4) for key, m in self.modules.items()
        }
        params = {scale: list(self.modules[scale, "plain"].parameters()) for scale in WIDTH_SCALES}
        self.tensors = len(params[1])
        self.param_bytes = {scale: sum(p.numel() * p.element_size() for p in ps)
                            for scale, ps in params.items()}  # fmt: skip
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(tokens, hidden, generator=gen).to(device=device, dtype=dtype)

    def _time(self, key: tuple[int, str], clock: Clock) -> dict[str, float]:
        """Forward, backward and step of one module, ms (after a barrier over the group)."""
        module, optimizer = self.modules[key], self.optimizers[key]
        x = self.x.detach().requires_grad_(True)
        dist.barrier(group=self.group)
        t0 = clock.mark()
        y = module(x)
        t1 = clock.mark()
        y.sum().backward()
        t2 = clock.mark()
        optimizer.step()
        t3 = clock.mark()
        clock.synchronize()
        optimizer.zero_grad(set_to_none=True)
        return {"forward": clock.elapsed_ms(t0, t1), "backward": clock.elapsed_ms(t1, t2),
                "step": clock.elapsed_ms(t2, t3)}  # fmt: skip

    def _time_warm(self, key: tuple[int, str], clock: Clock) -> dict[str, float]:
        """:meth:`_time` after one untimed call (the first call after other work runs cold)."""
        self._time(key, clock)
        return self._time(key, clock)

    def time(self, clock: Clock) -> list[dict[str, Any]]:
        """Time the four modules; the differences as ``collective_timings`` rows.

        Every rank of the group must call it (the sharded modules' collectives).

        Args:
            clock: the device clock.

        Returns:
            Rows without ``collective_index``, in the order of :data:`PROBE_ROWS`; a
            non-positive difference is left out.
        """
        t = {key: self._time_warm(key, clock) for key in self.modules}
        rows = []
        for scale in WIDTH_SCALES:
            plain, nbytes = t[scale, "plain"], self.param_bytes[scale]
            fsdp, zero2, shard = t[scale, "fsdp"], t[scale, "zero2"], t[scale, "shard"]
            diffs = {
                "fsdp_forward": (fsdp["forward"] - plain["forward"], nbytes),
                "fsdp_backward": (fsdp["backward"] - plain["backward"], nbytes),
                "zero2_backward": (zero2["backward"] - plain["backward"], nbytes),
                "fsdp_step": ((fsdp["step"] - shard["step"]) / self.tensors,
                              nbytes / self.tensors),
            }  # fmt: skip
            rows += [
                {"collective": name, "group": self.group_name, "group_size": self.size,
                 "collective_bytes": int(b), "collective_ms": ms, "source": "microbenchmark"}
                for name, (ms, b) in diffs.items()
                if ms > 0
            ]  # fmt: skip
        return rows
