"""ScaleDL and the baselines, all with one interface: ``fit(data, val_ids)`` then predict.

Methods (names as in the evaluation report):

* ``scaledl``: layer-wise models + alpha-beta all-reduce model give every node of the layer graph
  a predicted time; a :class:`~scaledl.models.gnn.RuntimeGNN` over the graph, with those
  predictions as node features, corrects the additive sum in log space (arXiv 2511.04162). The
  GNN trains on *out-of-fold* layer-wise predictions (K folds over training workloads), so it
  learns how far to trust them on workloads they were not fitted on.
* ``additive``: the sum of the same layer-wise predictions, optimizer step and all-reduce.
* ``analytical``: a fixed overhead + FLOPs / fitted throughput (``peak x utilisation``, the
  6·N·D rule for training: forward 2·N·D plus backward 4·N·D), per mode, fitted on the
  training workloads.
* ``global_gbdt``: gradient boosting (scikit-learn ``GradientBoostingRegressor``) on workload-level
  features, hyper-parameters chosen on the validation split.
* ``graph_only``: the same GNN without layer-wise inputs and without the additive prior
  (DNNPerf-style, Gao et al. 2020).

Every method predicts epoch time with the same :class:`~scaledl.models.epoch.EpochModel`.
"""

from __future__ import annotations

import abc
import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.model_selection import GroupKFold

from scaledl.models.allreduce import AlphaBetaAllReduce
from scaledl.models.data import ProfileData, measured_nodes
from scaledl.models.domain import TrainingDomain
from scaledl.models.epoch import EpochModel
from scaledl.models.features import GraphSet, build_graph_set, node_feature_matrix, workload_frame
from scaledl.models.fitted import check_fitted
from scaledl.models.gnn_training import (
    GNNTrainConfig,
    label_weights,
    make_batch,
    predict_gnn,
    train_gnn,
)
from scaledl.models.layerwise import LayerwiseModel
from scaledl.models.threads import single_threaded
from scaledl.workloads.spec import Workload

if TYPE_CHECKING:  # PyTorch Geometric is imported when a GNN is trained or built, not before
    from scaledl.models.gnn import RuntimeGNN

METHOD_NAMES = ("scaledl", "additive", "analytical", "global_gbdt", "graph_only")


class RuntimeMethod(abc.ABC):
    """Common part: the epoch model, the training record and timing of ``fit``.

    Subclasses implement ``_fit(data, val_ids)`` and ``predict_iteration_ms(workloads)``. As in
    scikit-learn, the constructor only stores parameters and fitted state is set by :meth:`fit`
    in attributes ending in ``_``; predicting before ``fit`` raises
    :class:`sklearn.exceptions.NotFittedError`.

    Attributes:
        epoch_model_: the fitted :class:`~scaledl.models.epoch.EpochModel`.
        fit_seconds_: wall time of the last ``fit``, seconds.
        training_workload_ids_: ids of the workloads ``fit`` saw, in data order.
        training_devices_: their devices, sorted (a predictor predicts for these only).
        training_domain_: what the training workloads covered (the domain guard's reference,
            :class:`~scaledl.models.domain.TrainingDomain`).
    """

    name = "method"

    def fit(self, data: ProfileData, val_ids: list[str] | None = None) -> RuntimeMethod:
        """Fit on profile data.

        Args:
            data: training data (every workload in it may be used).
            val_ids: workload ids of ``data`` held out for early stopping / tuning.

        Returns:
            self.
        """
        started = time.perf_counter()
        with single_threaded():
            self._fit(data, list(val_ids or []))
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
        """Raise :class:`sklearn.exceptions.NotFittedError` unless :meth:`fit` has run."""
        check_fitted(self, "epoch_model_", "training_devices_")

    @abc.abstractmethod
    def _fit(self, data: ProfileData, val_ids: list[str]) -> None:
        """Fit the iteration-time model."""

    @abc.abstractmethod
    def predict_iteration_ms(self, workloads: list[Workload]) -> np.ndarray:
        """Predicted iteration milliseconds, shape (len(workloads),)."""

    def predict(self, workloads: list[Workload]) -> pd.DataFrame:
        """Iteration and epoch predictions.

        Returns:
            DataFrame with ``workload_id``, ``iteration_s`` and ``epoch_s``.

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
        """
        self.check_fitted()
        with single_threaded():
            iteration_s = self.predict_iteration_ms(workloads) / 1000.0
        return self._frame(workloads, [w.workload_id for w in workloads], iteration_s)

    def _frame(
        self, workloads: list[Workload], ids: list[str], iteration_s: np.ndarray
    ) -> pd.DataFrame:
        steps = np.array([w.steps_per_epoch for w in workloads])
        batch = np.array([w.batch_size for w in workloads])
        return pd.DataFrame(
            {
                "workload_id": ids,
                "iteration_s": iteration_s,
                "epoch_s": self.epoch_model_.predict(iteration_s, steps, batch),
            }
        )


