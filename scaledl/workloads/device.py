"""Name this host's device and backend, as stored in :class:`~scaledl.workloads.spec.Workload`.

CUDA hosts are named by ``torch.cuda.get_device_name`` (``cuda:NVIDIA H100 80GB HBM3``) and use
NCCL; CPU hosts by the processor's model name from ``/proc/cpuinfo`` (``cpu:AMD EPYC``, or
``platform.processor()`` elsewhere) and use gloo with one thread per rank.
"""

from __future__ import annotations

import platform
from functools import cache
from pathlib import Path

import torch


@cache
def local_device_name() -> str:
    """``cuda:<GPU name>`` when CUDA is available, else ``cpu:<processor model>``."""
    if torch.cuda.is_available():
        return f"cuda:{torch.cuda.get_device_name(0)}"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return "cpu:" + line.split(":", 1)[1].strip()
    return "cpu:" + (platform.processor() or platform.machine() or "unknown")


def local_backend() -> str:
    """``nccl`` on CUDA hosts, ``gloo`` otherwise."""
    return "nccl" if torch.cuda.is_available() else "gloo"
