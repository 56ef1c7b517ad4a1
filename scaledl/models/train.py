"""Train the ScaleDL predictor (layer-wise models + all-reduce model + runtime GNN + epoch model).

The validation split for the GNN's early stopping is drawn per family (``val_fraction`` of each
family's workloads, at least one when a family has three or more), seeded, so every family
takes part in both training and early stopping.

A *registration hold-out* (``holdout_fraction``) keeps a stable share of the workloads out of
training altogether: a workload is held out when the SHA-256 of its ``workload_id``, read as a
number in [0, 1), is below the fraction. The rule depends on the workload alone, not on which
other workloads exist, so a workload held out once is held out by every later training too:
a newly trained predictor and the registered one can be compared on held-out workloads neither
has seen (:mod:`pipelines.defs.policy`), however the data grew in between.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scaledl.models.data import ProfileData, ProfileDataError, load_profile_data
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
        holdout_fraction: share of workloads kept out of training by the stable rule of
            :func:`holdout_ids` (0: train on every workload).
    """

    val_fraction: float = 0.15
    seed: int = 0
    folds: int = 4
    gnn: GNNTrainConfig = field(default_factory=GNNTrainConfig)
    holdout_fraction: float = 0.0


def validation_ids(train_ids, fraction: float, seed: int) -> tuple[str, ...]:
    """A seeded random validation subset of the training ids.

    Args:
        train_ids: the training workload ids.
        fraction: share of them to hold out, in ``[0, 1)``.
        seed: random seed.

    Returns:
        ``round(fraction * n)`` ids (at least 1 when ``fraction > 0`` and ``n >= 4``; none for
        fewer than 4 training ids), in the order of ``train_ids``.

    Raises:
        ValueError: ``fraction`` outside ``[0, 1)``.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"validation fraction must lie in [0, 1), got {fraction}")
    ids = list(train_ids)
    if fraction == 0 or len(ids) < 4:
        return ()
    k = min(max(1, round(fraction * len(ids))), len(ids) - 2)
    chosen = set(np.random.default_rng(seed).choice(len(ids), size=k, replace=False).tolist())
    return tuple(i for pos, i in enumerate(ids) if pos in chosen)


def holdout_ids(workload_ids: Iterable[str], fraction: float) -> list[str]:
    """The workloads of the stable registration hold-out.

    Args:
        workload_ids: candidate workload ids.
        fraction: expected share held out, in [0, 1).

    Returns:
        The ids whose SHA-256, as a fraction of 2**64 (first 16 hex digits), is below
        ``fraction``, sorted.

    Raises:
        ValueError: ``fraction`` outside [0, 1).
    """
    if not 0 <= fraction < 1:
        raise ValueError(f"field 'holdout_fraction' must be in [0, 1), got {fraction}")
    return sorted(
        i
        for i in set(workload_ids)
        if int(hashlib.sha256(i.encode()).hexdigest()[:16], 16) / 2**64 < fraction
    )


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
    """Fit the ScaleDL predictor on profile data (minus the registration hold-out).

    Args:
        data: :class:`ProfileData` or a directory of validated profile tables.
        config: training settings.

    Returns:
        A fitted :class:`~scaledl.models.methods.GraphMethod` (mode ``scaledl``);
        ``training_workload_ids_`` names the workloads it was fitted on (the hold-out is not
        among them).

    Raises:
        scaledl.models.data.ProfileDataError: unreadable tables, or fewer than two workloads
            left for training after the hold-out.
    """
    config = config or TrainConfig()
    if not isinstance(data, ProfileData):
        data = load_profile_data(Path(data))
    held_out = set(holdout_ids(data.ids, config.holdout_fraction))
    if held_out:
        kept = [i for i in data.ids if i not in held_out]
        if len(kept) < 2:
            raise ProfileDataError(
                f"{len(data.ids)} workloads, {len(held_out)} in the registration hold-out "
                f"(holdout_fraction {config.holdout_fraction}): fewer than 2 left to train on"
            )
        data = data.subset(kept)
    val_ids = stratified_val_ids(data, config.val_fraction, config.seed)
    gnn = config.gnn
    if gnn.seed != config.seed:
        gnn = GNNTrainConfig(**{**gnn.__dict__, "seed": config.seed})
    method = GraphMethod(mode="scaledl", folds=config.folds, gnn_config=gnn)
    return method.fit(data, val_ids)