def node_predictions(
    layerwise: LayerwiseModel, allreduce: AlphaBetaAllReduce | None, nodes: pd.DataFrame
) -> pd.DataFrame:
    """Layer-wise time of every graph node.

    Args:
        layerwise: fitted layer-wise model.
        allreduce: fitted all-reduce model, or ``None`` (no multi-rank training data: 0 ms).
        nodes: graph nodes (:attr:`~scaledl.models.features.GraphSet.nodes`).

    Returns:
        DataFrame aligned with ``nodes``: ``forward_ms``, ``backward_ms``, ``total_ms``,
        ``used_generic``. Optimizer nodes take the ``optimizer`` type's forward prediction;
        all-reduce nodes the all-reduce model's.
    """
    pred = layerwise.predict(nodes)
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


def fit_allreduce(data: ProfileData) -> AlphaBetaAllReduce | None:
    """Alpha-beta model on the measured buckets, or ``None`` with fewer than 2 buckets."""
    b = data.buckets
    if len(b) < 2:
        return None
    return AlphaBetaAllReduce(per_topology=b["num_nodes"].nunique() > 1).fit(
        b["allreduce_bytes"], b["world_size"], b["allreduce_ms"], num_nodes=b["num_nodes"]
    )


@dataclass
class GraphMethod(RuntimeMethod):
    """Layer-wise models + all-reduce model (+ GNN): ``scaledl``, ``additive``, ``graph_only``.

    Args:
        mode: ``"scaledl"``, ``"additive"`` or ``"graph_only"``.
        folds: folds of the out-of-fold layer-wise predictions the GNN trains on.
        gnn_config: GNN hyper-parameters.
        layerwise_params: keyword arguments of :class:`LayerwiseModel`.

    Attributes:
        layerwise_: the fitted :class:`LayerwiseModel` (``None`` for ``graph_only``).
        allreduce_: the fitted all-reduce model, ``None`` without multi-rank training data or
            for ``graph_only``.
        gnn_: the trained :class:`~scaledl.models.gnn.RuntimeGNN` (``None`` for ``additive``).
        history_: GNN training record (epochs, best epoch, validation loss; empty for
            ``additive``).

    Plus the attributes of :class:`RuntimeMethod`. They are set by :meth:`fit`, or by
    :meth:`from_fitted` when a saved predictor is loaded.
    """

    mode: str = "scaledl"
    folds: int = 4
    gnn_config: GNNTrainConfig = field(default_factory=GNNTrainConfig)
    layerwise_params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in ("scaledl", "additive", "graph_only"):
            raise ValueError(f"GraphMethod: field 'mode' (value {self.mode!r}) is unknown")
        self.name = self.mode

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
            gnn: the trained GNN (eval mode) or ``None`` for ``additive``.
            epoch_model: the fitted epoch model.
            training_devices: devices of the training workloads.
            training_workload_ids: ids of the training workloads (empty when not recorded).
            history: the GNN training record.
            training_domain: the training domain (``None``: not recorded, as in bundles written
                before the domain guard).
            **params: constructor parameters (``mode``, ``folds``, ...).

        Returns:
            The method, fitted.
        """
        method = cls(**params)
        method.layerwise_ = layerwise
        method.allreduce_ = allreduce
        method.gnn_ = gnn
        method.epoch_model_ = epoch_model
        method.training_devices_ = list(training_devices)
        method.training_workload_ids_ = list(training_workload_ids)
        method.history_ = dict(history or {})
        method.training_domain_ = training_domain
        method.fit_seconds_ = 0.0
        return method

    @property
    def uses_layerwise(self) -> bool:
        """Whether node features and prior come from the layer-wise models."""
        return self.mode != "graph_only"

    def _fit(self, data: ProfileData, val_ids: list[str]) -> None:
        self.layerwise_, self.allreduce_, self.gnn_, self.history_ = None, None, None, {}
        if self.uses_layerwise:
            self.layerwise_ = LayerwiseModel(**self.layerwise_params).fit(
                measured_nodes(data.nodes)
            )
            self.allreduce_ = fit_allreduce(data)
        if self.mode == "additive":
            return
        preds = self._out_of_fold(data) if self.uses_layerwise else None
        x, log_prior = self._features(data.graphs, preds)
        y = np.log(data.labels["iteration_ms"].to_numpy())
        weight = label_weights(data.labels["iteration_rel_se"].to_numpy())
        is_val = data.labels["workload_id"].isin(set(val_ids)).to_numpy()
        batches = {}
        for name, mask in (("train", ~is_val), ("val", is_val)):
            graphs = np.flatnonzero(mask)
            sub = data.graphs.select(graphs)
            node_mask = np.isin(data.graphs.graph, graphs)
            # select() keeps each graph's nodes in order and graphs in ascending order.
            batches[name] = make_batch(
                sub, x[node_mask], log_prior[graphs], y[graphs], weight[graphs]
            )
        val = batches["val"] if is_val.any() else None
        self.gnn_, self.history_ = train_gnn(
            batches["train"], val, use_prior=self.uses_layerwise, config=self.gnn_config
        )

    def _out_of_fold(self, data: ProfileData) -> pd.DataFrame:
        """Layer-wise node predictions, each from models not fitted on that workload."""
        nodes = data.nodes
        folds = min(self.folds, len(data.ids))
        if folds < 2:
            return node_predictions(self.layerwise_, self.allreduce_, nodes)
        out = pd.DataFrame(index=nodes.index, columns=["forward_ms", "backward_ms", "total_ms"])
        groups = nodes["graph"].to_numpy()
        splitter = GroupKFold(n_splits=folds)
        for train_idx, test_idx in splitter.split(nodes, groups=groups):
            part = nodes.iloc[train_idx]
            model = LayerwiseModel(**self.layerwise_params).fit(measured_nodes(part))
            pred = node_predictions(model, self.allreduce_, nodes.iloc[test_idx])
            out.iloc[test_idx] = pred[["forward_ms", "backward_ms", "total_ms"]].to_numpy()
        return out.astype(float)

    def _features(self, gs: GraphSet, preds: pd.DataFrame | None):
        """Node features and per-graph log additive prior (0 without layer-wise inputs)."""
        if preds is None:
            return node_feature_matrix(gs, None), np.zeros(len(gs.workloads))
        p = preds[["forward_ms", "backward_ms", "total_ms"]].to_numpy(dtype=np.float64)
        prior = np.log(np.maximum(gs.per_graph_sum(p[:, 2]), 1e-6))
        return node_feature_matrix(gs, p), prior

    def _graph_set(self, workloads: list[Workload]) -> GraphSet:
        """The workloads' graphs with every node column the layer-wise models read."""
        return build_graph_set(workloads)

    def node_detail(self, workloads: list[Workload]) -> pd.DataFrame:
        """Per-node layer-wise predictions (``layer_name``, ``layer_type``, ms columns).

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
            ValueError: the method has no layer-wise model (``graph_only``).
        """
        return self.predict_with_detail(workloads)[1]

    def _predict_unique(
        self, workloads: list[Workload]
    ) -> tuple[np.ndarray, GraphSet, pd.DataFrame | None]:
        """Iteration ms of distinct workloads, their graph set and node predictions."""
        gs = self._graph_set(workloads)
        preds = (
            node_predictions(self.layerwise_, self.allreduce_, gs.nodes)
            if self.uses_layerwise
            else None
        )
        if self.mode == "additive":
            return gs.per_graph_sum(preds["total_ms"].to_numpy()), gs, preds
        x, log_prior = self._features(gs, preds)
        return np.exp(predict_gnn(self.gnn_, make_batch(gs, x, log_prior))), gs, preds

    def predict_iteration_ms(self, workloads: list[Workload]) -> np.ndarray:
        """Predicted iteration milliseconds, shape (len(workloads),) (duplicates allowed).

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
        """
        self.check_fitted()
        ids = [w.workload_id for w in workloads]
        unique = list(dict(zip(ids, workloads, strict=True)).values())
        iteration_ms, _, _ = self._predict_unique(unique)
        if len(unique) == len(workloads):
            return iteration_ms
        by_id = dict(zip(dict.fromkeys(ids), iteration_ms, strict=True))
        return np.array([by_id[i] for i in ids])

    def predict_with_detail(self, workloads: list[Workload]) -> tuple[pd.DataFrame, pd.DataFrame]:
        """:meth:`predict` and the per-node predictions, from one pass over the layer graphs.

        Args:
            workloads: the workloads (duplicates allowed).

        Returns:
            ``(predictions, nodes)``: predictions as :meth:`predict`; nodes one row per node of
            each distinct workload: ``workload_id``, ``node_index``, ``node_kind``,
            ``layer_name``, ``layer_type``, ``forward_ms``, ``backward_ms``, ``total_ms``,
            ``used_generic``.

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
            ValueError: the method has no layer-wise model (``graph_only``).
        """
        self.check_fitted()
        if not self.uses_layerwise:
            raise ValueError("graph_only has no layer-wise model: no per-node predictions")
        ids = [w.workload_id for w in workloads]
        unique = list(dict(zip(ids, workloads, strict=True)).values())
        with single_threaded():
            iteration_ms, gs, preds = self._predict_unique(unique)
        by_id = dict(zip(dict.fromkeys(ids), iteration_ms, strict=True))
        iteration_s = np.array([by_id[i] for i in ids]) / 1000.0
        cols = ["workload_id", "node_index", "node_kind", "layer_name", "layer_type"]
        nodes = pd.concat([gs.nodes[cols], preds], axis=1)
        return self._frame(workloads, ids, iteration_s), nodes


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
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
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


