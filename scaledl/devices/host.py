"""Measure this CPU host's device spec once (short GEMM and memory-copy probe) and store it.

CPU datasheets do not say what one profiling rank gets: ScaleDL's CPU ranks run with one thread
each (``OMP_NUM_THREADS=1``, see :mod:`scaledl.profiling.worker`), on a machine other processes
share. So the CPU spec is measured the way the ranks run, single-threaded:

* peak FLOP/s per precision (``fp32``, ``bf16``): the best of a few ``torch.mm`` calls on
  ``gemm_size`` x ``gemm_size`` matrices, ``2 n^3`` FLOPs each;
* memory bandwidth: the best of a few copies of a ``copy_mib`` MiB float32 tensor into another,
  counting read + write bytes (the STREAM "copy" kernel's convention, McCalpin 1995);
* ``num_sms``: logical cores (``os.cpu_count``); L2 from
  ``/sys/devices/system/cpu/cpu0/cache``; clock and memory from ``/proc/cpuinfo`` and
  ``/proc/meminfo`` (Linux), NaN-free defaults of 1 where the kernel does not say.

The result is stored per host as JSON (:func:`scaledl.devices.specs.host_spec_path`) and read
back by :func:`scaledl.devices.specs.device_spec`; probing again overwrites it. It takes about a
second with the defaults.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import time
from pathlib import Path

import torch

from scaledl.devices.local import local_device_name
from scaledl.devices.specs import DeviceSpec, host_spec_path
from scaledl.io.atomic import write_atomic


def _best_seconds(fn, repeats: int) -> float:
    fn()  # warm-up (allocation, first-touch)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def _gemm_tflops(n: int, dtype: torch.dtype, repeats: int) -> float:
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    return 2.0 * n**3 / _best_seconds(lambda: torch.mm(a, b), repeats) / 1e12


def _copy_gbps(mib: float, repeats: int) -> float:
    n = max(int(mib * 2**20 / 4), 1)
    src = torch.rand(n)
    dst = torch.empty_like(src)
    return 2.0 * 4 * n / _best_seconds(lambda: dst.copy_(src), repeats) / 1e9


def _l2_mb() -> float:
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")) if root.is_dir() else []:
        try:
            if (index / "level").read_text().strip() == "2":
                text = (index / "size").read_text().strip().upper()
                value = float(re.sub(r"[^0-9.]", "", text))
                return value / 1024 if text.endswith("K") else value
        except (OSError, ValueError):
            continue
    return 1.0


def _clock_mhz() -> float:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":", 1)[1])
    except (OSError, ValueError):
        pass
    return 1.0


def _memory_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return float(line.split()[1]) * 1024 / 1e9
    except (OSError, ValueError):
        pass
    return 1.0


def probe_host(
    gemm_size: int = 512, copy_mib: float = 64.0, repeats: int = 5, device_name: str | None = None
) -> DeviceSpec:
    """Measure this host's CPU spec, single-threaded (as a profiling rank runs).

    Args:
        gemm_size: side of the square GEMM operands.
        copy_mib: MiB copied by the bandwidth probe.
        repeats: timed repetitions (the best counts).
        device_name: the name to store it under (default: this host's ``cpu:<model>``).

    Returns:
        The measured :class:`~scaledl.devices.specs.DeviceSpec` (``measured=True``).
    """
    name = device_name or local_device_name()
    if not name.startswith("cpu"):
        name = "cpu:" + (platform.processor() or platform.machine() or "unknown")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fp32 = _gemm_tflops(gemm_size, torch.float32, repeats)
        bf16 = _gemm_tflops(gemm_size, torch.bfloat16, repeats)
        bandwidth = _copy_gbps(copy_mib, repeats)
    finally:
        torch.set_num_threads(previous)
    when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return DeviceSpec(
        device_name=name,
        kind="cpu",
        peak_tflops={"fp32": fp32, "tf32": float("nan"), "fp16": float("nan"), "bf16": bf16},
        mem_bandwidth_gbps=bandwidth,
        num_sms=float(os.cpu_count() or 1),
        cores_per_sm=1.0,
        l2_mb=_l2_mb(),
        clock_mhz=_clock_mhz(),
        memory_gb=_memory_gb(),
        source=(
            f"measured on host {platform.node()!r} at {when} by scaledl.devices.host.probe_host "
            f"(one thread: {gemm_size}^3 GEMM fp32/bf16, {copy_mib:g} MiB copy, best of "
            f"{repeats})"
        ),
        measured=True,
    )


def store_host_spec(spec: DeviceSpec, hosts_dir: Path | None = None) -> Path:
    """Write a measured host spec where :func:`~scaledl.devices.specs.device_spec` finds it.

    Returns:
        The JSON file written (atomically and durably, :mod:`scaledl.io.atomic`).
    """
    path = host_spec_path(spec.device_name, hosts_dir)
    return write_atomic(path, json.dumps(spec.to_record(), indent=2, sort_keys=True))
