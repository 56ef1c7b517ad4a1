"""ScaleDL and the baselines, all with one interface: ``fit(data, val_ids)`` then predict.

Methods (names as in the evaluation report):

* ``scaledl``: layer-wise models + alpha-beta all-reduce model give every node of the layer graph
  a predicted time; a :class:`~scaledl.models.gnn.RuntimeGNN` over the graph, with those
  predictions as node features, corrects a prior in log space (arXiv 2511.04162): the
  critical-path assembly of the same predictions (:mod:`scaledl.models.critical_path`: backward
  overlapped with the DDP buckets' all-reduce). The GNN trains on *out-of-fold* layer-wise
  predictions (:mod:`scaledl.models.layerwise_stage`), so it learns how far to trust them on
  workloads they were not fitted on.
* ``additive``: the sum of the same layer-wise predictions, optimizer step and all-reduce.
* ``critical_path``: the critical-path assembly of the same predictions (ScaleDL's prior, no GNN).
* ``analytical``: a fixed overhead + FLOPs / fitted throughput (``peak x utilisation``, the
  6·N·D rule for training: forward 2·N·D plus backward 4·N·D), per mode, fitted on the
  training workloads.
* ``global_gbdt``: gradient boosting (scikit-learn ``GradientBoostingRegressor``) on workload-level
  features, hyper-parameters chosen on the validation split.
* ``graph_only``: the same GNN without layer-wise inputs and without a prior (DNNPerf-style,
  Gao et al. 2020).

Ablations of ``scaledl`` (:data:`ABLATIONS`): ``scaledl_sum_prior`` (the sum as the prior, the
GNN of earlier versions), ``scaledl_no_prior``, ``scaledl_no_edges`` and
``scaledl_no_system_nodes`` (no all-reduce and optimizer nodes in the GNN's graph).

Every method predicts epoch time with the same :class:`~scaledl.models.epoch.EpochModel`.
"""

from __future__ import annotations

import abc
import time
import warnings
from dataclasses import dataclass, field
from numbers import Integral
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from scipy.optimize import lsq_linear
from sklearn.base import BaseEstimator, _fit_context
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.metrics import make_scorer
from sklearn.model_selection import GridSearchCV, PredefinedSplit
from sklearn.utils._param_validation import Interval, StrOptions

from scaledl.graph.features import workload_frame
from scaledl.models.allreduce import AlphaBetaAllReduce
from scaledl.models.data import ProfileData
from scaledl.models.domain import TrainingDomain
from scaledl.models.epoch import EpochModel
from scaledl.models.fitted import check_fitted
from scaledl.models.gnn_training import (
    GNNTrainConfig,
    label_weights,
    make_batch,
    train_gnn,
)
from scaledl.models.graph_prediction import (
    ABLATIONS,
    GRAPH_MODES,
    PRIORS,
    GraphPrediction,
    RuntimePrediction,
    set_fitted_parts,
)
from scaledl.models.layerwise import LayerwiseModel
from scaledl.models.layerwise_stage import LayerwiseStage, fit_layerwise_stage
from scaledl.models.threads import single_threaded
from scaledl.workloads.spec import Workload

if TYPE_CHECKING:  # PyTorch Geometric is imported when a GNN is trained or built, not before
    from scaledl.models.gnn import RuntimeGNN

METHOD_NAMES = ("scaledl", "additive", "critical_path", "analytical", "global_gbdt", "graph_only")


