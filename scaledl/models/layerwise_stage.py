"""The layer-wise stage of ScaleDL: fitted once per training set, shared by every GNN on top of it.

ScaleDL's GNN (:class:`~scaledl.models.methods.GraphMethod`) trains on *out-of-fold* layer-wise
predictions: the training workloads are split into ``folds`` groups (scikit-learn
``GroupKFold``, a workload's nodes stay together) and each group's nodes are predicted by
layer-wise models fitted on the other groups, so the GNN learns how far to trust layer-wise
predictions on workloads they were not fitted on (stacking, Wolpert 1992). The layer-wise models
of the final predictor and the all-reduce model are fitted on all training workloads.

None of it depends on the GNN (its seed, its prior, its graph), so an evaluation fits the stage
once per training set and hands it to every GNN variant and seed fitted on that set
(``GraphMethod.fit(data, val_ids, stage=stage)``), instead of refitting ``folds + 1`` layer-wise
models per GNN.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
from sklearn.model_selection import GroupKFold

from scaledl.models.allreduce import AlphaBetaAllReduce
from scaledl.models.data import ProfileData
from scaledl.models.layerwise import LayerwiseModel
from scaledl.models.node_times import node_predictions
from scaledl.models.samples import measured_nodes
from scaledl.models.threads import single_threaded

_TIME_COLUMNS = ["forward_ms", "backward_ms", "total_ms"]


@dataclass(frozen=True)
class LayerwiseStage:
    """Layer-wise and all-reduce models of one training set and its out-of-fold predictions.

    Attributes:
        layerwise: layer-wise models fitted on every training workload.
        allreduce: alpha-beta all-reduce model, ``None`` with fewer than two measured buckets.
        out_of_fold: per node of the training graphs (aligned with ``data.nodes``):
            ``forward_ms``, ``backward_ms``, ``total_ms`` predicted by layer-wise models not
            fitted on that node's workload (with fewer than two folds: by ``layerwise``).
        workload_ids: the training workloads, in data order.
        folds: folds used.
        layerwise_params: keyword arguments of every :class:`LayerwiseModel`.
    """

    layerwise: LayerwiseModel
    allreduce: AlphaBetaAllReduce | None
    out_of_fold: pd.DataFrame
    workload_ids: tuple[str, ...]
    folds: int
    layerwise_params: dict = field(default_factory=dict)

    def check_matches(self, data: ProfileData, folds: int | None, layerwise_params: dict) -> None:
        """Raise unless this stage was fitted on ``data`` with these settings.

        Args:
            data: the training data.
            folds: the folds asked, ``None`` when the out-of-fold predictions are not used.
            layerwise_params: the layer-wise parameters asked.

        Raises:
            ValueError: other workloads, folds or layer-wise parameters (named).
        """
        if self.workload_ids != tuple(data.ids):
            raise ValueError(
                f"layer-wise stage: fitted on {len(self.workload_ids)} other workloads than the "
                f"{len(data.ids)} given (the stage must come from the same training data)"
            )
        if folds is not None and self.folds != min(folds, len(data.ids)):
            raise ValueError(f"layer-wise stage: fitted with folds={self.folds}, asked {folds}")
        if self.layerwise_params != layerwise_params:
            raise ValueError(
                f"layer-wise stage: fitted with layerwise_params={self.layerwise_params}, "
                f"asked {layerwise_params}"
            )


def fit_allreduce(data: ProfileData) -> AlphaBetaAllReduce | None:
    """Alpha-beta model on the measured buckets, or ``None`` with fewer than 2 buckets."""
    b = data.buckets
    if len(b) < 2:
        return None
    return AlphaBetaAllReduce(per_topology=b["num_nodes"].nunique() > 1).fit(
        b["allreduce_bytes"], b["world_size"], b["allreduce_ms"], num_nodes=b["num_nodes"]
    )


def fit_layerwise_stage(
    data: ProfileData, folds: int = 4, layerwise_params: dict | None = None
) -> LayerwiseStage:
    """Fit the layer-wise stage of one training set (see the module docstring).

    Args:
        data: the training data (nodes with measured times).
        folds: folds of the out-of-fold predictions (capped at the number of workloads).
        layerwise_params: keyword arguments of :class:`LayerwiseModel`.

    Returns:
        The :class:`LayerwiseStage`.

    Raises:
        ValueError: too few measured nodes for a layer-wise model.
    """
    params = dict(layerwise_params or {})
    with single_threaded():
        layerwise = LayerwiseModel(**params).fit(measured_nodes(data.nodes))
        allreduce = fit_allreduce(data)
        nodes = data.nodes
        folds = min(folds, len(data.ids))
        if folds < 2:
            oof = node_predictions(layerwise, allreduce, nodes)[_TIME_COLUMNS]
        else:
            oof = pd.DataFrame(index=nodes.index, columns=_TIME_COLUMNS, dtype=float)
            splitter = GroupKFold(n_splits=folds)
            for train_idx, test_idx in splitter.split(nodes, groups=nodes["graph"].to_numpy()):
                model = LayerwiseModel(**params).fit(measured_nodes(nodes.iloc[train_idx]))
                pred = node_predictions(model, allreduce, nodes.iloc[test_idx])
                oof.iloc[test_idx] = pred[_TIME_COLUMNS].to_numpy()
    return LayerwiseStage(
        layerwise=layerwise,
        allreduce=allreduce,
        out_of_fold=oof.astype(float),
        workload_ids=tuple(data.ids),
        folds=folds,
        layerwise_params=params,
    )
