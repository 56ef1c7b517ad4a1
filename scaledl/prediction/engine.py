"""Iteration times of many distinct workloads: graphs and the GNN in bounded chunks.

The caller gives each *iteration key* once (a workload less its dataset size: everything the
iteration time depends on). Graphs are built from the per-architecture templates
(:func:`~scaledl.graph.features.build_graph_set`: one trace per architecture, cached), the
layer-wise models predict each distinct layer call once
(:func:`~scaledl.models.node_times.node_predictions`), and the GNN runs over
:data:`CHUNK_GRAPHS` graphs at a time in one PyTorch Geometric batch, so memory stays bounded
whatever the number of workloads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from scaledl.models.roofline import named_notes
from scaledl.workloads.spec import Workload

#: Graphs per GNN batch: a BERT or T5 graph of the quick preset has 10 to 60 nodes, so a chunk
#: is at most a few hundred thousand nodes (tens of MB of features and hidden states).
CHUNK_GRAPHS = 4096


@dataclass(frozen=True)
class IterationPredictions:
    """Per distinct workload: the iteration time, the generic layer model's use, the clamps.

    Attributes:
        iteration_ms: predicted iteration milliseconds, shape (n,).
        generic_types: per workload, the layer types predicted by the generic layer model
            (sorted; empty when none was).
        bounded: per workload, the notes of its layer predictions clamped into the roofline
            band (:func:`~scaledl.models.roofline.bound_predictions`; empty when none was).
    """

    iteration_ms: np.ndarray
    generic_types: list[tuple[str, ...]]
    bounded: list[tuple[str, ...]] | None = None

    def generic_nodes(self, labels: list[str]) -> pd.DataFrame:
        """The nodes the domain guard reads (generic layer types and clamped layer times).

        Columns: ``workload_id``, ``layer_type``, ``used_generic``, ``bounded``.

        Args:
            labels: the name of each workload in the frame.
        """
        rows = [(labels[i], t, True, "") for i, ts in enumerate(self.generic_types) for t in ts]
        for i, notes in enumerate(self.bounded or []):
            rows.extend((labels[i], "", False, note) for note in notes)
        return pd.DataFrame(rows, columns=["workload_id", "layer_type", "used_generic", "bounded"])


def predict_iterations(
    method,
    workloads: list[Workload],
    arch_keys: list[str] | None = None,
    chunk_graphs: int = CHUNK_GRAPHS,
) -> IterationPredictions:
    """Iteration times of distinct workloads, :data:`CHUNK_GRAPHS` graphs at a time.

    Args:
        method: a fitted graph method (:class:`~scaledl.models.graph_prediction.GraphPrediction`).
        workloads: one workload per distinct iteration key.
        arch_keys: their :func:`~scaledl.graph.features.architecture_key`, when known.
        chunk_graphs: graphs per batch.

    Returns:
        The :class:`IterationPredictions`, in the order of ``workloads``.

    Raises:
        ValueError: ``chunk_graphs`` is not positive.
        scaledl.models.fitted.NotFittedError: the method is not fitted (scikit-learn's for a
            GPU predictor's method).
    """
    if chunk_graphs < 1:
        raise ValueError(f"chunk_graphs must be positive, got {chunk_graphs!r}")
    n = len(workloads)
    iteration_ms = np.empty(n)
    generic: list[tuple[str, ...]] = [()] * n
    bounded: list[tuple[str, ...]] = [()] * n
    for start in range(0, n, chunk_graphs):
        part = workloads[start : start + chunk_graphs]
        labels = [str(i) for i in range(len(part))]
        keys = None if arch_keys is None else arch_keys[start : start + chunk_graphs]
        ms, gs, preds = method.predict_distinct(part, ids=labels, arch_keys=keys)
        iteration_ms[start : start + len(part)] = ms
        if preds is None:
            continue
        used = preds["used_generic"].to_numpy(dtype=bool)
        if used.any():
            pairs = pd.DataFrame(
                {"graph": gs.graph[used], "layer_type": gs.nodes["layer_type"].to_numpy()[used]}
            )
            for g, types in pairs.groupby("graph")["layer_type"]:
                generic[start + int(g)] = tuple(sorted(set(types.astype(str))))
        notes = preds["bounded"].to_numpy(dtype=object)
        clamped = notes != ""
        if clamped.any():
            names = gs.nodes["layer_name"].to_numpy()[clamped]
            frame = pd.DataFrame(
                {"graph": gs.graph[clamped], "note": named_notes(names, notes[clamped])}
            )
            for g, group in frame.groupby("graph")["note"]:
                bounded[start + int(g)] = tuple(group)
    return IterationPredictions(iteration_ms, generic, bounded)
