"""Pin each local rank to cores of its own (``os.sched_setaffinity``).

Without pinning, the scheduler migrates ranks between cores and lets them share one, and every
rank's OpenMP pool sizes itself for the whole machine. :func:`rank_cores` gives local rank ``r``
the cores ``r * cores_per_rank ... (r + 1) * cores_per_rank - 1`` of the cores this process may
use, and :func:`pin_local_rank` applies that and sets the rank's torch threads to its core count.
The launcher chooses ``cores_per_rank`` once for a whole profile (the largest local world size
of the batch decides), so a workload's ranks get the same resources at every world size.
"""

from __future__ import annotations

import os

import torch


def rank_cores(local_rank: int, cores_per_rank: int, available: list[int]) -> list[int]:
    """The cores of one local rank.

    Args:
        local_rank: the rank's index on this node (``LOCAL_RANK``).
        cores_per_rank: cores each rank gets (>= 1).
        available: the cores this process may use, sorted.

    Returns:
        The rank's cores, sorted.

        When a node runs more ranks than it has cores, ranks share cores round-robin (an
        oversubscribed profile; the recorded affinity shows it).

    Raises:
        ValueError: ``cores_per_rank < 1`` or no core available.
    """
    if cores_per_rank < 1:
        raise ValueError(f"pinning: field 'cores_per_rank' must be >= 1, got {cores_per_rank}")
    if not available:
        raise ValueError("pinning: no core available")
    first = local_rank * cores_per_rank
    return sorted({available[(first + i) % len(available)] for i in range(cores_per_rank)})


def pin_local_rank(local_rank: int, cores_per_rank: int) -> list[int]:
    """Pin this process to its cores and use one torch thread per core.

    Args:
        local_rank: the rank's index on this node.
        cores_per_rank: cores each rank gets.

    Returns:
        The cores this rank now runs on.

    Raises:
        ValueError: see :func:`rank_cores`.
    """
    cores = rank_cores(local_rank, cores_per_rank, sorted(os.sched_getaffinity(0)))
    os.sched_setaffinity(0, cores)
    torch.set_num_threads(len(cores))
    return cores


def cores_per_rank_for(max_local_world_size: int, available: int | None = None) -> int:
    """Cores per rank so that the largest local world size of a profile fits.

    Args:
        max_local_world_size: the most ranks one node runs in this profile.
        available: cores this process may use (default: ``os.sched_getaffinity``).

    Returns:
        ``max(available // max_local_world_size, 1)``.
    """
    available = available or len(os.sched_getaffinity(0))
    return max(available // max(max_local_world_size, 1), 1)
