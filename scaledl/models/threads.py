"""Run model fitting single-threaded.

Measured on a 2-core host: one epoch of the runtime GNN over 72 small graphs took 15 ms with one
torch thread and 2 s with two while another process was busy (OpenMP threads spin-waiting for a
core). The graphs are small, so parallel kernels buy nothing; fitting and prediction therefore
run with one torch thread and one BLAS/OpenMP thread (``threadpoolctl``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from threadpoolctl import threadpool_limits


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Limit torch, BLAS and OpenMP to one thread inside the block, then restore."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            yield
    finally:
        torch.set_num_threads(previous)
