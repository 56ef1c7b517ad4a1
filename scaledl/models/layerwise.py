"""Layer-wise runtime models: one nonlinear regressor per layer type and direction.

ScaleDL's first idea (arXiv 2511.04162, Sec. III): a layer's forward and backward time is a
nonlinear function of its analytical features. :class:`LayerTimeRegressor` is a scikit-learn
estimator: a ridge regression on standardised features, by default of degree 1 (on log features
and log time that is a power law, which extrapolates sanely to larger layers than profiled;
degree 2 was measured to blow up on held-out families), plus a small gradient-boosting model
fitted to the ridge's residuals (the nonlinearities the power law misses).
:class:`LayerwiseModel` holds one forward and one backward regressor per layer type, trained on
``log`` milliseconds against :func:`layer_features`, and a *generic* pair trained on all
layers, used for a layer type never seen in training (the prediction says so in
``used_generic``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.linear_model import RidgeCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import PolynomialFeatures, StandardScaler
from sklearn.utils.validation import check_is_fitted, validate_data

from scaledl.models.features import NODE_NUMERIC, WORKLOAD_NUMERIC

#: Columns of :func:`layer_features`, in order.
LAYER_FEATURES = tuple(f"log1p_{c}" for c in NODE_NUMERIC) + tuple(
    f"log2_{c}" for c in WORKLOAD_NUMERIC
)
_FLOOR_MS = 1e-4


class LayerTimeRegressor(RegressorMixin, BaseEstimator):
    """Polynomial ridge regression with a gradient-boosted residual correction.

    Args:
        degree: degree of the polynomial expansion of the standardised features.
        alphas: ridge penalties tried by leave-one-out cross-validation (``RidgeCV``).
        n_estimators: boosting stages fitted to the ridge residuals (0 disables boosting).
        max_depth: depth of each boosting tree.
        learning_rate: boosting shrinkage.
        random_state: seed of the boosting subsampling.
        extrapolation_margin: predictions are clipped to the training targets' range widened by
            this much on each side (in target units; ScaleDL's targets are log milliseconds, so
            3.0 allows 20x beyond the slowest/fastest layer seen), so a polynomial far outside
            its data cannot return absurd values.

    Attributes:
        ridge_: the fitted ``StandardScaler -> PolynomialFeatures -> RidgeCV`` pipeline.
        booster_: the fitted residual ``GradientBoostingRegressor`` or ``None``.
        n_features_in_: number of features seen in ``fit``.

    Shapes:
        ``X``: array-like of shape (n_samples, n_features); ``y`` and predictions: (n_samples,),
        in the units of the target (ScaleDL passes ``log`` milliseconds).
    """

    def __init__(
        self,
        degree: int = 1,
        alphas: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 10.0),
        n_estimators: int = 60,
        max_depth: int = 2,
        learning_rate: float = 0.1,
        random_state: int = 0,
        extrapolation_margin: float = 3.0,
    ) -> None:
        self.degree = degree
        self.alphas = alphas
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.random_state = random_state
        self.extrapolation_margin = extrapolation_margin

    def fit(self, X, y):
        """Fit the ridge, then the booster on its residuals.

        Returns:
            self.
        """
        X, y = validate_data(self, X, y, y_numeric=True)
        self.ridge_ = make_pipeline(
            StandardScaler(),
            PolynomialFeatures(self.degree, include_bias=False),
            RidgeCV(alphas=self.alphas),
        ).fit(X, y)
        self.y_range_ = (float(np.min(y)), float(np.max(y)))
        residual = y - self.ridge_.predict(X)
        self.booster_ = None
        if self.n_estimators > 0 and len(y) >= 8:
            self.booster_ = GradientBoostingRegressor(
                n_estimators=self.n_estimators,
                max_depth=self.max_depth,
                learning_rate=self.learning_rate,
                subsample=0.8,
                random_state=self.random_state,
            ).fit(X, residual)
        return self

    def predict(self, X):
        """Predict targets of shape (n_samples,).

        Raises:
            sklearn.exceptions.NotFittedError: before ``fit``.
        """
        check_is_fitted(self, "ridge_")
        X = validate_data(self, X, reset=False)
        pred = self.ridge_.predict(X)
        if self.booster_ is not None:
            pred = pred + self.booster_.predict(X)
        low, high = self.y_range_
        return np.clip(pred, low - self.extrapolation_margin, high + self.extrapolation_margin)


def layer_features(nodes: pd.DataFrame, direction: str = "forward") -> np.ndarray:
    """Layer-wise model features of graph nodes.

    Args:
        nodes: node rows with the :data:`~scaledl.models.features.NODE_NUMERIC` columns and the
            workload's ``batch_size``, ``seq_len``, ``hidden_size`` and ``world_size``.
        direction: ``forward`` drops the backward FLOPs, ``backward`` the forward FLOPs (each
            time depends on its own pass's work; inference graphs have no backward FLOPs).

    Returns:
        float64 array of shape (n_nodes, len(:data:`LAYER_FEATURES`) - 1).
    """
    drop = "bwd_flops" if direction == "forward" else "fwd_flops"
    cols = [c for c in NODE_NUMERIC if c != drop]
    numeric = np.log1p(nodes[cols].to_numpy(dtype=np.float64))
    workload = np.log2(nodes[list(WORKLOAD_NUMERIC)].to_numpy(dtype=np.float64).clip(min=1))
    return np.hstack([numeric, workload])


@dataclass
class LayerwiseModel:
    """Forward/backward regressors per layer type, plus a generic pair for unseen types.

    Attributes:
        min_samples: fewest training rows for a type to get its own regressors.
        regressor_params: keyword arguments of every :class:`LayerTimeRegressor`.
        models: ``{layer_type: {"forward": reg, "backward": reg}}`` after :meth:`fit`;
            ``"*"`` is the generic pair.
    """

    min_samples: int = 6
    regressor_params: dict = field(default_factory=dict)
    models: dict[str, dict[str, LayerTimeRegressor]] = field(default_factory=dict)

    def fit(self, samples: pd.DataFrame) -> LayerwiseModel:
        """Fit on measured nodes.

        Args:
            samples: one row per measured node: ``layer_type``, ``forward_ms``, ``backward_ms``
                and the columns :func:`layer_features` reads.

        Returns:
            self.

        Raises:
            ValueError: ``samples`` is empty or has non-positive forward times.
        """
        if samples.empty:
            raise ValueError("layer-wise model: no training samples")
        if (samples["forward_ms"] <= 0).any():
            bad = samples.loc[samples["forward_ms"] <= 0, "forward_ms"].iloc[0]
            raise ValueError(f"layer-wise model: field 'forward_ms' must be > 0, got {bad}")
        self.models = {"*": self._fit_pair(samples)}
        for layer_type, group in samples.groupby("layer_type"):
            if len(group) >= self.min_samples:
                self.models[str(layer_type)] = self._fit_pair(group)
        return self

    def _fit_pair(self, frame: pd.DataFrame) -> dict[str, LayerTimeRegressor]:
        pair = {}
        for direction in ("forward", "backward"):
            X = layer_features(frame, direction)
            y = np.log(frame[f"{direction}_ms"].clip(lower=_FLOOR_MS).to_numpy())
            pair[direction] = LayerTimeRegressor(**self.regressor_params).fit(X, y)
        return pair

    def predict(self, nodes: pd.DataFrame) -> pd.DataFrame:
        """Predict forward and backward milliseconds of nodes.

        Args:
            nodes: node rows (see :meth:`fit`; targets not needed). Backward is predicted 0 for
                inference workloads (``train`` column 0) when that column is present.

        Returns:
            DataFrame aligned with ``nodes``: ``forward_ms``, ``backward_ms``, ``used_generic``.
        """
        if not self.models:
            raise RuntimeError("layer-wise model is not fitted")
        out = pd.DataFrame(
            {"forward_ms": 0.0, "backward_ms": 0.0, "used_generic": False}, index=nodes.index
        )
        X = {d: layer_features(nodes, d) for d in ("forward", "backward")}
        types = nodes["layer_type"].to_numpy()
        for layer_type in np.unique(types):
            mask = types == layer_type
            pair = self.models.get(str(layer_type))
            if pair is None:
                pair = self.models["*"]
                out.loc[mask, "used_generic"] = True
            for direction in ("forward", "backward"):
                out.loc[mask, f"{direction}_ms"] = np.exp(
                    pair[direction].predict(X[direction][mask])
                )
        if "train" in nodes:
            out.loc[nodes["train"].to_numpy() == 0, "backward_ms"] = 0.0
        return out
