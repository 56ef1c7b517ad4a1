"""Layer-wise time of every node of the layer graphs: what every method predicts from.

NumPy and pandas only (the fitted models predict without scikit-learn or SciPy, see
:mod:`scaledl.models.layer_time`), so a loaded predictor predicts without importing them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from scaledl.models.layer_time import layer_feature_columns

if TYPE_CHECKING:
    from scaledl.models.allreduce_time import AllReduceTime
    from scaledl.models.layer_time import LayerwisePredictor
    from scaledl.models.layerwise import LayerwiseModel


def node_predictions(
    layerwise: LayerwiseModel | LayerwisePredictor,
    allreduce: AllReduceTime | None,
    nodes: pd.DataFrame,
    bound: bool = True,
) -> pd.DataFrame:
    """Layer-wise time of every graph node.

    Args:
        layerwise: fitted layer-wise model (or the NumPy one a bundle loads).
        allreduce: fitted all-reduce model, or ``None`` (no multi-rank training data: 0 ms).
        nodes: graph nodes (:attr:`~scaledl.graph.features.GraphSet.nodes`).
        bound: clamp layer times into the model's roofline band
            (:meth:`~scaledl.models.layerwise.LayerwiseModel.predict`).

    Returns:
        DataFrame aligned with ``nodes``: ``forward_ms``, ``backward_ms``, ``total_ms``,
        ``used_generic``, ``bounded``. Optimizer nodes take the ``optimizer`` type's forward
        prediction; all-reduce nodes the all-reduce model's (in ``total_ms``; forward and
        backward 0).
    """
    pred = _distinct_layer_predictions(layerwise, nodes, bound)
    is_opt = (nodes["node_kind"] == "optimizer").to_numpy()
    pred.loc[is_opt, "backward_ms"] = 0.0
    is_ar = (nodes["node_kind"] == "allreduce").to_numpy()
    pred.loc[is_ar, ["forward_ms", "backward_ms"]] = 0.0
    pred["total_ms"] = pred["forward_ms"] + pred["backward_ms"]
    if is_ar.any():
        ar = nodes[is_ar]
        pred.loc[is_ar, "total_ms"] = (
            allreduce.predict_ms(ar["allreduce_bytes"], ar["world_size"], ar["num_nodes"])
            if allreduce is not None
            else 0.0
        )
        pred.loc[is_ar, "used_generic"] = False
    return pred


def _distinct_layer_predictions(
    layerwise: LayerwiseModel | LayerwisePredictor, nodes: pd.DataFrame, bound: bool = True
) -> pd.DataFrame:
    """``layerwise.predict(nodes)``, computed once per distinct row of what it reads.

    Nodes of workloads that differ only in world size, node count or dataset size (a planner's
    grid, a scheduler's queue) have equal layer-wise inputs; each distinct row of ``layer_type``,
    ``train`` and :func:`~scaledl.models.layer_time.layer_feature_columns` is predicted once and
    its prediction copied to the rows equal to it (the regressors predict row by row, so the
    result is the same).
    """
    columns = ["layer_type", *layer_feature_columns(layerwise.features)]
    columns += ["train"] if "train" in nodes else []
    present = [c for c in columns if c in nodes]
    if len(nodes) < 2 or len(present) < len(columns):  # missing columns: predict() names them
        return layerwise.predict(nodes, bound)
    codes = nodes.groupby(present, sort=False, dropna=False).ngroup().to_numpy()
    _, first = np.unique(codes, return_index=True)
    if len(first) == len(nodes):
        return layerwise.predict(nodes, bound)
    distinct = layerwise.predict(nodes.iloc[first], bound)
    return pd.DataFrame(
        {c: distinct[c].to_numpy()[codes] for c in distinct.columns}, index=nodes.index
    )
