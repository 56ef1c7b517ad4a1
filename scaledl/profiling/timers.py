"""Clocks for the profiler: ``time.perf_counter`` on CPU, CUDA events on GPU.

A clock hands out *marks* (opaque time stamps) and turns pairs of marks into milliseconds. On
CUDA, marks are ``torch.cuda.Event(enable_timing=True)`` recorded on the current stream, so
timing does not synchronise the device; :meth:`Clock.elapsed_ms` must only be called after
:meth:`Clock.synchronize`.
"""

from __future__ import annotations

import time
from typing import Any

import torch


class Clock:
    """Time stamps on the host (CPU) or on the current CUDA stream.

    Args:
        device: the device the model runs on.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device

    def mark(self) -> Any:
        """A time stamp: a float in seconds (CPU) or a recorded CUDA event."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def synchronize(self) -> None:
        """Wait for the device to finish the work queued so far (no-op on CPU)."""
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Milliseconds between two marks (after :meth:`synchronize` on CUDA)."""
        if self.cuda:
            return float(start.elapsed_time(end))
        return (end - start) * 1000.0