class GlobalGBDTMethod(RuntimeMethod):
    """Gradient boosting on workload-level features, tuned on the validation split."""

    name = "global_gbdt"

    def _fit(self, data: ProfileData, val_ids: list[str]) -> None:
        workloads = [data.workloads[i] for i in data.ids]
        X = workload_frame(workloads)[list(_GBDT_FEATURES)].to_numpy()
        y = np.log(data.labels["iteration_ms"].to_numpy())
        weight = label_weights(data.labels["iteration_rel_se"].to_numpy())
        val = np.isin(data.ids, val_ids)
        best = (np.inf, {})
        if val.any() and (~val).sum() >= 4:
            for values in itertools.product(*_GBDT_GRID.values()):
                params = dict(zip(_GBDT_GRID, values, strict=True))
                model = GradientBoostingRegressor(min_samples_leaf=2, random_state=0, **params)
                model.fit(X[~val], y[~val], sample_weight=weight[~val])
                err = float(np.mean(np.abs(np.expm1(model.predict(X[val]) - y[val]))))
                if err < best[0]:
                    best = (err, params)
        self.params_ = best[1]
        self.model_ = GradientBoostingRegressor(min_samples_leaf=2, random_state=0, **self.params_)
        self.model_.fit(X, y, sample_weight=weight)

    def predict_iteration_ms(self, workloads: list[Workload]) -> np.ndarray:
        """Predicted iteration milliseconds, shape (len(workloads),).

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
        """
        self.check_fitted()
        X = workload_frame(workloads)[list(_GBDT_FEATURES)].to_numpy()
        return np.exp(self.model_.predict(X))


def make_method(name: str, **kwargs) -> RuntimeMethod:
    """A fresh method by report name.

    Raises:
        ValueError: unknown name.
    """
    if name in ("scaledl", "additive", "graph_only"):
        return GraphMethod(mode=name, **kwargs)
    if name == "analytical":
        return AnalyticalMethod()
    if name == "global_gbdt":
        return GlobalGBDTMethod()
    raise ValueError(f"unknown method {name!r}; choose from {METHOD_NAMES}")
