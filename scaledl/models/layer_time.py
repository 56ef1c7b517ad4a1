"""The fitted layer-wise models as plain arrays: predicting needs NumPy and pandas only.

:class:`~scaledl.models.layerwise.LayerTimeRegressor` (scikit-learn, SciPy) *fits* a layer's
time; :class:`LayerTimeModel` holds what the fit found and reproduces its ``predict`` bit for
bit: ``t_work = intercept + (X / scale) @ coef``, then, with a boosted correction,
``t = t_work * exp(clip(init + sum_k learning_rate * tree_k(log1p|X|), low, high))`` where
``t_work > 0``. The trees are walked as scikit-learn's gradient boosting walks them: features
cast to float32, ``x <= threshold`` goes left, stage values added one tree after the other.
:class:`LayerwisePredictor` holds one forward and one backward model per layer type (and the
generic ``"*"`` pair) with the roofline band; :class:`~scaledl.models.layerwise.LayerwiseModel`
predicts through the same :func:`predict_layer_times`.

A predictor bundle stores these arrays (``layerwise.npz``, :mod:`scaledl.registry.layer_arrays`)
so that loading a predictor and predicting never imports scikit-learn or SciPy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from scaledl.models.roofline import RooflineBand, bound_predictions

#: Work features of :func:`layer_features`, in order.
LAYER_FEATURES = ("flops", "operators", "bytes", "params")
#: Kernel-aware features (``features="kernel"``): the layer's operators' predicted time on its
#: device (:mod:`scaledl.models.operators`, columns ``kernel_fwd_ms``/``kernel_bwd_ms``) and
#: the operators launched (a per-kernel fixed cost).
KERNEL_FEATURES = ("kernel_ms", "operators")
FEATURE_SETS = ("work", "kernel")
DIRECTIONS = ("forward", "backward")
#: Smallest layer time predicted (ms): a model's prediction is raised to it.
FLOOR_MS = 1e-4
_LEAF = -1


@dataclass(frozen=True, eq=False)
class BoostedTrees:
    """A fitted gradient-boosting regressor's prediction: ``init + learning_rate * sum(trees)``.

    The trees' nodes are concatenated; tree ``k`` owns ``node_counts[k]`` consecutive nodes and
    its child indices count from its own first node (scikit-learn's numbering).

    Attributes:
        init: the initial constant (the training target's mean).
        learning_rate: the shrinkage applied to every tree's value.
        node_counts: nodes of each tree, shape (n_trees,), int64.
        children_left: left child of each node (``-1`` at a leaf), shape (n_nodes,), int64.
        children_right: right child of each node (``-1`` at a leaf), shape (n_nodes,), int64.
        feature: the column a split reads, shape (n_nodes,), int64.
        threshold: the split's threshold (``x <= threshold`` goes left), shape (n_nodes,).
        value: each node's value, shape (n_nodes,), float64.
    """

    init: float
    learning_rate: float
    node_counts: np.ndarray
    children_left: np.ndarray
    children_right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    value: np.ndarray

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The raw prediction of shape (n_samples,) for ``X`` of shape (n_samples, n_features).

        ``X`` is cast to float32 first, as scikit-learn's trees read it.
        """
        X = np.asarray(X, dtype=np.float32)
        n = len(X)
        starts = np.concatenate([[0], np.cumsum(self.node_counts)[:-1]]).astype(np.int64)
        # Global node index of every (sample, tree) pair, walked to the leaves together.
        node = np.broadcast_to(starts, (n, len(starts))).copy()
        offset = np.repeat(starts, self.node_counts)
        rows = np.arange(n)[:, None]
        for _ in range(int(self.node_counts.max(initial=0))):
            local_left = self.children_left[node]
            split = local_left != _LEAF
            if not split.any():
                break
            go_left = X[rows, self.feature[node]] <= self.threshold[node]
            child = np.where(go_left, local_left, self.children_right[node]) + offset[node]
            node = np.where(split, child, node)
        values = self.value[node]
        raw = np.full(n, self.init, dtype=np.float64)
        for k in range(values.shape[1]):  # stage by stage: scikit-learn's order of additions
            raw += self.learning_rate * values[:, k]
        return raw


@dataclass(frozen=True, eq=False)
class LayerTimeModel:
    """A fitted layer-time model: the non-negative work model and its clipped log correction.

    Attributes:
        scale_: column scales of the features, shape (n_features,), positive.
        intercept_: the work model's constant (ms).
        coef_: work coefficients per scaled feature, shape (n_features,), non-negative.
        correction_range_: (low, high) bounds of the log correction.
        booster_: the correction on ``log1p(|X|)``, or ``None`` (work model only).
    """

    scale_: np.ndarray
    intercept_: float
    coef_: np.ndarray
    correction_range_: tuple[float, float]
    booster_: BoostedTrees | None = None

    @property
    def n_features_in_(self) -> int:
        """Number of features the model reads."""
        return len(self.coef_)

    def predict(self, X) -> np.ndarray:
        """Predicted times of shape (n_samples,) for ``X`` of shape (n_samples, n_features).

        Raises:
            ValueError: ``X`` is not 2-D with :attr:`n_features_in_` columns, or holds NaN or
                infinity (as scikit-learn's input check refuses them).
        """
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"layer-time model: X has shape {X.shape}, expected (n, {self.n_features_in_})"
            )
        if not np.isfinite(X).all():
            row = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
            raise ValueError(f"layer-time model: X row {row} is not finite: {X[row].tolist()}")
        pred = self.intercept_ + (X / self.scale_) @ self.coef_
        if self.booster_ is not None:
            low, high = self.correction_range_
            correction = np.clip(self.booster_.predict(np.log1p(np.abs(X))), low, high)
            pred = np.where(pred > 0, pred * np.exp(correction), pred)
        return pred


#: ``{layer_type: {"forward": model, "backward": model}}``; ``None`` where a pass was not fitted.
LayerModels = Mapping[str, Mapping[str, "LayerTimeModel | None"]]


@dataclass(frozen=True, eq=False)
class LayerwisePredictor:
    """Fitted layer-wise models as loaded from a bundle (no scikit-learn).

    Attributes:
        models_: ``{layer_type: {"forward": model, "backward": model}}`` with the generic
            ``"*"`` pair; ``None`` where a pass was not fitted.
        band_: the roofline band of the training layers, or ``None``.
        min_samples: the fit's fewest rows for a type's own models (recorded, not used).
        features: the feature set (``work`` or ``kernel``).
        unmeasured_types: layer types predicted 0.
    """

    models_: LayerModels
    band_: RooflineBand | None = None
    min_samples: int = 6
    features: str = "work"
    unmeasured_types: tuple[str, ...] = ()

    def predict(self, nodes: pd.DataFrame, bound: bool = True) -> pd.DataFrame:
        """Forward and backward milliseconds of nodes (:func:`predict_layer_times`)."""
        return predict_layer_times(
            self.models_, self.band_, self.features, self.unmeasured_types, nodes, bound
        )


def predict_layer_times(
    models: LayerModels,
    band: RooflineBand | None,
    features: str,
    unmeasured_types: Sequence[str],
    nodes: pd.DataFrame,
    bound: bool = True,
) -> pd.DataFrame:
    """Predict forward and backward milliseconds of nodes with per-type models.

    Args:
        models: ``{layer_type: {"forward": model, "backward": model}}`` with a ``"*"`` pair for
            types without their own (any object with ``predict(X) -> (n,)``).
        band: the roofline band to clamp into (``None``: unbounded).
        features: the feature set of :func:`layer_features`.
        unmeasured_types: layer types predicted 0.
        nodes: node rows with ``layer_type`` and the columns :func:`layer_features` reads.
            Backward is predicted 0 where a ``train`` column is 0 (inference).
        bound: clamp into ``band``; ``False`` for a caller that cannot report a clamp.

    Returns:
        DataFrame aligned with ``nodes``: ``forward_ms``, ``backward_ms``, ``used_generic``,
        ``bounded`` (``""``, or which pass was clamped and to what,
        :func:`~scaledl.models.roofline.bound_predictions`).
    """
    out = pd.DataFrame(
        {"forward_ms": 0.0, "backward_ms": 0.0, "used_generic": False}, index=nodes.index
    )
    X = {d: layer_features(nodes, d, features) for d in DIRECTIONS}
    types = nodes["layer_type"].to_numpy()
    for layer_type in np.unique(types):
        if layer_type in unmeasured_types:
            continue
        mask = types == layer_type
        pair = models.get(str(layer_type))
        if pair is None:
            pair = models["*"]
            out.loc[mask, "used_generic"] = True
        for direction in DIRECTIONS:
            model = pair[direction]
            if model is None:
                continue
            pred = model.predict(X[direction][mask])
            out.loc[mask, f"{direction}_ms"] = np.maximum(pred, FLOOR_MS)
    if "train" in nodes:
        out.loc[nodes["train"].to_numpy() == 0, "backward_ms"] = 0.0
    if band is None or not bound:
        out["bounded"] = ""
        return out
    return bound_predictions(band, nodes, out)


def layer_features(
    nodes: pd.DataFrame, direction: str = "forward", features: str = "work"
) -> np.ndarray:
    """Work (or kernel-aware) features of graph nodes for the layer-wise regressors.

    Args:
        nodes: node rows with the :data:`~scaledl.graph.features.NODE_NUMERIC` columns (and
            ``kernel_fwd_ms``/``kernel_bwd_ms`` for ``features="kernel"``).
        direction: ``forward`` or ``backward``: the FLOPs of that pass, and the ATen operators
            of the forward (twice that for the backward, a gradient op per forward op and
            weight), activation bytes in and out, and parameters.
        features: ``work`` (:data:`LAYER_FEATURES`, one device) or ``kernel``
            (:data:`KERNEL_FEATURES`: the operators' predicted milliseconds on the node's
            device, and the operator count; serves several devices).

    Returns:
        float64 array of shape (n_nodes, len(:data:`LAYER_FEATURES`)) or
        (n_nodes, len(:data:`KERNEL_FEATURES`)).

    Raises:
        ValueError: an unknown feature set, or kernel columns missing.
    """
    ops = nodes["fwd_ops"].to_numpy(np.float64) * (1.0 if direction == "forward" else 2.0)
    if features == "kernel":
        column = "kernel_fwd_ms" if direction == "forward" else "kernel_bwd_ms"
        if column not in nodes:
            raise ValueError(f"kernel layer features need column {column!r} (operator model)")
        return np.column_stack([nodes[column].to_numpy(np.float64), ops])
    if features != "work":
        raise ValueError(f"field 'features' must be one of {FEATURE_SETS}, got {features!r}")
    flops = nodes["fwd_flops" if direction == "forward" else "bwd_flops"].to_numpy(np.float64)
    moved = (nodes["input_bytes"] + nodes["output_bytes"]).to_numpy(np.float64)
    return np.column_stack([flops, ops, moved, nodes["params"].to_numpy(np.float64)])


def layer_feature_columns(features: str = "work") -> tuple[str, ...]:
    """The node columns :func:`layer_features` reads for a feature set (both directions).

    Args:
        features: ``work`` or ``kernel``.

    Returns:
        Column names: two nodes equal in these (and in ``layer_type`` and ``train``) get the
        same layer-wise prediction.

    Raises:
        ValueError: an unknown feature set.
    """
    if features == "kernel":
        return ("kernel_fwd_ms", "kernel_bwd_ms", "fwd_ops")
    if features != "work":
        raise ValueError(f"field 'features' must be one of {FEATURE_SETS}, got {features!r}")
    return ("fwd_flops", "bwd_flops", "fwd_ops", "input_bytes", "output_bytes", "params")
