"""Name this host's device and backend, as stored in :class:`~scaledl.workloads.spec.Workload`.

CUDA hosts are named by ``torch.cuda.get_device_name`` (``cuda:NVIDIA H100 80GB HBM3``) and use
NCCL; CPU hosts by the processor's model name from ``/proc/cpuinfo`` (``cpu:AMD EPYC``, or
``platform.processor()`` elsewhere) and use gloo with one thread per rank.

One naming on every path: a workload that names no device runs on this host's
(:func:`local_device_name`), and the bare kinds ``cpu`` and ``cuda`` (the old style, which gave
the same job two ids) are normalised to the one full name they can mean
(:func:`normalise_device_name`): this host's device of that kind when a workload is parsed, the
predictor's training device of that kind when a predictor reads a workloads file.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import torch

#: Device names without a model, accepted as input and normalised to a full name.
BARE_DEVICE_KINDS = ("cpu", "cuda")


@cache
def local_cpu_name() -> str:
    """``cpu:<processor model>`` of this host (``/proc/cpuinfo``, else ``platform``)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return "cpu:" + line.split(":", 1)[1].strip()
    return "cpu:" + (platform.processor() or platform.machine() or "unknown")


@cache
def local_device_name() -> str:
    """``cuda:<GPU name>`` when CUDA is available, else ``cpu:<processor model>``."""
    if torch.cuda.is_available():
        return f"cuda:{torch.cuda.get_device_name(0)}"
    return local_cpu_name()


def local_backend() -> str:
    """``nccl`` on CUDA hosts, ``gloo`` otherwise."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def local_devices() -> list[str]:
    """Full names of the devices a workload parsed here may name by kind alone.

    Returns:
        This host's CPU and, on a CUDA host, its first GPU.
    """
    names = [local_cpu_name()]
    if torch.cuda.is_available():
        names.append(local_device_name())
    return names


def normalise_device_name(name: str, devices: Sequence[str], owner: str) -> str:
    """The full device name ``name`` stands for among ``devices``.

    A full name (``cpu:<model>``, ``cuda:<GPU name>``, any name with a colon) is returned
    unchanged; a bare kind (``cpu``, ``cuda``) becomes the one device of that kind in
    ``devices``.

    Args:
        name: the device name given.
        devices: the full names it may stand for.
        owner: who owns ``devices`` (``"this host"``, ``"predictor v3"``), named in errors.

    Returns:
        The full device name.

    Raises:
        ValueError: a bare kind with no device, or several devices, of that kind; the message
            starts with ``device_name=`` and lists ``devices``.
    """
    if name not in BARE_DEVICE_KINDS:
        return name
    matching = sorted({d for d in devices if d.split(":", 1)[0] == name})
    if len(matching) == 1:
        return matching[0]
    found = "no" if not matching else "several"
    raise ValueError(
        f"device_name={name!r} is a device kind, not a device, and {owner} has {found} {name} "
        f"device ({sorted(devices)}): give the full name"
    )