class RuntimeMethod(BaseEstimator, RuntimePrediction):
    """Common part: the epoch model, the training record and timing of ``fit``.

    Subclasses implement ``_fit(data, val_ids, **fit_params)`` and
    ``predict_iteration_ms(workloads)``. The scikit-learn estimator contract: the constructor
    only stores its parameters as given (so ``get_params``, ``set_params`` and
    :func:`sklearn.base.clone` work), :meth:`fit` validates them against
    ``_parameter_constraints`` (an invalid one raises
    :class:`sklearn.utils._param_validation.InvalidParameterError`, a ``ValueError`` naming it)
    and sets the fitted state in attributes ending in ``_``; predicting before ``fit`` raises
    :class:`scaledl.models.fitted.NotFittedError`.

    Attributes:
        epoch_model_: the fitted :class:`~scaledl.models.epoch.EpochModel`.
        fit_seconds_: wall time of the last ``fit``, seconds.
        training_workload_ids_: ids of the workloads ``fit`` saw, in data order.
        training_devices_: their devices, sorted (a predictor predicts for these only).
        training_domain_: what the training workloads covered (the domain guard's reference,
            :class:`~scaledl.models.domain.TrainingDomain`).
    """

    name = "method"
    _parameter_constraints: ClassVar[dict] = {}

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(
        self, data: ProfileData, val_ids: list[str] | None = None, **fit_params: Any
    ) -> RuntimeMethod:
        """Fit on profile data.

        Args:
            data: training data (every workload in it may be used).
            val_ids: workload ids of ``data`` held out for early stopping / tuning.
            **fit_params: method-specific (:meth:`GraphMethod.fit`: ``stage``).

        Returns:
            self.

        Raises:
            sklearn.utils._param_validation.InvalidParameterError: a constructor parameter is
                invalid (a ``ValueError`` naming it).
        """
        started = time.perf_counter()
        with single_threaded():
            self._fit(data, list(val_ids or []), **fit_params)
        labels = data.labels[np.isfinite(data.labels["epoch_s"].to_numpy(dtype=float))]
        # Imports without epoch times: an epoch is its iterations, no overhead learned.
        self.epoch_model_ = EpochModel.from_dict({"coef": [0.0, 0.0, 0.0]})
        if len(labels):
            self.epoch_model_ = EpochModel().fit(
                labels["epoch_s"], labels["iteration_ms"] / 1000.0, labels["steps_per_epoch"],
                labels["batch_size"],
            )  # fmt: skip
        self.training_workload_ids_ = list(data.ids)
        self.training_devices_ = sorted({data.workloads[i].device_name for i in data.ids})
        self.training_domain_ = TrainingDomain.from_data(data)
        self.fit_seconds_ = time.perf_counter() - started
        return self

    def check_fitted(self) -> None:
        """Raise :class:`scaledl.models.fitted.NotFittedError` unless :meth:`fit` has run."""
        check_fitted(self, "epoch_model_", "training_devices_")

    @abc.abstractmethod
    def _fit(self, data: ProfileData, val_ids: list[str], **fit_params: Any) -> None:
        """Fit the iteration-time model (``fit_params`` as :meth:`fit` got them)."""


#: What each ablation removes, in words (for the report).
ABLATION_TEXT = {
    "scaledl_sum_prior": "the GNN corrects the plain sum of the layer-wise predictions instead "
    "of the critical path",
    "scaledl_no_prior": "the GNN predicts the iteration time itself (layer-wise predictions as "
    "node features, no prior)",
    "scaledl_no_edges": "the GNN sees no edges (no message passing: a set model over nodes)",
    "scaledl_no_system_nodes": "the GNN's graph has no all-reduce and optimizer nodes (layer "
    "calls only; the prior still includes them)",
}
ABLATION_NAMES = tuple(ABLATIONS)


