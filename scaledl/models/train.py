"""Train the ScaleDL predictor (layer-wise models + all-reduce model + runtime GNN + epoch model).

The validation split for the GNN's early stopping is drawn per family (``val_fraction`` of each
family's workloads, at least one when a family has three or more), seeded, so every family
takes part in both training and early stopping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scaledl.models.data import ProfileData, load_profile_data
from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.methods import GraphMethod


@dataclass
class TrainConfig:
    """Training settings.

    Attributes:
        val_fraction: share of each family's workloads held out for early stopping.
        seed: seed of the split and of the GNN.
        folds: folds of the out-of-fold layer-wise predictions the GNN trains on.
        gnn: GNN hyper-parameters.
    """

    val_fraction: float = 0.15
    seed: int = 0
    folds: int = 4
    gnn: GNNTrainConfig = field(default_factory=GNNTrainConfig)


def stratified_val_ids(data: ProfileData, fraction: float, seed: int) -> list[str]:
    """Validation ids: ``fraction`` of each family (rounded, >= 1 for families of >= 3).

    Args:
        data: the training data.
        fraction: share held out, in [0, 1).
        seed: shuffling seed.

    Returns:
        Workload ids, sorted.

    Raises:
        ValueError: ``fraction`` outside [0, 1).
    """
    if not 0 <= fraction < 1:
        raise ValueError(f"field 'val_fraction' must be in [0, 1), got {fraction}")
    rng = np.random.default_rng(seed)
    chosen: list[str] = []
    for _, group in data.labels.groupby("family", sort=True):
        ids = sorted(group["workload_id"])
        k = int(round(fraction * len(ids)))
        if k == 0 and len(ids) >= 3 and fraction > 0:
            k = 1
        chosen += list(rng.choice(ids, size=k, replace=False)) if k else []
    return sorted(chosen)


def train_predictor(
    data: ProfileData | Path | str, config: TrainConfig | None = None
) -> GraphMethod:
    """Fit the ScaleDL predictor on profile data.

    Args:
        data: :class:`ProfileData` or a directory of validated profile tables.
        config: training settings.

    Returns:
        A fitted :class:`~scaledl.models.methods.GraphMethod` (mode ``scaledl``) with
        ``training_workloads`` (the workloads it saw) and ``history`` (GNN epochs, validation
        loss, fit seconds).

    Raises:
        scaledl.models.data.ProfileDataError: unreadable tables or no usable workload.
    """
    config = config or TrainConfig()
    if not isinstance(data, ProfileData):
        data = load_profile_data(Path(data))
    val_ids = stratified_val_ids(data, config.val_fraction, config.seed)
    gnn = config.gnn
    if gnn.seed != config.seed:
        gnn = GNNTrainConfig(**{**gnn.__dict__, "seed": config.seed})
    method = GraphMethod(mode="scaledl", folds=config.folds, gnn_config=gnn)
    method.fit(data, val_ids)
    method.training_workloads = [data.workloads[i] for i in data.ids]
    method.history = {
        **method.history,
        "fit_seconds": method.fit_seconds,
        "training_workloads": len(data.ids),
        "validation_workloads": len(val_ids),
        "families": sorted(data.labels["family"].unique()),
    }
    return method
