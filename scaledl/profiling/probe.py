"""Calibration probe: fixed GEMMs, a memory sweep and an all-reduce that tell interference.

Every rank runs the same fixed work before and after each workload: a block of matrix products
of fixed size (about 10 ms on one CPU core, a few ms on a GPU), a block of element-wise adds over
a buffer larger than the last-level cache, and, when the world size is above 1, an all-reduce
of a fixed buffer (after a barrier, so the time is the collective's, not the ranks' skew). Each
figure is the median of ``repeats`` timings. Every rank times its GEMM blocks at the same time
(after a barrier); only each node's first rank sweeps the memory, the others waiting: ranks
sweeping together share the bandwidth by chance (on the reference VM two ranks' sweeps took
5 or 9 ms depending on whether their starts fell in the same scheduler tick), one rank alone
measures what other tenants leave of it. The GEMM block is long enough (several scheduler
slices) that a core shared with another process shows up as a slower block, where a single
sub-millisecond product would run inside one slice and look normal (measured on a 2-core VM: a
1 ms product's median did not move under a busy loop on its core, a 10 ms block of ten took
2.2x longer). The GEMM works inside the core's own caches, so it cannot see another tenant
saturating the shared cache and memory; the memory sweep does (measured on the same VM over two
quiet minutes: the step times of three quick workloads drifted 2-4% with a correlation of
0.45-0.60 to the sweep's time, 0.11-0.26 to the GEMM's).

A launch keeps a *baseline* per rank: the fastest figures of its first probes and of the
per-host baseline stored beside the profiles (:func:`merge_baselines`; interference only slows a
probe down, so the fastest is the least disturbed, and a launch that starts during a disturbance
does not take the disturbed figures for normal). A workload whose probes drift from the baseline
by more than a tolerance (:func:`probe_drift`) was measured while something else used the device
or the network, and is measured again (the worker's retry loop); the same idea as the
calibration runs of trace-replay systems on shared clusters.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

from scaledl.profiling.timers import Clock

#: Fixed probe work per device type: (square GEMM size, dtype, products per block,
#: all-reduce elements, memory-sweep elements, sweeps per block).
PROBE_WORK = {
    "cpu": (384, torch.float32, 10, 1_048_576, 8_000_000, 3),
    "cuda": (4096, torch.bfloat16, 10, 16_777_216, 268_435_456, 10),
}


@dataclass(frozen=True)
class ProbeResult:
    """One probe's figures on one rank.

    Attributes:
        gemm_ms: median milliseconds of the GEMM block.
        allreduce_ms: median milliseconds of the fixed all-reduce (``nan`` at world size 1).
        memory_ms: median milliseconds of the memory sweep (``nan`` on ranks other than their
            node's first, which do not sweep).
    """

    gemm_ms: float
    allreduce_ms: float
    memory_ms: float = float("nan")

    def to_dict(self) -> dict[str, float]:
        """JSON-safe figures."""
        return asdict(self)


class CalibrationProbe:
    """The fixed probe work of one rank.

    Args:
        device: this rank's device (``cpu`` or ``cuda``).
        repeats: timings per figure (the median is kept).

    Raises:
        ValueError: a device type without probe work, or ``repeats < 1``.
    """

    def __init__(self, device: torch.device, repeats: int = 5) -> None:
        if device.type not in PROBE_WORK:
            raise ValueError(f"calibration probe: field 'device' (value {device.type!r}) unknown")
        if repeats < 1:
            raise ValueError(f"calibration probe: field 'repeats' must be >= 1, got {repeats}")
        size, dtype, self.calls, elements, sweep, self.sweeps = PROBE_WORK[device.type]
        gen = torch.Generator().manual_seed(12345)
        self.a = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
        self.b = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
        self.buffer = torch.ones(elements, device=device)
        self.sweep_in = torch.ones(sweep, device=device)
        self.sweep_out = torch.empty_like(self.sweep_in)
        self.clock = Clock(device)
        self.repeats = repeats

    def _gemm_block_ms(self) -> float:
        start = self.clock.mark()
        for _ in range(self.calls):
            torch.mm(self.a, self.b)
        end = self.clock.mark()
        self.clock.synchronize()
        return self.clock.elapsed_ms(start, end)

    def _memory_ms(self, sweeps: int | None = None) -> float:
        start = self.clock.mark()
        for _ in range(self.sweeps if sweeps is None else sweeps):
            torch.add(self.sweep_in, 1.0, out=self.sweep_out)
        end = self.clock.mark()
        self.clock.synchronize()
        return self.clock.elapsed_ms(start, end)

    def _allreduce_ms(self) -> float:
        dist.barrier()
        self.clock.synchronize()
        start = self.clock.mark()
        dist.all_reduce(self.buffer)
        end = self.clock.mark()
        self.clock.synchronize()
        return self.clock.elapsed_ms(start, end)

    def run(self) -> ProbeResult:
        """Run the probe (a collective when the process group has more than one rank).

        Returns:
            The medians of :attr:`repeats` timings.
        """
        distributed = dist.is_initialized() and dist.get_world_size() > 1

        def together(block):
            # Every rank times each block at the same time, at the baseline and later alike:
            # ranks on one host share its memory bandwidth, so a rank alone looks faster.
            if distributed:
                dist.barrier()
            return block()

        gemm = statistics.median(together(self._gemm_block_ms) for _ in range(self.repeats))
        memory = float("nan")
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            memory = statistics.median(self._memory_ms() for _ in range(self.repeats))
        if distributed:
            dist.barrier()
        allreduce = float("nan")
        if distributed:
            allreduce = statistics.median(self._allreduce_ms() for _ in range(self.repeats))
        return ProbeResult(
            gemm_ms=float(gemm), allreduce_ms=float(allreduce), memory_ms=float(memory)
        )

    def interleaved(self) -> tuple[float, float]:
        """One short reference block between label epochs (duet-style concurrent reference).

        Every rank times one GEMM block at the same time (after a barrier when distributed);
        each node's first rank then sweeps the memory once untimed and times the next sweep.
        The untimed sweep re-faults the buffers the epoch's training evicted: timed cold, the
        first sweep after training work is itself slower than the baseline's sweeps in a loop
        (2-core CPU VM, 2026-12-03, nothing else running: 8.9 ms for the first sweep after
        training steps, 5.3 ms for the next, 3.8 ms per sweep in the baseline probe). Even warm,
        the one sweep is not the baseline's measurement, so the interference guard does not
        judge it against the baseline (:meth:`scaledl.profiling.worker._Guard.drift`); the
        drift correction compares it with the same figure of other launches
        (:mod:`scaledl.profiling.drift`).

        Returns:
            ``(gemm_ms, memory_ms)`` of this rank; ``memory_ms`` is ``nan`` on ranks other than
            their node's first, and is the time of *one* sweep (not :attr:`sweeps`).
        """
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()
        gemm = self._gemm_block_ms()
        memory = float("nan")
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            self._memory_ms(sweeps=1)  # untimed: the buffers back in place (docstring)
            memory = self._memory_ms(sweeps=1)
        return float(gemm), float(memory)


def baseline_of(probes: list[ProbeResult]) -> ProbeResult:
    """The baseline of a launch: the fastest of its first probes, figure by figure.

    Args:
        probes: at least one probe of this rank.

    Returns:
        The element-wise minimum (a figure ``nan`` in every probe stays ``nan``).

    Raises:
        ValueError: no probe.
    """
    if not probes:
        raise ValueError("probe baseline: no probe")

    def fastest(values: list[float]) -> float:
        values = [v for v in values if v == v]
        return min(values) if values else float("nan")

    return ProbeResult(
        gemm_ms=min(p.gemm_ms for p in probes),
        allreduce_ms=fastest([p.allreduce_ms for p in probes]),
        memory_ms=fastest([p.memory_ms for p in probes]),
    )


def merge_baselines(own: ProbeResult, stored: dict[str, float] | None) -> ProbeResult:
    """The faster of a launch's own baseline and a stored one, figure by figure.

    Args:
        own: this launch's baseline of this rank.
        stored: the stored baseline of this rank (``gemm_ms``, ``allreduce_ms``,
            ``memory_ms``; missing or ``None`` figures are ``nan``), or ``None``.

    Returns:
        The element-wise minimum (``nan`` figures are ignored).
    """
    if not stored:
        return own

    def figure(key: str) -> float:
        value = stored.get(key)
        return float("nan") if value is None else float(value)

    kept = ProbeResult(float(stored["gemm_ms"]), figure("allreduce_ms"), figure("memory_ms"))
    return baseline_of([own, kept])


def probe_drift(probe: ProbeResult, baseline: ProbeResult) -> dict[str, float]:
    """Relative slow-down of a probe against the baseline, per figure.

    Args:
        probe: a probe of this rank.
        baseline: the rank's baseline.

    Returns:
        ``{"gemm": g, "allreduce": a, "memory": m}`` with ``g = gemm_ms / baseline.gemm_ms - 1``
        (0.05 = 5% slower; negative when faster), ``a`` and ``m`` likewise, ``nan`` where a
        figure is missing.
    """

    def ratio(now: float, base: float) -> float:
        return now / base - 1.0 if now == now and base == base and base > 0 else float("nan")

    return {
        "gemm": ratio(probe.gemm_ms, baseline.gemm_ms),
        "allreduce": ratio(probe.allreduce_ms, baseline.allreduce_ms),
        "memory": ratio(probe.memory_ms, baseline.memory_ms),
    }