@dataclass(repr=False)
class GraphMethod(GraphPrediction, RuntimeMethod):
    """Layer-wise models + all-reduce model (+ GNN): ScaleDL, its ablations and the baselines.

    The modes ``scaledl`` (and its ablations), ``additive``, ``critical_path``, ``graph_only``.

    Args:
        mode: ``"scaledl"`` (GNN over the layer graph correcting a prior), ``"additive"`` (the
            sum of every node's predicted time), ``"critical_path"`` (the overlap-aware
            assembly of :mod:`scaledl.models.critical_path`) or ``"graph_only"`` (the GNN
            without layer-wise inputs and without prior).
        folds: folds of the out-of-fold layer-wise predictions the GNN trains on.
        gnn_config: GNN hyper-parameters.
        layerwise_params: keyword arguments of :class:`LayerwiseModel`.
        prior: the GNN's prior (``scaledl`` only): ``"critical_path"`` (default), ``"sum"``
            or ``"none"`` (the GNN predicts the log time itself).
        edges: give the GNN the graph's edges (``False``: no message passing, an ablation).
        system_nodes: keep the all-reduce and optimizer nodes in the GNN's graph (``False``:
            layer calls only, an ablation; the prior is computed on the full graph either way).

    Attributes:
        layerwise_: the fitted :class:`LayerwiseModel` (``None`` for ``graph_only``).
        allreduce_: the fitted all-reduce model, ``None`` without multi-rank training data or
            for ``graph_only``.
        gnn_: the trained :class:`~scaledl.models.gnn.RuntimeGNN` (``None`` for ``additive``
            and ``critical_path``).
        history_: GNN training record (epochs, best epoch, validation loss; empty without a
            GNN).

    Plus the attributes of :class:`RuntimeMethod`. They are set by :meth:`fit`, or by
    :meth:`from_fitted` when a saved predictor is loaded. The method's report name
    (:attr:`name`) is the mode, for ``scaledl`` with the ablation's suffix
    (:data:`ABLATIONS`).

    A dataclass only for its generated ``__init__`` (which stores the parameters as given, as
    scikit-learn requires); the parameters are validated by :meth:`fit` against
    ``_parameter_constraints``.
    """

    _parameter_constraints: ClassVar[dict] = {
        "mode": [StrOptions(set(GRAPH_MODES))],
        "folds": [Interval(Integral, 1, None, closed="left")],
        "gnn_config": [GNNTrainConfig],
        "layerwise_params": [dict],
        "prior": [StrOptions(set(PRIORS))],
        "edges": ["boolean"],
        "system_nodes": ["boolean"],
    }

    mode: str = "scaledl"
    folds: int = 4
    gnn_config: GNNTrainConfig = field(default_factory=GNNTrainConfig)
    layerwise_params: dict = field(default_factory=dict)
    prior: str = "critical_path"
    edges: bool = True
    system_nodes: bool = True

    @classmethod
    def from_fitted(
        cls,
        *,
        layerwise: LayerwiseModel | None,
        allreduce: AlphaBetaAllReduce | None,
        gnn: RuntimeGNN | None,
        epoch_model: EpochModel,
        training_devices: list[str],
        training_workload_ids: list[str],
        history: dict[str, Any] | None = None,
        training_domain: TrainingDomain | None = None,
        **params: Any,
    ) -> GraphMethod:
        """A fitted method from its saved parts (how a predictor bundle is loaded).

        Args:
            layerwise: the fitted layer-wise model.
            allreduce: the fitted all-reduce model or ``None``.
            gnn: the trained GNN (eval mode) or ``None`` for ``additive``/``critical_path``.
            epoch_model: the fitted epoch model.
            training_devices: devices of the training workloads.
            training_workload_ids: ids of the training workloads (empty when not recorded).
            history: the GNN training record.
            training_domain: the training domain (``None``: not recorded, as in bundles written
                before the domain guard).
            **params: constructor parameters (``mode``, ``prior``, ``folds``, ...).

        Returns:
            The method, fitted.

        Raises:
            sklearn.utils._param_validation.InvalidParameterError: an invalid parameter.
        """
        method = cls(**params)
        method._validate_params()
        set_fitted_parts(
            method,
            layerwise=layerwise,
            allreduce=allreduce,
            gnn=gnn,
            epoch_model=epoch_model,
            training_devices=training_devices,
            training_workload_ids=training_workload_ids,
            history=history,
            training_domain=training_domain,
        )
        return method

    def fit(
        self,
        data: ProfileData,
        val_ids: list[str] | None = None,
        stage: LayerwiseStage | None = None,
    ) -> GraphMethod:
        """Fit on profile data.

        Args:
            data: training data.
            val_ids: workload ids of ``data`` for the GNN's early stopping.
            stage: the layer-wise stage already fitted on exactly ``data`` with this method's
                ``folds`` and ``layerwise_params``
                (:func:`~scaledl.models.layerwise_stage.fit_layerwise_stage`), shared by
                several methods; ``None`` fits it here.

        Returns:
            self.

        Raises:
            ValueError: ``stage`` was fitted on other data or settings.
        """
        return super().fit(data, val_ids, stage=stage)

    def _fit(self, data: ProfileData, val_ids: list[str], stage=None) -> None:
        self.layerwise_, self.allreduce_, self.gnn_, self.history_ = None, None, None, {}
        preds = None
        if self.uses_layerwise:
            settings = self._layerwise_settings()
            if stage is None:  # without a GNN the out-of-fold predictions are not needed
                folds = self.folds if self.uses_gnn else 1
                stage = fit_layerwise_stage(data, folds, settings)
            stage.check_matches(data, self.folds if self.uses_gnn else None, settings)
            self.layerwise_, self.allreduce_ = stage.layerwise, stage.allreduce
            preds = stage.out_of_fold
        if not self.uses_gnn:
            return
        x, log_prior = self._features(data.graphs, preds)
        gs, x = self._gnn_graph(data.graphs, x)
        y = np.log(data.labels["iteration_ms"].to_numpy())
        weight = label_weights(data.labels["iteration_rel_se"].to_numpy())
        is_val = data.labels["workload_id"].isin(set(val_ids)).to_numpy()
        batches = {}
        for name, mask in (("train", ~is_val), ("val", is_val)):
            graphs = np.flatnonzero(mask)
            sub = gs.select(graphs)
            node_mask = np.isin(gs.graph, graphs)
            # select() keeps each graph's nodes in order and graphs in ascending order.
            batches[name] = make_batch(
                sub, x[node_mask], log_prior[graphs], y[graphs], weight[graphs]
            )
        val = batches["val"] if is_val.any() else None
        self.gnn_, self.history_ = train_gnn(
            batches["train"], val, use_prior=self.gnn_prior != "none", config=self.gnn_config
        )

    def _layerwise_settings(self) -> dict:
        """The :class:`LayerwiseModel` keyword arguments ``fit`` uses (the parameter, as given)."""
        return self.layerwise_params


