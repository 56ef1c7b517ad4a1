"""A design check: how much a set of profiled workloads informs the predictor's own models.

The D-optimal design (:mod:`scaledl.design`) maximises the information of a *workload-level*
response surface: main effects (learning curves) or a quadratic with interactions (the quick
preset) in the log2 of the size factors, plus additive family effects. ScaleDL does not fit that
surface. It fits

* one **layer-wise work model per layer type** (:mod:`scaledl.models.layerwise`), linear in a
  layer call's FLOPs, ATen operators, bytes moved and parameters, with a boosted correction on
  their logarithms: its information comes from the spread of those four quantities over the
  layer calls *of each type*, and several types exist in one family only (BERT's split
  feed-forward, T5's cross-attention, LLaMA's rotary embedding, the vision patch embedding);
* a **GNN** over layer graphs with all-reduce buckets only at world size > 1, which needs each
  family at every world size.

So the check scores a subset of workloads against a reference set (the pool it was chosen from):

* ``layerwise_d_efficiency``: for each layer type, the D-efficiency per layer call of the
  subset's information matrix for the layer-wise features (``log1p`` of FLOPs, operators, bytes,
  parameters, standardised on the reference, with an intercept): ``(det M_sub / det
  M_ref)^(1/p)`` with ``M = Z^T Z / n`` (Atkinson, Donev & Tobias 2007, ch. 10; 0 when the
  subset cannot estimate the type's model, 1 when a call of the subset is as informative as an
  average call of the reference); then the mean over the reference's layer types;
* ``family_world_coverage``: the share of the reference's (family, world size) cells the subset
  has at least one workload in.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Layer-wise work features the check scores (forward direction of ``layer_features``).
CHECK_FEATURES = ("fwd_flops", "fwd_ops", "bytes_moved", "params")


def _feature_frame(nodes: pd.DataFrame) -> pd.DataFrame:
    layers = nodes[nodes["node_kind"] == "layer"]
    return pd.DataFrame(
        {
            "graph": layers["graph"].to_numpy(),
            "layer_type": layers["layer_type"].to_numpy(),
            "fwd_flops": np.log1p(layers["fwd_flops"].to_numpy(dtype=float)),
            "fwd_ops": np.log1p(layers["fwd_ops"].to_numpy(dtype=float)),
            "bytes_moved": np.log1p(
                (layers["input_bytes"] + layers["output_bytes"]).to_numpy(dtype=float)
            ),
            "params": np.log1p(layers["params"].to_numpy(dtype=float)),
        }
    )


class DesignCheck:
    """Scores subsets of a reference set of workloads for the predictor's models.

    Args:
        nodes: layer-graph nodes of the reference workloads
            (:attr:`~scaledl.graph.features.GraphSet.nodes`: ``graph``, ``node_kind``,
            ``layer_type`` and the layer feature columns).
        families: family of each reference graph, shape (num_graphs,).
        world_sizes: world size of each reference graph, shape (num_graphs,).

    Attributes:
        layer_types: the types scored: those whose reference model is estimable.
    """

    def __init__(self, nodes: pd.DataFrame, families, world_sizes) -> None:
        self._frame = _feature_frame(nodes)
        self._families = np.asarray(families).astype(str)
        self._world = np.asarray(world_sizes).astype(int)
        self._cells = set(zip(self._families, self._world, strict=True))
        self._scales: dict[str, tuple[list[str], np.ndarray, np.ndarray, float]] = {}
        for layer_type, group in self._frame.groupby("layer_type"):
            values = group[list(CHECK_FEATURES)]
            varying = [c for c in CHECK_FEATURES if values[c].std() > 1e-9]
            mean, std = values[varying].mean().to_numpy(), values[varying].std().to_numpy()
            log_det = self._log_det(group, varying, mean, std)
            if np.isfinite(log_det):
                self._scales[str(layer_type)] = (varying, mean, std, log_det)
        self.layer_types = sorted(self._scales)

    @staticmethod
    def _log_det(rows: pd.DataFrame, varying: list[str], mean, std) -> float:
        z = (rows[varying].to_numpy() - mean) / std
        design = np.column_stack([np.ones(len(z)), z])
        if len(design) < design.shape[1]:
            return -np.inf
        sign, log_det = np.linalg.slogdet(design.T @ design / len(design))
        return float(log_det) if sign > 0 and log_det > -30 * design.shape[1] else -np.inf

    def layerwise_d_efficiency(self, graphs) -> float:
        """Mean over layer types of the subset's D-efficiency per layer call (module docstring).

        Args:
            graphs: indices of the subset's workloads in the reference.

        Returns:
            The mean efficiency (0 for a type the subset cannot estimate).
        """
        rows = self._frame[np.isin(self._frame["graph"], np.asarray(graphs))]
        effs = []
        for layer_type, (varying, mean, std, ref) in self._scales.items():
            sub = self._log_det(rows[rows["layer_type"] == layer_type], varying, mean, std)
            p = len(varying) + 1
            effs.append(float(np.exp((sub - ref) / p)) if np.isfinite(sub) else 0.0)
        return float(np.mean(effs)) if effs else float("nan")

    def family_world_coverage(self, graphs) -> float:
        """Share of the reference's (family, world size) cells the subset covers."""
        graphs = np.asarray(graphs)
        cells = set(zip(self._families[graphs], self._world[graphs], strict=True))
        return len(cells & self._cells) / len(self._cells)
