"""Layer-wise runtime models: one nonlinear regressor per layer type and direction.

ScaleDL's first idea (arXiv 2511.04162, Sec. III): a layer's forward and backward time is a
nonlinear function of its analytical features. :class:`LayerTimeRegressor` is a scikit-learn
estimator in two parts:

1. a *work model*, linear in the work a layer does: ``t = c0 + c1 * FLOPs + c2 * operators +
   c3 * bytes + c4 * parameters`` with non-negative coefficients (a fixed cost per call, time
   per FLOP, per ATen operator launched, per byte moved, per parameter), fitted by bounded,
   lightly ridge-penalised least squares on relative errors (``scipy.optimize.lsq_linear``),
   in the spirit of the roofline model (Williams et al. 2009) plus a per-operator overhead
   term that dominates small layers;
2. a *nonlinear correction*: gradient boosting on the log features, fitted to
   ``log(t / t_work)`` and clipped to the range seen in training, so it bends the work model
   where the data say so but cannot run away outside the data.

Measured on the quick preset's CPU profiles (leave-one-family-out, sum of predicted layer times
against the measured iteration): this model's mean error was 15.5%; a power law on log
features (ridge regression in log space) had 31%, a degree-2 polynomial blew up (>100% on BERT,
whose feed-forward is split in two units other families do not have). Physically meaningful,
non-negative work terms extrapolate to unseen architectures; free-form fits in log space do not.

:meth:`LayerTimeRegressor.to_model` gives the fitted numbers as a NumPy-only
:class:`~scaledl.models.layer_time.LayerTimeModel` (what a predictor bundle stores), which
predicts exactly what the regressor does.

:class:`LayerwiseModel` holds one forward and one backward regressor per layer type, and a
*generic* pair trained on all layers, used for a layer type never seen in training (the
prediction says so in ``used_generic``). Fitted on one device's work features, it also holds
the :class:`~scaledl.models.roofline.RooflineBand` of its training layers: every prediction is
clamped into what that device can physically do, and a clamped one says so in ``bounded``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import ClassVar

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from scaledl.models.fitted import check_fitted
from scaledl.models.layer_time import (
    FEATURE_SETS,
    BoostedTrees,
    LayerTimeModel,
    layer_features,
    predict_layer_times,
)
from scaledl.models.roofline import RooflineBand


class LayerTimeRegressor(RegressorMixin, BaseEstimator):
    """Non-negative work model with a clipped gradient-boosted correction in log space.

    Args:
        n_estimators: boosting stages of the correction (0: work model only).
        max_depth: depth of each boosting tree.
        learning_rate: boosting shrinkage.
        relative: weight each sample by ``1 / |y|`` so the fit minimises relative error.
        alpha: ridge penalty on the scaled work coefficients (relative to the sample count).
        max_correction: bound of the log correction (1.0: the correction multiplies the work
            model by at most e or at least 1/e).
        random_state: seed of the boosting subsampling.

    Attributes:
        coef_: work coefficients, shape (n_features,), non-negative, per scaled feature.
        intercept_: constant term (the target's units).
        scale_: column scales applied before fitting, shape (n_features,).
        booster_: the correction ``GradientBoostingRegressor`` or ``None``.
        correction_range_: (low, high) of the log corrections seen in training.
        n_features_in_: number of features seen in ``fit``.

    Shapes:
        ``X``: array-like of shape (n_samples, n_features), work quantities on a linear scale
        (ScaleDL passes :func:`layer_features`); ``y`` and predictions: (n_samples,), in the
        target's units (ScaleDL: milliseconds).
    """

    _parameter_constraints: ClassVar[dict] = {
        "n_estimators": [Interval(Integral, 0, None, closed="left")],
        "max_depth": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "relative": ["boolean"],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "max_correction": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_estimators: int = 30,
        max_depth: int = 2,
        learning_rate: float = 0.1,
        relative: bool = True,
        alpha: float = 1e-3,
        max_correction: float = 1.0,
        random_state: int = 0,
    ) -> None:
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.relative = relative
        self.alpha = alpha
        self.max_correction = max_correction
        self.random_state = random_state

    def __sklearn_tags__(self):  # noqa: D105
        tags = super().__sklearn_tags__()
        # Work coefficients are constrained non-negative (time per FLOP, byte, operator), so
        # arbitrary toy targets with negative dependencies cannot be fitted well by design.
        tags.regressor_tags.poor_score = True
        return tags

    def _work(self, X: np.ndarray) -> np.ndarray:
        return self.intercept_ + (X / self.scale_) @ self.coef_

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit the work model, then the correction on its log residual ratios.

        Returns:
            self.

        Raises:
            sklearn.utils._param_validation.InvalidParameterError: an invalid parameter.
        """
        X, y = validate_data(self, X, y, y_numeric=True)
        y = np.asarray(y, dtype=np.float64)
        self.scale_ = np.where(np.abs(X).max(axis=0) > 0, np.abs(X).max(axis=0), 1.0)
        A = np.column_stack([np.ones(len(X)), X / self.scale_])
        weight = 1.0 / np.maximum(np.abs(y), 1e-12) if self.relative else np.ones(len(y))
        # Ridge rows keep collinear columns (a feature constant within a layer type) from
        # trading a huge coefficient against the intercept.
        ridge = np.sqrt(self.alpha * len(y)) * np.eye(X.shape[1] + 1)[1:]
        design = np.vstack([A * weight[:, None], ridge])
        target = np.r_[y * weight, np.zeros(X.shape[1])]
        bounds = (np.zeros(X.shape[1] + 1), np.full(X.shape[1] + 1, np.inf))
        if not self.relative or (y < 0).any():
            bounds[0][0] = -np.inf
        solution = lsq_linear(design, target, bounds=bounds)
        self.intercept_ = float(solution.x[0])
        self.coef_ = solution.x[1:]
        self.booster_ = None
        self.correction_range_ = (0.0, 0.0)
        work = self._work(X)
        ok = (y > 0) & (work > 0)
        if self.n_estimators > 0 and ok.sum() >= 8:
            bound = self.max_correction
            ratio = np.clip(np.log(y[ok] / work[ok]), -bound, bound)
            self.correction_range_ = (float(ratio.min()), float(ratio.max()))
            self.booster_ = GradientBoostingRegressor(
                n_estimators=self.n_estimators,
                max_depth=self.max_depth,
                learning_rate=self.learning_rate,
                subsample=0.8,
                random_state=self.random_state,
            ).fit(np.log1p(np.abs(X[ok])), ratio)
        return self

    def to_model(self) -> LayerTimeModel:
        """The fitted numbers as a :class:`~scaledl.models.layer_time.LayerTimeModel`.

        It predicts exactly what :meth:`predict` does, with NumPy only (what a bundle stores).

        Raises:
            sklearn.exceptions.NotFittedError: before ``fit``.
            ValueError: the correction is not a single-output squared-error boosting fit.
        """
        check_is_fitted(self, "coef_")
        booster = None
        if self.booster_ is not None:
            gb = self.booster_
            if gb.init_ == "zero" or gb.estimators_.shape[1] != 1:
                raise ValueError("layer-time regressor: a correction without a mean init")
            trees = [e.tree_ for e in gb.estimators_[:, 0]]
            booster = BoostedTrees(
                init=float(np.ravel(gb.init_.constant_)[0]),
                learning_rate=float(gb.learning_rate),
                node_counts=np.array([t.node_count for t in trees], dtype=np.int64),
                **{
                    name: np.concatenate([getattr(t, name) for t in trees]).astype(np.int64)
                    for name in ("children_left", "children_right", "feature")
                },
                threshold=np.concatenate([t.threshold for t in trees]).astype(np.float64),
                value=np.concatenate([t.value.reshape(-1) for t in trees]).astype(np.float64),
            )
        low, high = self.correction_range_
        return LayerTimeModel(
            scale_=np.asarray(self.scale_, dtype=np.float64).copy(),
            intercept_=float(self.intercept_),
            coef_=np.asarray(self.coef_, dtype=np.float64).copy(),
            correction_range_=(float(low), float(high)),
            booster_=booster,
        )

    def predict(self, X):
        """Predict targets of shape (n_samples,).

        Raises:
            sklearn.exceptions.NotFittedError: before ``fit``.
        """
        check_is_fitted(self, "coef_")
        X = validate_data(self, X, reset=False)
        pred = self._work(X)
        if self.booster_ is not None:
            low, high = self.correction_range_
            correction = np.clip(self.booster_.predict(np.log1p(np.abs(X))), low, high)
            pred = np.where(pred > 0, pred * np.exp(correction), pred)
        return pred


@dataclass(repr=False)
class LayerwiseModel(BaseEstimator):
    """Forward/backward regressors per layer type, plus a generic pair for unseen types.

    A scikit-learn estimator (``get_params``, ``clone``): a dataclass only for its generated
    ``__init__``, which stores the parameters as given; :meth:`fit` validates them against
    ``_parameter_constraints``.

    Args:
        min_samples: fewest training rows for a type to get its own regressors.
        regressor_params: keyword arguments of every :class:`LayerTimeRegressor`.
        features: feature set of :func:`layer_features` (``work`` or ``kernel``).
        unmeasured_types: layer types the training data's source never measures, predicted 0
            instead of by the generic pair (an import whose labels exclude the optimizer
            step: its ``optimizer`` node).

    Attributes:
        models_: ``{layer_type: {"forward": reg, "backward": reg}}``, set by :meth:`fit` (or
            :meth:`from_fitted`); ``"*"`` is the generic pair.
        band_: the roofline band of the training layers (``features="work"``: one device), or
            ``None`` (kernel features span devices; bundles saved before the band).
    """

    min_samples: int = 6
    regressor_params: dict = field(default_factory=dict)
    features: str = "work"
    unmeasured_types: tuple[str, ...] = ()

    _parameter_constraints: ClassVar[dict] = {
        "min_samples": [Interval(Integral, 1, None, closed="left")],
        "regressor_params": [dict],
        "features": [StrOptions(set(FEATURE_SETS))],
        "unmeasured_types": [tuple, list],
    }

    @classmethod
    def from_fitted(
        cls,
        models: dict[str, dict[str, LayerTimeRegressor | LayerTimeModel | None]],
        band: RooflineBand | None = None,
        **params,
    ) -> LayerwiseModel:
        """A fitted model from saved regressors (how a predictor bundle is loaded).

        Args:
            models: the ``models_`` mapping of a fitted model (regressors, or the NumPy
                :class:`~scaledl.models.layer_time.LayerTimeModel` a bundle loads).
            band: the saved roofline band (``None``: predictions are not bounded).
            **params: constructor parameters.

        Returns:
            The model, fitted.

        Raises:
            ValueError: ``models`` has no generic ``"*"`` pair, or a parameter is invalid.
        """
        if "*" not in models:
            raise ValueError("layer-wise models: no generic '*' pair")
        model = cls(**params)
        model._validate_params()
        model.models_ = dict(models)
        model.band_ = band
        return model

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, samples: pd.DataFrame) -> LayerwiseModel:
        """Fit on measured nodes.

        Args:
            samples: one row per measured node: ``layer_type``, ``forward_ms``, ``backward_ms``
                and the columns :func:`layer_features` reads.

        Returns:
            self.

        Raises:
            ValueError: ``samples`` is empty or has non-positive forward times, or a parameter
                is invalid (:class:`sklearn.utils._param_validation.InvalidParameterError`).
        """
        if samples.empty or len(samples) < 2:
            raise ValueError(f"layer-wise model: {len(samples)} training samples, need >= 2")
        if (samples["forward_ms"] <= 0).any():
            bad = samples.loc[samples["forward_ms"] <= 0, "forward_ms"].iloc[0]
            raise ValueError(f"layer-wise model: field 'forward_ms' must be > 0, got {bad}")
        models = {"*": self._fit_pair(samples)}
        for layer_type, group in samples.groupby("layer_type"):
            if len(group) >= self.min_samples:
                models[str(layer_type)] = self._fit_pair(group)
        self.models_ = models
        self.band_ = RooflineBand.fit(samples) if self.features == "work" else None
        return self

    def _fit_pair(self, frame: pd.DataFrame) -> dict[str, LayerTimeRegressor | None]:
        """Forward and backward regressors, each fitted on the rows where that time is > 0.

        ``None`` where no row has one (a rotary embedding's backward, inference-only data).
        """
        pair: dict[str, LayerTimeRegressor | None] = {}
        for direction in ("forward", "backward"):
            rows = frame[frame[f"{direction}_ms"] > 0]
            if len(rows) < 2:
                pair[direction] = None
                continue
            X = layer_features(rows, direction, self.features)
            y = rows[f"{direction}_ms"].to_numpy()
            pair[direction] = LayerTimeRegressor(**self.regressor_params).fit(X, y)
        return pair

    def predict(self, nodes: pd.DataFrame, bound: bool = True) -> pd.DataFrame:
        """Predict forward and backward milliseconds of nodes.

        Args:
            nodes: node rows (see :meth:`fit`; targets not needed). Backward is predicted 0 for
                inference workloads (``train`` column 0) when that column is present.
            bound: clamp into :attr:`band_` (when fitted with one); ``False`` for a caller that
                cannot report a clamp (the ``bounded`` column is then all ``""``).

        Returns:
            DataFrame aligned with ``nodes``: ``forward_ms``, ``backward_ms``, ``used_generic``,
            ``bounded`` (``""``, or which pass of the layer was clamped into the roofline band
            and to what, :func:`~scaledl.models.roofline.bound_predictions`).

        Raises:
            scaledl.models.fitted.NotFittedError: before :meth:`fit`.
        """
        check_fitted(self, "models_")
        return predict_layer_times(
            self.models_, self.band_, self.features, self.unmeasured_types, nodes, bound
        )


def layer_time_models(
    models: dict[str, dict[str, LayerTimeRegressor | LayerTimeModel | None]],
) -> dict[str, dict[str, LayerTimeModel | None]]:
    """The ``models_`` of a fitted :class:`LayerwiseModel` as NumPy-only models.

    Args:
        models: ``{layer_type: {"forward": reg, "backward": reg}}``; a regressor is converted
            (:meth:`LayerTimeRegressor.to_model`), a :class:`LayerTimeModel` kept.

    Returns:
        The same mapping of :class:`~scaledl.models.layer_time.LayerTimeModel` (or ``None``).
    """
    return {
        str(t): {
            d: (r.to_model() if isinstance(r, LayerTimeRegressor) else r) for d, r in pair.items()
        }
        for t, pair in models.items()
    }