class AnalyticalMethod(RuntimeMethod):
    """Fixed overhead + FLOPs / fitted throughput, per mode (``train``/``infer``).

    ``t_ms = overhead_ms + FLOPs / (FLOPs per ms)``: the 6·N·D rule's compute time at a fitted
    effective throughput (peak x utilisation), plus a fixed per-iteration overhead (framework,
    launch, synchronisation), both non-negative, fitted on relative errors
    (``scipy.optimize.lsq_linear``). Without the overhead term the rule misses small workloads
    by orders of magnitude on a CPU, which would make a straw-man baseline.
    """

    name = "analytical"

    @staticmethod
    def _flops(workloads: list[Workload]) -> np.ndarray:
        frame = workload_frame(workloads)
        return (np.expm1(frame["log1p_fwd_flops"]) + np.expm1(frame["log1p_bwd_flops"])).to_numpy()

    def _fit(self, data: ProfileData, val_ids: list[str]) -> None:
        workloads = [data.workloads[i] for i in data.ids]
        flops = self._flops(workloads)
        y = data.labels["iteration_ms"].to_numpy()
        modes = np.array([w.mode for w in workloads])
        self.coef_ = {m: self._fit_line(flops[modes == m], y[modes == m]) for m in set(modes)}
        self.default_coef_ = self._fit_line(flops, y)

    @staticmethod
    def _fit_line(flops: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        scale = max(float(flops.max()), 1.0)
        A = np.column_stack([np.ones(len(y)), flops / scale]) / y[:, None]
        solution = lsq_linear(A, np.ones(len(y)), bounds=(0.0, np.inf))
        return float(solution.x[0]), float(solution.x[1] / scale)

    def predict_iteration_ms(self, workloads: list[Workload]) -> np.ndarray:
        """Overhead + FLOPs x fitted milliseconds per FLOP, shape (len(workloads),).

        Raises:
            scaledl.models.fitted.NotFittedError: before :meth:`fit`.
        """
        self.check_fitted()
        coefs = np.array([self.coef_.get(w.mode, self.default_coef_) for w in workloads])
        return coefs[:, 0] + self._flops(workloads) * coefs[:, 1]


_GBDT_FEATURES = (
    "log2_hidden_size", "log2_num_layers", "log2_num_heads", "log2_intermediate_size",
    "log2_seq_len", "log2_batch_size", "log2_world_size", "log1p_fwd_flops", "log1p_bwd_flops",
    "log1p_params", "log1p_activation_bytes", "train",
)  # fmt: skip
_GBDT_GRID = {"learning_rate": (0.05, 0.1), "max_depth": (2, 3, 4), "n_estimators": (100, 300)}


def _log_time_mre(log_true: np.ndarray, log_pred: np.ndarray) -> float:
    """Mean relative error of times predicted as logarithms (the GBDT's tuning score)."""
    return float(np.mean(np.abs(np.expm1(log_pred - log_true))))


class GlobalGBDTMethod(RuntimeMethod):
    """Gradient boosting on workload-level features, tuned on the validation split.

    The grid :data:`_GBDT_GRID` is searched by :class:`~sklearn.model_selection.GridSearchCV`
    on the one predefined split (train: the training workloads outside ``val_ids``; test:
    ``val_ids``), scored by the validation MRE; the chosen parameters are then refitted on
    every workload. Without validation workloads (or fewer than 4 training ones) the
    estimator's defaults are used.

    Attributes:
        params_: the chosen grid parameters (empty: the defaults).
        model_: the :class:`~sklearn.ensemble.GradientBoostingRegressor` fitted on all data.
    """

    name = "global_gbdt"

    def _fit(self, data: ProfileData, val_ids: list[str]) -> None:
        workloads = [data.workloads[i] for i in data.ids]
        X = workload_frame(workloads)[list(_GBDT_FEATURES)].to_numpy()
        y = np.log(data.labels["iteration_ms"].to_numpy())
        weight = label_weights(data.labels["iteration_rel_se"].to_numpy())
        val = np.isin(data.ids, val_ids)
        self.params_ = {}
        if val.any() and (~val).sum() >= 4:
            search = GridSearchCV(
                GradientBoostingRegressor(min_samples_leaf=2, random_state=0),
                {k: list(v) for k, v in _GBDT_GRID.items()},
                scoring=make_scorer(_log_time_mre, greater_is_better=False),
                cv=PredefinedSplit(np.where(val, 0, -1)),
                refit=False,
                error_score="raise",
            )
            with warnings.catch_warnings():
                # The tuning score is the unweighted validation MRE (every workload counts
                # once, as in the evaluation); the label weights apply to the fits only.
                warnings.filterwarnings("ignore", "The scoring .* does not support sample_weight")
                search.fit(X, y, sample_weight=weight)
            self.params_ = dict(search.best_params_)
        self.model_ = GradientBoostingRegressor(min_samples_leaf=2, random_state=0, **self.params_)
        self.model_.fit(X, y, sample_weight=weight)

    def predict_iteration_ms(self, workloads: list[Workload]) -> np.ndarray:
        """Predicted iteration milliseconds, shape (len(workloads),).

        Raises:
            scaledl.models.fitted.NotFittedError: before :meth:`fit`.
        """
        self.check_fitted()
        X = workload_frame(workloads)[list(_GBDT_FEATURES)].to_numpy()
        return np.exp(self.model_.predict(X))


def make_method(name: str, **kwargs) -> RuntimeMethod:
    """A fresh method by report name.

    Raises:
        ValueError: unknown name.
    """
    if name in GRAPH_MODES:
        return GraphMethod(mode=name, **kwargs)
    if name in ABLATIONS:
        return GraphMethod(mode="scaledl", **ABLATIONS[name], **kwargs)
    if name == "analytical":
        return AnalyticalMethod()
    if name == "global_gbdt":
        return GlobalGBDTMethod()
    raise ValueError(f"unknown method {name!r}; choose from {METHOD_NAMES + ABLATION_NAMES}")
