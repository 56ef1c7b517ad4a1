"""Predicting with a fitted ScaleDL method: the part of the methods a loaded predictor needs.

:class:`GraphPrediction` is how :class:`~scaledl.models.methods.GraphMethod` (ScaleDL, its
ablations, ``additive``, ``critical_path``, ``graph_only``) predicts from its fitted parts: the
layer-wise models' node times (:mod:`scaledl.models.node_times`), their assembly
(:mod:`scaledl.models.critical_path`) and the GNN's correction. :class:`GraphPredictor` holds
those parts as a predictor bundle loads them (:func:`scaledl.registry.bundle.build_graph_method`)
and predicts exactly what the fitted :class:`~scaledl.models.methods.GraphMethod` does, through
the same methods; it imports neither scikit-learn nor SciPy, which only fitting needs.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from scaledl.graph.features import GraphSet, build_graph_set, node_feature_matrix
from scaledl.models.critical_path import critical_path
from scaledl.models.fitted import check_fitted
from scaledl.models.gnn_training import make_batch, predict_gnn
from scaledl.models.node_times import node_predictions
from scaledl.models.threads import single_threaded
from scaledl.workloads.spec import Workload

if TYPE_CHECKING:  # PyTorch Geometric is imported when a GNN is trained or built, not before
    from scaledl.models.allreduce_time import AllReduceTime
    from scaledl.models.domain import TrainingDomain
    from scaledl.models.epoch_time import EpochTime
    from scaledl.models.gnn import RuntimeGNN
    from scaledl.models.layer_time import LayerwisePredictor
    from scaledl.models.layerwise import LayerwiseModel

#: Modes of :class:`GraphPrediction` (and :class:`~scaledl.models.methods.GraphMethod`).
GRAPH_MODES = ("scaledl", "additive", "critical_path", "graph_only")
#: Priors of ScaleDL's GNN: the critical-path assembly, the plain sum, or none.
PRIORS = ("critical_path", "sum", "none")
#: ScaleDL's ablations: name -> the :class:`~scaledl.models.methods.GraphMethod` settings that
#: differ from ``scaledl``.
ABLATIONS: dict[str, dict[str, Any]] = {
    "scaledl_sum_prior": {"prior": "sum"},
    "scaledl_no_prior": {"prior": "none"},
    "scaledl_no_edges": {"edges": False},
    "scaledl_no_system_nodes": {"system_nodes": False},
}
_TIMES = ["forward_ms", "backward_ms", "total_ms"]


class RuntimePrediction(abc.ABC):
    """Iteration and epoch predictions of a fitted method (every method's ``predict``).

    Subclasses implement ``predict_iteration_ms(workloads)`` and ``check_fitted()``, and hold
    the fitted ``epoch_model_``.
    """

    @abc.abstractmethod
    def check_fitted(self) -> None:
        """Raise :class:`~scaledl.models.fitted.NotFittedError` unless the method is fitted."""

    @abc.abstractmethod
    def predict_iteration_ms(self, workloads: list[Workload]) -> np.ndarray:
        """Predicted iteration milliseconds, shape (len(workloads),)."""

    def predict(self, workloads: list[Workload]) -> pd.DataFrame:
        """Iteration and epoch predictions.

        Returns:
            DataFrame with ``workload_id``, ``iteration_s`` and ``epoch_s``.

        Raises:
            scaledl.models.fitted.NotFittedError: before :meth:`fit`.
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


class GraphPrediction(RuntimePrediction):
    """The predictions of the graph methods from their fitted parts (module docstring).

    Reads ``mode``, ``prior``, ``edges``, ``system_nodes`` (as
    :class:`~scaledl.models.methods.GraphMethod` documents them) and the fitted ``layerwise_``,
    ``allreduce_``, ``gnn_`` and ``epoch_model_``.
    """

    @property
    def name(self) -> str:
        """The report name: the mode, for ``scaledl`` its ablation's name when it is one."""
        if self.mode != "scaledl":
            return self.mode
        settings = {"prior": self.prior, "edges": self.edges, "system_nodes": self.system_nodes}
        default = {"prior": "critical_path", "edges": True, "system_nodes": True}
        return next((n for n, c in ABLATIONS.items() if settings == {**default, **c}), "scaledl")

    @property
    def uses_layerwise(self) -> bool:
        """Whether node features and prior come from the layer-wise models."""
        return self.mode != "graph_only"

    @property
    def uses_gnn(self) -> bool:
        """Whether a GNN is trained (``scaledl`` and its ablations, ``graph_only``)."""
        return self.mode in ("scaledl", "graph_only")

    @property
    def gnn_prior(self) -> str:
        """The prior the GNN corrects: :attr:`prior` for ``scaledl``, ``"none"`` otherwise."""
        return self.prior if self.mode == "scaledl" else "none"

    def _features(self, gs: GraphSet, preds: pd.DataFrame | None):
        """Node features and the per-graph log prior (0 without a prior)."""
        p = None if preds is None else preds[_TIMES].to_numpy(dtype=np.float64)
        x = node_feature_matrix(gs, p)
        if self.gnn_prior == "none":
            return x, np.zeros(len(gs.workloads))
        return x, np.log(np.maximum(self._assemble(gs, preds, self.gnn_prior), 1e-6))

    @staticmethod
    def _assemble(gs: GraphSet, preds: pd.DataFrame, how: str) -> np.ndarray:
        """Iteration ms of every graph from node predictions: ``sum`` or ``critical_path``."""
        if how == "sum":
            return gs.per_graph_sum(preds["total_ms"].to_numpy(dtype=np.float64))
        return critical_path(gs, preds).iteration_ms

    def _gnn_graph(self, gs: GraphSet, x: np.ndarray) -> tuple[GraphSet, np.ndarray]:
        """The graph the GNN sees and its node features (the ablations remove parts)."""
        if not self.system_nodes:
            keep = (gs.nodes["node_kind"] == "layer").to_numpy()
            gs, x = gs.keep_nodes(keep), x[keep]
        if not self.edges:
            gs = gs.without_edges()
        return gs, x

    def _graph_set(self, workloads: list[Workload], **keys: Any) -> GraphSet:
        """The workloads' graphs with every node column the layer-wise models read.

        ``keys``: ``ids`` and ``arch_keys`` of :func:`~scaledl.graph.features.build_graph_set`.
        """
        return build_graph_set(workloads, **keys)

    def node_detail(self, workloads: list[Workload]) -> pd.DataFrame:
        """Per-node layer-wise predictions (``layer_name``, ``layer_type``, ms columns).

        Raises:
            scaledl.models.fitted.NotFittedError: before :meth:`fit`.
            ValueError: the method has no layer-wise model (``graph_only``).
        """
        return self.predict_with_detail(workloads)[1]

    def predict_prior_ms(self, workloads: list[Workload]) -> np.ndarray:
        """The prior the GNN corrects, from the fitted layer-wise models, per workload.

        Args:
            workloads: the workloads.

        Returns:
            Milliseconds, shape (len(workloads),): the critical path or the sum of the node
            predictions (:attr:`prior`; the critical path when the GNN has no prior).

        Raises:
            scaledl.models.fitted.NotFittedError: before :meth:`fit`.
            ValueError: the method has no layer-wise model (``graph_only``).
        """
        self.check_fitted()
        if not self.uses_layerwise:
            raise ValueError("graph_only has no layer-wise model: no prior")
        gs = self._graph_set(workloads)
        with single_threaded():
            preds = node_predictions(self.layerwise_, self.allreduce_, gs.nodes)
        return self._assemble(gs, preds, "sum" if self.prior == "sum" else "critical_path")

    def predict_distinct(
        self, workloads: list[Workload], **keys: Any
    ) -> tuple[np.ndarray, GraphSet, pd.DataFrame | None]:
        """Iteration ms of distinct workloads in one pass, with their graphs and node times.

        The batched path of :mod:`scaledl.prediction`: no deduplication here, the caller
        gives each iteration key once.

        Args:
            workloads: the workloads (one per distinct iteration).
            **keys: ``ids`` and ``arch_keys`` of
                :func:`~scaledl.graph.features.build_graph_set`, when the caller knows them.

        Returns:
            ``(iteration_ms, graphs, node_predictions)``: shape (len(workloads),), the graph
            set, and the per-node layer-wise predictions aligned with its nodes (``None`` for
            ``graph_only``).

        Raises:
            scaledl.models.fitted.NotFittedError: before :meth:`fit`.
        """
        self.check_fitted()
        with single_threaded():
            return self._predict_unique(workloads, **keys)

    def _predict_unique(
        self, workloads: list[Workload], **keys: Any
    ) -> tuple[np.ndarray, GraphSet, pd.DataFrame | None]:
        """Iteration ms of distinct workloads, their graph set and node predictions."""
        gs = self._graph_set(workloads, **keys)
        preds = (
            node_predictions(self.layerwise_, self.allreduce_, gs.nodes)
            if self.uses_layerwise
            else None
        )
        if not self.uses_gnn:
            how = "sum" if self.mode == "additive" else "critical_path"
            return self._assemble(gs, preds, how), gs, preds
        x, log_prior = self._features(gs, preds)
        gnn_gs, x = self._gnn_graph(gs, x)
        return np.exp(predict_gnn(self.gnn_, make_batch(gnn_gs, x, log_prior))), gs, preds

    def predict_iteration_ms(self, workloads: list[Workload]) -> np.ndarray:
        """Predicted iteration milliseconds, shape (len(workloads),) (duplicates allowed).

        Raises:
            scaledl.models.fitted.NotFittedError: before :meth:`fit`.
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
            scaledl.models.fitted.NotFittedError: before :meth:`fit`.
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


def set_fitted_parts(
    target: GraphPrediction,
    *,
    layerwise: Any,
    allreduce: Any,
    gnn: Any,
    epoch_model: Any,
    training_devices: list[str],
    training_workload_ids: list[str],
    history: dict[str, Any] | None = None,
    training_domain: TrainingDomain | None = None,
) -> None:
    """Set the fitted parts of a graph method or predictor (the attributes a fit sets).

    Used by :class:`GraphPredictor` (a loaded bundle) and
    :meth:`scaledl.models.methods.GraphMethod.from_fitted`; ``fit_seconds_`` is 0 (not fitted
    here).
    """
    target.layerwise_ = layerwise
    target.allreduce_ = allreduce
    target.gnn_ = gnn
    target.epoch_model_ = epoch_model
    target.training_devices_ = list(training_devices)
    target.training_workload_ids_ = list(training_workload_ids)
    target.history_ = dict(history or {})
    target.training_domain_ = training_domain
    target.fit_seconds_ = 0.0


class GraphPredictor(GraphPrediction):
    """A fitted graph method as a predictor bundle loads it: predicting only.

    Predicts exactly what the :class:`~scaledl.models.methods.GraphMethod` it was saved from
    does (the same :class:`GraphPrediction` methods on the same fitted parts).

    Args:
        mode: one of :data:`GRAPH_MODES`.
        prior: the GNN's prior, one of :data:`PRIORS`.
        edges: the GNN sees the graph's edges.
        system_nodes: the GNN's graph keeps the all-reduce and optimizer nodes.
        layerwise: the fitted layer-wise models (``None`` for ``graph_only``).
        allreduce: the fitted all-reduce model or ``None``.
        gnn: the trained GNN (eval mode) or ``None`` for ``additive``/``critical_path``.
        epoch_model: the fitted epoch model.
        training_devices: devices of the training workloads.
        training_workload_ids: ids of the training workloads (empty when not recorded).
        history: the GNN training record.
        training_domain: the training domain (``None``: not recorded).

    Attributes:
        layerwise_, allreduce_, gnn_, epoch_model_, training_devices_,
        training_workload_ids_, history_, training_domain_: the arguments; ``fit_seconds_``
        is 0 (not fitted in this process).

    Raises:
        ValueError: ``mode`` or ``prior`` is not one of the known values (naming it).
    """

    def __init__(
        self,
        *,
        mode: str = "scaledl",
        prior: str = "critical_path",
        edges: bool = True,
        system_nodes: bool = True,
        layerwise: LayerwiseModel | LayerwisePredictor | None,
        allreduce: AllReduceTime | None,
        gnn: RuntimeGNN | None,
        epoch_model: EpochTime,
        training_devices: list[str],
        training_workload_ids: list[str],
        history: dict[str, Any] | None = None,
        training_domain: TrainingDomain | None = None,
    ) -> None:
        for field, value, allowed in (("mode", mode, GRAPH_MODES), ("prior", prior, PRIORS)):
            if value not in allowed:
                raise ValueError(
                    f"graph predictor: field {field!r} (value {value!r}): not in {allowed}"
                )
        self.mode, self.prior = mode, prior
        self.edges, self.system_nodes = bool(edges), bool(system_nodes)
        set_fitted_parts(
            self,
            layerwise=layerwise,
            allreduce=allreduce,
            gnn=gnn,
            epoch_model=epoch_model,
            training_devices=training_devices,
            training_workload_ids=training_workload_ids,
            history=history,
            training_domain=training_domain,
        )

    def check_fitted(self) -> None:
        """Raise :class:`~scaledl.models.fitted.NotFittedError` unless the parts are set."""
        check_fitted(self, "epoch_model_", "training_devices_")

    def __repr__(self) -> str:
        return (
            f"GraphPredictor(mode={self.mode!r}, prior={self.prior!r}, edges={self.edges}, "
            f"system_nodes={self.system_nodes})"
        )
