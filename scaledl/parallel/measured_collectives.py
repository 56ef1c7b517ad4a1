"""Collective times read off measured NCCL all-reduces of one GPU system (Vidur's).

:class:`~scaledl.parallel.collectives.CollectiveModel` derives every collective from one
(alpha, beta) pair. Where a system's all-reduce was measured over its real group sizes and
message sizes (Vidur, ``external/vidur/network/<system>/all_reduce.csv``: 2, 4 and 8 GPUs of a
DGX node, 2 KiB to 64 MiB), :class:`MeasuredCollectives` predicts from a model fitted on those
measurements instead:

* **all-reduce** (gradient and blocking alike: NCCL's measured all-reduce is the blocking
  collective): :class:`~scaledl.models.allreduce.AlphaBetaAllReduce` with one (alpha,
  bandwidth) per measured (workers, nodes) configuration and per message-size regime
  (breakpoints chosen by :func:`~scaledl.models.allreduce.select_size_breakpoints`): the
  ``per_configuration_piecewise`` variant, the one with the lowest held-out error on every
  Vidur system (:func:`scaledl.evaluation.vidur.evaluate_allreduce_model`: interpolation across
  message sizes, 2.6-6.4% MRE against 3.8-15.1% without the size regimes);
* **send / recv** of ``B`` bytes between two GPUs of the node: the measured 2-GPU all-reduce of
  ``B`` bytes. A 2-rank ring all-reduce sends ``2 (2 - 1) / 2 B = B`` bytes per rank over the
  same link (Thakur et al. 2005, Sec. 4), as one send of ``B`` does; it adds the reduction of
  ``B / 2`` elements, so it is an upper bound of the transfer (no send/recv was measured);
* **all-gather, reduce-scatter, broadcast**: not measured; derived as
  :meth:`CollectiveModel.from_allreduce` does (the first fitted group's alpha and beta).

Every group spans one node (``num_nodes`` 1): the systems' 4-GPU runs do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from scaledl.models.allreduce import AlphaBetaAllReduce, select_size_breakpoints
from scaledl.parallel.collectives import CollectiveModel, checked_sizes

#: Columns of :func:`scaledl.external.vidur.load_vidur_allreduce` the fit reads.
VIDUR_COLUMNS = ("system", "allreduce_bytes", "world_size", "num_nodes", "allreduce_ms")


def fit_system_allreduce(vidur: pd.DataFrame, system: str) -> AlphaBetaAllReduce:
    """The per-configuration, piecewise all-reduce model of one Vidur system, on all its rows.

    Args:
        vidur: :func:`scaledl.external.vidur.load_vidur_allreduce` (:data:`VIDUR_COLUMNS`).
        system: the system (e.g. ``h100_dgx``).

    Returns:
        The fitted model.

    Raises:
        ValueError: a missing column, or no row of ``system`` (naming the systems present).
    """
    missing = [c for c in VIDUR_COLUMNS if c not in vidur]
    if missing:
        raise ValueError(f"Vidur all-reduce table: missing column(s) {missing}")
    rows = vidur[vidur["system"] == system]
    if rows.empty:
        raise ValueError(
            f"Vidur all-reduce table: field 'system' has no {system!r} rows "
            f"(present: {sorted(vidur['system'].unique())})"
        )
    args = (rows["allreduce_bytes"], rows["world_size"], rows["allreduce_ms"], rows["num_nodes"])
    breakpoints = select_size_breakpoints(*args, per_configuration=True)
    return AlphaBetaAllReduce(per_configuration=True, size_breakpoints_bytes=breakpoints).fit(*args)


class MeasuredCollectives(CollectiveModel):
    """Collectives from a fitted all-reduce model of one system (module docstring).

    Args:
        allreduce: the fitted model (:func:`fit_system_allreduce`).
        system: the system's name, recorded in :meth:`to_dict`.
    """

    def __init__(self, allreduce: AlphaBetaAllReduce, system: str) -> None:
        derived = CollectiveModel.from_allreduce(allreduce)
        measured = {
            "all_reduce": "measured",
            "blocking_all_reduce": "measured",
            "send": "measured 2-GPU all-reduce",
            "recv": "measured 2-GPU all-reduce",
        }
        source = {**derived.source, **measured}
        super().__init__(derived.params, source)
        self.allreduce = allreduce
        self.system = system

    def predict_ms(self, collective: str, nbytes: Any, group_size: Any) -> np.ndarray:
        """Time of one collective of ``nbytes`` (the full buffer) over ``group_size`` ranks.

        Args:
            collective: one of :data:`~scaledl.parallel.collectives.COLLECTIVES`.
            nbytes: buffer bytes (>= 0), any shape.
            group_size: ranks (>= 1); a group of one costs 0.

        Returns:
            Milliseconds, the broadcast shape of the inputs.

        Raises:
            ValueError: an unknown collective, a negative size or a group below 1.
        """
        if collective not in ("all_reduce", "blocking_all_reduce", "send", "recv"):
            return super().predict_ms(collective, nbytes, group_size)
        nbytes, n = np.broadcast_arrays(*checked_sizes(collective, nbytes, group_size))
        ranks = n if "all_reduce" in collective else np.where(n > 1, 2.0, 1.0)
        out = self.allreduce.predict_ms(nbytes.ravel(), ranks.ravel()).reshape(nbytes.shape)
        return np.where(n > 1, out, 0.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe description: the system, the fitted all-reduce model and the sources."""
        return {
            "kind": "measured_collectives",
            "system": self.system,
            "allreduce": self.allreduce.to_dict(),
            "source": self.source,
        }
