"""Cost of the collectives of a layout: all-reduce, all-gather, reduce-scatter, send/recv.

Ring algorithms over a group of ``n`` ranks (Thakur, Rabenseifner & Gropp, "Optimization of
Collective Communication Operations in MPICH", IJHPCA 2005, Sec. 4; Patarasuk & Yuan 2009):
for a buffer of ``B`` bytes (the full, unsharded tensor), each rank sends

* all-gather and reduce-scatter: ``(n - 1) / n * B`` in ``n - 1`` steps;
* all-reduce (a reduce-scatter then an all-gather): ``2 (n - 1) / n * B``;
* broadcast (pipelined from the root, ZeRO-1's parameter partitions) and send/recv (point to
  point, pipeline stages): ``B``, one message.

so with the latency ``alpha`` and the per-byte cost ``beta`` of the alpha-beta model
(:class:`~scaledl.models.allreduce.AlphaBetaAllReduce`), ``t = alpha + factor(n) * B * beta``.
:class:`CollectiveModel` holds one (alpha, beta) per collective: fitted on measured
``collective_timings`` rows (the profiler's table, ``collective`` / ``group_size`` /
``collective_bytes`` / ``collective_ms``) where a collective has at least two of them, derived
from the fitted all-reduce model otherwise (same alpha and beta: the same links and
algorithm family, one half of the all-reduce for all-gather and reduce-scatter).

Two all-reduces are told apart. ``all_reduce`` is the gradient synchronisation (DDP's and
ZeRO-1's buckets), issued asynchronously during the backward and timed from issue to
completion, so on a busy host its rows hold waiting behind compute and earlier buckets (on the
2-core CPU VM of 2026-12-03: 4-10 ms per 1-3 MiB bucket whatever the size); the composition
hides it behind the backward by an overlap factor. ``blocking_all_reduce`` is one a rank waits
for before it goes on, tensor parallelism's (Megatron's, on the critical path): it is fitted on
the all-reduce rows that were timed blocking, the profiler's micro-benchmarked ones
(``source`` ``microbenchmark``, :mod:`scaledl.profiling.collectives`) and tensor parallelism's
own (``group`` ``tp``), and without such rows takes the gradient all-reduce's parameters
(``source`` ``from all_reduce``, the cost every version before this split used).

The four tensor-parallel API costs (:data:`TP_API`: ``tp_colwise_forward``,
``tp_rowwise_forward``, ``tp_colwise_backward``, ``tp_rowwise_backward``) are no collective of
their own: the cost PyTorch's tensor parallelism adds to one column-wise and to one row-wise
linear layer over the local shard's compute, in forward and in backward (their all-reduces and
DTensor's dispatch), micro-benchmarked in every layout profile without tensor parallelism
(:mod:`scaledl.profiling.tp_probe`) and fitted by size like a collective (``t = alpha + B *
beta``, ``B`` the pair's output bytes). Without rows they cost nothing (``source`` ``none``):
Megatron-LM's tensor parallelism, which the GPU rows were measured with, runs no DTensors.

The four FSDP2 API costs (:data:`FSDP_API`) are alike: micro-benchmarked by every ZeRO-1,
tensor- and pipeline-parallel workload of a layout profile (:mod:`scaledl.profiling.fsdp_probe`),
the cost of
one sharded unit beyond its compute in forward (``fsdp_forward``) and in backward with and
without resharding after the forward (``fsdp_backward``, ``zero2_backward``), all-gathers and
reduce-scatters included, fitted by the unit's parameter bytes; and the cost of stepping one
DTensor parameter (``fsdp_step``), fitted by the mean tensor's bytes. Without rows they cost
nothing (``source`` ``none``) and the composition costs a unit by its all-gathers and
reduce-scatters instead (:mod:`scaledl.parallel.compose`). Like the tensor-parallel costs they
are measured over the profile's group (2 ranks on the CPU host) and have no term for the group
size: a layout of more ranks takes the same cost, an extrapolation the domain guard's layout
flag covers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from scaledl.models.allreduce_time import AllReduceTime
from scaledl.profiles.tables import API_COSTS

COLLECTIVES = ("all_reduce", "blocking_all_reduce", "all_gather", "reduce_scatter", "broadcast",
               "send", "recv", *API_COSTS)  # fmt: skip
#: Collectives of the same message pattern, in order of preference
#: (:func:`~scaledl.parallel.collective_fit.fit_collective_model`).
RELATED = {
    "send": ("recv", "broadcast"),
    "recv": ("send", "broadcast"),
    "broadcast": ("send", "recv"),
    "all_gather": ("reduce_scatter",),
    "reduce_scatter": ("all_gather",),
}
#: Columns of the profiler's ``collective_timings`` table this model reads.
TIMING_COLUMNS = ("collective", "group_size", "collective_bytes", "collective_ms")


def timed_blocking(timings: pd.DataFrame) -> np.ndarray:
    """Which all-reduce rows were timed blocking (module docstring), bool per row.

    Args:
        timings: ``collective_timings`` rows; without ``source`` and ``group`` columns no row
            is known to be blocking.

    Returns:
        Shape (len(timings),): an ``all_reduce`` row micro-benchmarked or of the ``tp`` group.
    """
    blocking = np.zeros(len(timings), dtype=bool)
    if "source" in timings:
        blocking |= (timings["source"] == "microbenchmark").to_numpy()
    if "group" in timings:
        blocking |= (timings["group"] == "tp").to_numpy()
    return blocking & (timings["collective"] == "all_reduce").to_numpy()


def bytes_factor(collective: str, group_size: Any) -> np.ndarray:
    """The share of the buffer each rank sends in the ring algorithm of a collective.

    Args:
        collective: one of :data:`COLLECTIVES`.
        group_size: ranks ``n`` in the group (>= 1), any shape.

    Returns:
        ``2(n-1)/n`` (either all-reduce), ``(n-1)/n`` (all-gather, reduce-scatter) or 1 (broadcast,
        send/recv, the tensor-parallel API costs; 0 for ``n == 1``), float array.

    Raises:
        ValueError: an unknown collective.
    """
    n = np.asarray(group_size, dtype=float)
    if collective in ("all_reduce", "blocking_all_reduce"):
        return 2.0 * (n - 1.0) / n
    if collective in ("all_gather", "reduce_scatter"):
        return (n - 1.0) / n
    if collective in ("broadcast", "send", "recv", *API_COSTS):
        return np.where(n > 1, 1.0, 0.0)
    raise ValueError(f"field 'collective' must be one of {COLLECTIVES}, got {collective!r}")


def checked_sizes(collective: str, nbytes: Any, group_size: Any) -> tuple[np.ndarray, np.ndarray]:
    """``nbytes`` and ``group_size`` as float arrays, checked.

    Raises:
        ValueError: a negative size or a group below 1, naming the collective.
    """
    nbytes = np.asarray(nbytes, dtype=float)
    n = np.asarray(group_size, dtype=float)
    if np.any(nbytes < 0) or np.any(n < 1):
        raise ValueError(f"collective {collective}: bytes {nbytes!r}, group {n!r}")
    return nbytes, n


class CollectiveModel:
    """Alpha-beta cost of every collective (module docstring).

    Args:
        params: ``{collective: (alpha_ms, ms_per_byte)}`` for every collective of
            :data:`COLLECTIVES`.
        source: ``{collective: "measured" | "derived"}``, where each pair came from.
    """

    def __init__(self, params: dict[str, tuple[float, float]], source: dict[str, str]) -> None:
        missing = [c for c in COLLECTIVES if c not in params]
        if missing:
            raise ValueError(f"collective model: no parameters for {missing}")
        self.params = dict(params)
        self.source = dict(source)

    @classmethod
    def from_allreduce(cls, allreduce: AllReduceTime | None) -> CollectiveModel:
        """Every collective from a fitted all-reduce model (``None``: free communication).

        The all-reduce's first fitted group (single node, smallest message regime) gives
        alpha and beta: a layout's groups of 2 to 8 ranks within a node. The API costs
        (:data:`API_COSTS`) are not derived: they cost 0 (``source`` ``none``).
        """
        free = dict.fromkeys(COLLECTIVES, (0.0, 0.0))
        if allreduce is None:
            return cls(free, dict.fromkeys(COLLECTIVES, "none"))
        alpha = float(allreduce.alpha_ms_)
        beta = 1.0 / allreduce.bandwidth_bytes_per_ms_
        params = {c: (0.0, 0.0) if c in API_COSTS else (alpha, beta) for c in COLLECTIVES}
        source = {c: "none" if c in API_COSTS else "derived" for c in COLLECTIVES}
        return cls(params, source)

    def predict_ms(self, collective: str, nbytes: Any, group_size: Any) -> np.ndarray:
        """Time of one collective of ``nbytes`` (the full buffer) over ``group_size`` ranks.

        Args:
            collective: one of :data:`COLLECTIVES`.
            nbytes: buffer bytes (>= 0), any shape.
            group_size: ranks (>= 1); a group of one costs 0.

        Returns:
            Milliseconds, the broadcast shape of the inputs.

        Raises:
            ValueError: an unknown collective, a negative size or a group below 1.
        """
        nbytes, n = checked_sizes(collective, nbytes, group_size)
        factor = bytes_factor(collective, n)
        alpha, beta = self.params[collective]
        return np.where(n > 1, alpha + factor * nbytes * beta, 0.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe parameters (``from_dict`` reads them back)."""
        return {
            "kind": "collective_model",
            "params": {c: list(p) for c, p in self.params.items()},
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CollectiveModel:
        """Rebuild from :meth:`to_dict`.

        Raises:
            ValueError: not a collective model mapping.
        """
        if not isinstance(data, dict) or data.get("kind") != "collective_model":
            raise ValueError(f"collective model: field 'kind' value {data!r:.60}")
        return cls({c: (float(a), float(b)) for c, (a, b) in data["params"].items()},
                   dict(data["source"]))  # fmt: skip
