"""Train/test splits of the profiled workloads: in-distribution, out-of-family, extrapolation.

* :func:`random_split`: random held-out test set stratified by family (in-distribution, "ID").
  Each family with at least two workloads gives ``max(1, round(test_fraction * n))`` of them,
  never all; a family with a single workload stays in training.
* :func:`leave_one_family_out`: for each family, train on every other family, test on it (out of
  distribution, "OOD"; the ScaleDL paper's generalisation setting, arXiv 2511.04162, Sec. V).
* :func:`extrapolation_split`: train on the smaller problems, test on the largest: test holds the
  workloads whose tokens per step (``batch_size * seq_len``) reach the ``quantile`` of that
  quantity.
* :func:`~scaledl.models.train.validation_ids`: the seeded validation subset of a training set,
  passed as ``val_ids`` to every method of a split (the same ids for all methods).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from scaledl.models.train import validation_ids


class SplitError(ValueError):
    """A split cannot be formed from the labels (the message says why)."""


@dataclass(frozen=True)
class Split:
    """A train/validation/test partition of workload ids.

    Attributes:
        name: ``"id"``, ``"ood/<family>"`` or ``"extrapolation"``.
        train_ids: ids the methods are fitted on (validation ids included).
        val_ids: subset of ``train_ids`` for early stopping / tuning.
        test_ids: held-out ids, disjoint from ``train_ids``.
    """

    name: str
    train_ids: tuple[str, ...]
    val_ids: tuple[str, ...]
    test_ids: tuple[str, ...]

    def __post_init__(self) -> None:
        if set(self.train_ids) & set(self.test_ids):
            raise SplitError(f"split {self.name!r}: train and test ids overlap")
        if not set(self.val_ids) <= set(self.train_ids):
            raise SplitError(f"split {self.name!r}: validation ids are not training ids")
        if not self.train_ids or not self.test_ids:
            raise SplitError(f"split {self.name!r}: empty train or test set")


def _check_labels(labels: pd.DataFrame, columns: tuple[str, ...]) -> None:
    missing = [c for c in columns if c not in labels]
    if missing:
        raise SplitError(f"labels: missing column(s) {missing}")
    if labels["workload_id"].duplicated().any():
        raise SplitError("labels: duplicate workload_id")


def _make(name: str, labels: pd.DataFrame, test_mask, val_fraction: float, seed: int) -> Split:
    test_mask = np.asarray(test_mask, dtype=bool)
    ids = labels["workload_id"].astype(str).to_numpy()
    train = tuple(ids[~test_mask])
    try:
        val = validation_ids(train, val_fraction, seed)
    except ValueError as exc:
        raise SplitError(str(exc)) from exc
    return Split(name, train, val, tuple(ids[test_mask]))


def random_split(
    labels: pd.DataFrame, test_fraction: float = 0.2, val_fraction: float = 0.15, seed: int = 0
) -> Split:
    """Random held-out test set, stratified by family.

    Args:
        labels: one row per workload with ``workload_id`` and ``family``.
        test_fraction: share of each family's workloads to test on, in ``(0, 1)``.
        val_fraction: share of the training ids used for validation.
        seed: random seed.

    Returns:
        The ``"id"`` split.

    Raises:
        SplitError: bad fraction, missing columns, or no family with two workloads.
    """
    _check_labels(labels, ("workload_id", "family"))
    if not 0.0 < test_fraction < 1.0:
        raise SplitError(f"test fraction must lie in (0, 1), got {test_fraction}")
    labels = labels.reset_index(drop=True)
    rng = np.random.default_rng(seed)
    test = np.zeros(len(labels), dtype=bool)
    for _, group in labels.groupby("family", sort=True):
        n = len(group)
        if n < 2:
            continue
        k = min(max(1, round(test_fraction * n)), n - 1)
        test[rng.choice(group.index.to_numpy(), size=k, replace=False)] = True
    if not test.any():
        raise SplitError("random split: no family has two workloads, nothing to test on")
    return _make("id", labels, test, val_fraction, seed)


def leave_one_family_out(
    labels: pd.DataFrame, val_fraction: float = 0.15, seed: int = 0
) -> list[Split]:
    """One split per family: train on all other families, test on this one.

    Args:
        labels: one row per workload with ``workload_id`` and ``family``.
        val_fraction: share of the training ids used for validation.
        seed: random seed of the validation subsets.

    Returns:
        Splits named ``"ood/<family>"`` in family order; empty with fewer than two families.
    """
    _check_labels(labels, ("workload_id", "family"))
    labels = labels.reset_index(drop=True)
    families = sorted(labels["family"].astype(str).unique())
    if len(families) < 2:
        return []
    return [
        _make(f"ood/{fam}", labels, labels["family"].astype(str) == fam, val_fraction, seed)
        for fam in families
    ]


def extrapolation_split(
    labels: pd.DataFrame, quantile: float = 0.8, val_fraction: float = 0.15, seed: int = 0
) -> Split:
    """Train on the smaller problems, test on the largest (tokens per step).

    Args:
        labels: one row per workload with ``workload_id``, ``batch_size`` and ``seq_len``.
        quantile: test workloads have ``batch_size * seq_len >= `` this quantile of it.
        val_fraction: share of the training ids used for validation.
        seed: random seed of the validation subset.

    Returns:
        The ``"extrapolation"`` split.

    Raises:
        SplitError: all workloads have the same size (nothing smaller to train on).
    """
    _check_labels(labels, ("workload_id", "batch_size", "seq_len"))
    labels = labels.reset_index(drop=True)
    tokens = (labels["batch_size"] * labels["seq_len"]).to_numpy(dtype=float)
    threshold = float(np.quantile(tokens, quantile))
    test = tokens >= threshold
    if test.all():
        raise SplitError(
            f"extrapolation split: every workload has >= {threshold:g} tokens per step; "
            "nothing smaller to train on"
        )
    return _make("extrapolation", labels, test, val_fraction, seed)
