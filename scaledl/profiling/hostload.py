"""The load other processes put on this host's cores, measured with psutil.

A CPU measurement is only as good as the machine is quiet. :class:`ForeignLoadMeter` measures,
over an interval, the CPU time the whole host spent busy (``psutil.cpu_times``: user, nice,
system, irq, softirq and steal, the time a hypervisor gave to another guest) minus the CPU time
of the profiler's own process tree (the launcher, ``torchrun`` and its ranks), divided by the
interval: the average number of cores other processes kept busy (*foreign load*, in cores). A
busy loop on one core reads about 1.0; a quiet 2-core VM about 0.01-0.05.

:func:`wait_for_quiet_host` is the check before a launch: it samples the foreign load until it
is below a threshold or a bounded wait is spent, and reports what it saw either way.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

_BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")


def _host_busy_s() -> float:
    times = psutil.cpu_times()
    return float(sum(getattr(times, f, 0.0) for f in _BUSY_FIELDS))


def _tree_cpu_s(root_pid: int) -> float:
    """CPU seconds (user + system) of ``root_pid`` and every live descendant."""
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            cpu = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += cpu.user + cpu.system
    return total


class ForeignLoadMeter:
    """Average cores kept busy by processes outside the profiler's tree over an interval.

    Args:
        root_pid: the root of the profiler's own process tree (default: this process).
    """

    def __init__(self, root_pid: int | None = None) -> None:
        self.root_pid = int(root_pid or os.getpid())
        self._start: tuple[float, float, float] | None = None

    def start(self) -> None:
        """Begin an interval."""
        self._start = (time.monotonic(), _host_busy_s(), _tree_cpu_s(self.root_pid))

    def stop(self) -> float:
        """End the interval.

        Returns:
            Foreign load in cores (>= 0), averaged over the interval.

        Raises:
            RuntimeError: :meth:`start` was not called.
        """
        if self._start is None:
            raise RuntimeError("ForeignLoadMeter.stop() before start()")
        t0, busy0, own0 = self._start
        wall = max(time.monotonic() - t0, 1e-3)
        foreign = (_host_busy_s() - busy0) - (_tree_cpu_s(self.root_pid) - own0)
        self._start = None
        return max(foreign, 0.0) / wall


@dataclass(frozen=True)
class HostLoadReport:
    """What :func:`wait_for_quiet_host` saw.

    Attributes:
        foreign_load_cores: the last sample's foreign load (cores).
        max_seen_cores: the largest sample.
        waited_s: seconds spent waiting.
        quiet: whether the last sample was below the threshold.
    """

    foreign_load_cores: float
    max_seen_cores: float
    waited_s: float
    quiet: bool

    def describe(self) -> str:
        """One line for the log."""
        state = "quiet" if self.quiet else "still busy"
        return (
            f"host {state}: foreign load {self.foreign_load_cores:.2f} cores "
            f"(max {self.max_seen_cores:.2f}) after waiting {self.waited_s:.1f} s"
        )


def wait_for_quiet_host(
    max_foreign_cores: float, max_wait_s: float, sample_s: float = 1.0, root_pid: int | None = None
) -> HostLoadReport:
    """Sample the foreign load until it is below a threshold or the wait is spent.

    Args:
        max_foreign_cores: threshold in cores.
        max_wait_s: bound of the wait in seconds (one sample is always taken).
        sample_s: length of one sample in seconds.
        root_pid: root of the profiler's process tree (default: this process).

    Returns:
        A :class:`HostLoadReport`; the caller decides what a still busy host means.
    """
    meter = ForeignLoadMeter(root_pid)
    started = time.monotonic()
    seen: list[float] = []
    while True:
        meter.start()
        time.sleep(sample_s)
        seen.append(meter.stop())
        waited = time.monotonic() - started
        if seen[-1] <= max_foreign_cores or waited >= max_wait_s:
            return HostLoadReport(seen[-1], max(seen), waited, seen[-1] <= max_foreign_cores)
