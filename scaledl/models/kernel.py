"""ScaleDL across devices: kernel-aware layer-wise models over operator models, by device specs.

:class:`KernelGraphMethod` is ScaleDL's :class:`~scaledl.models.methods.GraphMethod` with the
layer-wise models fed by the operator models of :mod:`scaledl.models.operators`:

1. an :class:`~scaledl.models.operators.OperatorTimeModel` is fitted on the measured
   per-operator times (``operator_timings``: NeuSight's per-node latencies, thousands of rows);
2. every layer node of a workload's graph gets ``kernel_fwd_ms``/``kernel_bwd_ms``: the sum of its
   ATen operators' predicted times on the workload's device
   (:func:`~scaledl.models.kernel_columns.kernel_columns`; operators recorded by the meta-device
   tracer, identical operators of repeated blocks predicted once);
3. the layer-wise models (``features="kernel"``) map those sums and the operator count to the
   measured layer times;
4. the iteration time is the layer sum corrected either by ScaleDL's GNN (arXiv 2511.04162) or,
   when the training data has fewer than ``min_gnn_architectures`` distinct architectures (too
   few graphs for the GNN to learn cross-architecture effects rather than memorise them), by
   the documented fallback: a log-space correction ``log(label / sum) = a + b * train +
   c * log(sum) + d_device`` (scikit-learn ``RidgeCV``; a one-hot per training device, none for
   a device never trained on) fitted either on the measured instrumented pass (how the label
   differs from the timings the layer models learn from) or on *out-of-architecture* sums
   (each training architecture's sum predicted by models fitted without it), or no correction:
   whichever has the lowest error in leave-one-architecture-out validation on the training
   data (:meth:`KernelGraphMethod._fit_correction`);
5. on a device never trained on, the training devices' correction applies with its device
   one-hot all zero, or, with ``unseen_device_correction="auto"``, only where it helps: that
   correction or none, whichever has the lower error in *leave-one-device-out* validation on
   the training data (each training device's labels predicted from its trace times the bias
   learned on the other devices; ``scripts/gpu_trace_ceiling.py`` found the bias does not
   transfer across GPUs). On the NeuSight data ``auto`` was measured and lost (LOGO MRE
   10.4% against 10.2%, ``benchmarks/results/gpu_models.json``), so it is an option.

A device is described by its specs (:mod:`scaledl.devices`), so the method predicts for any
device in the device table; predictions on devices absent from the training data are flagged
(``device_seen`` False). An unknown device is an error. When the training data never measured
the optimizer step (imports of ``loss.backward()`` timings), the ``optimizer`` node is
predicted 0 and ``includes_optimizer_`` is False: the predictions exclude it too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.linear_model import RidgeCV
from sklearn.utils.validation import check_is_fitted

from scaledl.graph.features import GraphSet
from scaledl.models.data import ProfileData
from scaledl.models.device_columns import device_columns
from scaledl.models.kernel_columns import KERNEL_COLUMNS, kernel_columns
from scaledl.models.layerwise import LayerwiseModel
from scaledl.models.layerwise_stage import fit_allreduce
from scaledl.models.methods import GraphMethod
from scaledl.models.node_times import node_predictions
from scaledl.models.operators import OperatorTimeModel, shared_fits
from scaledl.models.samples import measured_nodes
from scaledl.workloads.identity import architecture_group
from scaledl.workloads.spec import Workload

#: Correction alphas of the ridge fallback (chosen by its efficient leave-one-out CV).
RIDGE_ALPHAS = (0.1, 1.0, 10.0)
#: Candidate corrections of the fallback (see :meth:`KernelGraphMethod._fit_correction`).
CORRECTIONS = ("none", "instrumented", "out_of_architecture")
#: What a workload on a device never trained on gets (see :meth:`KernelGraphMethod.fit`):
#: ``auto`` chooses between the two others by inner leave-one-device-out validation.
UNSEEN_DEVICE_CORRECTIONS = ("auto", "training_devices", "none")
#: The operator models' settings of kernel-aware ScaleDL: device-relative features, which had
#: the lower held-out error than the devices' absolute specs in both GPU protocols
#: (``scripts/gpu_model_search.py``, ``benchmarks/results/gpu_models.json``).
DEFAULT_OPERATOR_PARAMS = {"device_features": "relative"}
#: Prefix of the unseen-device candidates' inner MREs in ``correction_scores_``.
UNSEEN_PREFIX = "unseen_device/"


def operator_rows(data: ProfileData) -> pd.DataFrame:
    """Training rows of the operator model: measured operators with device columns and group.

    Raises:
        ValueError: the data has no ``operator_timings``.
    """
    if data.operators is None or data.operators.empty:
        raise ValueError(
            "kernel-aware model: the profile data has no operator_timings (per-operator times); "
            "import them (scaledl import neusight) or profile with operator timing"
        )
    ops = data.operators.reset_index(drop=True)
    specs = [data.workloads[w] for w in ops["workload_id"]]
    devices = device_columns([w.device_name for w in specs], [w.precision for w in specs])
    rows = pd.concat([ops, devices], axis=1)
    rows["group"] = [architecture_group(w) for w in specs]
    rows.loc[[w.mode != "train" for w in specs], "backward_ms"] = np.nan
    return rows


@dataclass(repr=False)
class KernelGraphMethod(GraphMethod, BaseEstimator):
    """Device-aware ScaleDL (see the module docstring).

    Args:
        operator_params: keyword arguments of the :class:`OperatorTimeModel` (default
            :data:`DEFAULT_OPERATOR_PARAMS`).
        min_gnn_architectures: fewest distinct training architectures for the GNN correction;
            below it the ridge fallback is used (``uses_gnn_`` says which).
        unseen_device_correction: the fallback's correction on a device never trained on
            (:data:`UNSEEN_DEVICE_CORRECTIONS`): ``training_devices`` (the default: the seen
            devices' correction with an all-zero device one-hot), ``none``, or ``auto``:
            whichever of the two has the lower inner leave-one-device-out MRE
            (``unseen_correction_kind_``). ``auto`` was measured and did not win on the
            NeuSight data (``benchmarks/results/gpu_models.json``), so it is not the default.

    Attributes:
        operator_model_: the fitted :class:`OperatorTimeModel`.
        uses_gnn_: whether the GNN corrects the layer sum (else the ridge fallback).
        includes_optimizer_: whether the training data timed the optimizer step.
        correction_: the fallback's ridge, ``None`` for no correction or with the GNN.
        correction_kind_: the fallback chosen (``none``, ``instrumented``,
            ``out_of_architecture``).
        correction_scores_: every fallback candidate's inner MRE; the unseen-device
            candidates' leave-one-device-out MREs under ``unseen_device/<candidate>``.
        unseen_correction_kind_: the correction a device never trained on gets
            (``training_devices`` or ``none``; a property of the stored scores).
        correction_devices_: devices of the correction's one-hot features.
        layerwise_params_: the layer-wise models' settings ``fit`` used: ``layerwise_params``
            with the kernel features, the unmeasured optimizer and an unpenalised ridge.

    Plus the attributes of :class:`~scaledl.models.methods.GraphMethod`, all set by ``fit``.
    It follows scikit-learn's estimator contract (:class:`sklearn.base.BaseEstimator`): the
    constructor's parameters are stored as given and never changed by ``fit``, fitted state
    ends in ``_``, :func:`sklearn.base.clone` gives an unfitted copy and predicting before
    ``fit`` raises :class:`sklearn.exceptions.NotFittedError`.
    """

    operator_params: dict = field(default_factory=lambda: dict(DEFAULT_OPERATOR_PARAMS))
    min_gnn_architectures: int = 8
    unseen_device_correction: str = "training_devices"

    # ------------------------------------------------------------------ fitting
    def _fit(self, data: ProfileData, val_ids: list[str], stage=None) -> None:
        # The correction's inner operator models refit the selection's leave-one-architecture-
        # out fits (the same rows and parameters): fitted once (shared_fits).
        with shared_fits():
            self._fit_shared(data, val_ids, stage)

    def _fit_shared(self, data: ProfileData, val_ids: list[str], stage=None) -> None:
        if stage is not None:
            raise ValueError(
                "KernelGraphMethod fits its own layer-wise stage (on the operator model's "
                "kernel features): pass no stage"
            )
        if self.unseen_device_correction not in UNSEEN_DEVICE_CORRECTIONS:
            raise ValueError(
                f"unseen_device_correction must be one of {UNSEEN_DEVICE_CORRECTIONS}, "
                f"got {self.unseen_device_correction!r}"
            )
        self.correction_, self.correction_kind_ = None, "none"
        self.correction_scores_, self.correction_devices_ = {}, []
        self.operator_model_ = OperatorTimeModel(**self.operator_params).fit(operator_rows(data))
        opt = data.nodes[data.nodes["node_kind"] == "optimizer"]
        self.includes_optimizer_ = bool(opt["forward_ms"].notna().any())
        self.layerwise_params_ = {
            **self.layerwise_params,
            "features": "kernel",
            "unmeasured_types": () if self.includes_optimizer_ else ("optimizer",),
            # kernel_ms is already a time (coefficient about 1): the ridge that keeps the
            # collinear work features apart would shrink it towards 0 on relative errors.
            "regressor_params": {"alpha": 0.0, **self.layerwise_params.get("regressor_params", {})},
        }
        self.training_devices_ = sorted({w.device_name for w in data.workloads.values()})
        data = self._with_kernels(data, self.operator_model_)
        groups = {architecture_group(w) for w in data.workloads.values()}
        self.uses_gnn_ = self.uses_gnn and len(groups) >= self.min_gnn_architectures
        if self.mode == "scaledl" and not self.uses_gnn_:
            self.layerwise_ = LayerwiseModel(**self.layerwise_params_).fit(
                measured_nodes(data.nodes)
            )
            self.allreduce_ = fit_allreduce(data)
            self.gnn_, self.history_ = None, {}
            self._fit_correction(data)
            return
        super()._fit(data, val_ids)

    def _layerwise_settings(self) -> dict:
        return self.layerwise_params_

    def check_fitted(self) -> None:
        """Raise :class:`sklearn.exceptions.NotFittedError` unless :meth:`fit` has run."""
        check_is_fitted(self, ["epoch_model_", "training_devices_", "operator_model_"])

    def _with_kernels(self, data: ProfileData, model: OperatorTimeModel) -> ProfileData:
        nodes = data.graphs.nodes.drop(columns=list(KERNEL_COLUMNS), errors="ignore")
        kernels = kernel_columns(data.graphs, model)
        graphs = dataclasses.replace(data.graphs, nodes=pd.concat([nodes, kernels], axis=1))
        return dataclasses.replace(data, graphs=graphs)

    def _fit_correction(self, data: ProfileData) -> None:
        """The GNN's fallback: a log-space correction of the layer sum, chosen by inner CV.

        Candidates (:data:`CORRECTIONS`): ``none`` (the layer sum); ``instrumented``, a ridge
        on how the label differs from the instrumented pass the layer models learn from
        (``log(label / instrumented_ms)`` on ``[train, log instrumented_ms, device]``, measured
        in the training data); ``out_of_architecture``, a ridge on how the label differs from
        layer sums predicted without the workload's architecture. The candidate with the lowest
        MRE in leave-one-architecture-out validation on the training data is refitted on all of
        it (``correction_kind_``, with every candidate's inner MRE in ``correction_scores_``).
        """
        ids = np.array(data.ids)
        workloads = [data.workloads[i] for i in ids]
        groups = np.array([architecture_group(w) for w in workloads])
        labels = data.labels["iteration_ms"].to_numpy()
        measured = data.labels["instrumented_ms"].to_numpy(dtype=float)
        self.correction_devices_ = sorted(self.training_devices_)
        self.correction_scores_ = {}
        unique = np.unique(groups)
        if len(unique) < 2:
            self.correction_kind_, self.correction_ = "none", None
            return
        sums = np.full(len(ids), np.nan)
        for group in unique:
            inner = data.subset(ids[groups != group])
            params = {**self.operator_params, "grid": (self._chosen_params(),)}
            op_model = OperatorTimeModel(**params).fit(operator_rows(inner))
            inner = self._with_kernels(inner, op_model)
            layerwise = LayerwiseModel(**self.layerwise_params_).fit(measured_nodes(inner.nodes))
            held = self._with_kernels(data.subset(ids[groups == group]), op_model)
            pred = node_predictions(layerwise, self.allreduce_, held.nodes)["total_ms"]
            sums[groups == group] = held.graphs.per_graph_sum(pred.to_numpy())
        has_measured = bool(np.isfinite(measured).all())
        bases = {"instrumented": measured, "out_of_architecture": sums}
        candidates = ["none", *(["instrumented"] if has_measured else []), "out_of_architecture"]
        for kind in candidates:
            pred = np.empty(len(ids))
            for group in unique:
                test = groups == group
                if kind == "none":
                    pred[test] = sums[test]
                    continue
                ridge = self._ridge(workloads, bases[kind], labels, ~test)
                held = [workloads[i] for i in np.flatnonzero(test)]
                X = self._correction_features(held, sums[test])
                pred[test] = sums[test] * np.exp(ridge.predict(X))
            self.correction_scores_[kind] = float(np.mean(np.abs(pred - labels) / labels))
        self.correction_kind_ = min(candidates, key=self.correction_scores_.get)
        self.correction_ = (
            None
            if self.correction_kind_ == "none"
            else self._ridge(
                workloads, bases[self.correction_kind_], labels, np.ones(len(ids), bool)
            )
        )
        if self.correction_ is not None:
            self._score_unseen_device(workloads, bases[self.correction_kind_], labels)

    def _score_unseen_device(self, workloads: list[Workload], base, labels) -> None:
        """Leave-one-device-out MRE of each unseen-device candidate, into the scores.

        For each training device, its workloads' labels are predicted from ``base`` (the
        chosen correction's: the instrumented pass or the out-of-architecture sums) with no
        correction (``none``) or times the correction fitted on the other devices, the held
        device's one-hot all zero (``training_devices``). Needs two training devices.
        """
        devices = np.array([w.device_name for w in workloads])
        if len(np.unique(devices)) < 2:
            return
        pred = np.empty(len(workloads))
        for device in np.unique(devices):
            test = devices == device
            ridge = self._ridge(workloads, base, labels, ~test)
            held = [workloads[i] for i in np.flatnonzero(test)]
            X = self._correction_features(held, base[test], unseen=True)
            pred[test] = base[test] * np.exp(ridge.predict(X))
        for kind, values in (("none", base), ("training_devices", pred)):
            self.correction_scores_[UNSEEN_PREFIX + kind] = float(
                np.mean(np.abs(values - labels) / labels)
            )

    @property
    def unseen_correction_kind_(self) -> str:
        """The correction of a device never trained on: ``training_devices`` or ``none``.

        ``none`` without a fitted correction; else the constructor's choice, or for ``auto``
        the candidate with the lower ``unseen_device/`` inner MRE (``none`` on a tie, and
        when fewer than two training devices left nothing to validate it on).

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
            ValueError: an unknown ``unseen_device_correction``.
        """
        self.check_fitted()
        if self.unseen_device_correction not in UNSEEN_DEVICE_CORRECTIONS:
            raise ValueError(
                f"unseen_device_correction must be one of {UNSEEN_DEVICE_CORRECTIONS}, "
                f"got {self.unseen_device_correction!r}"
            )
        if self.correction_ is None or self.unseen_device_correction == "none":
            return "none"
        if self.unseen_device_correction == "training_devices":
            return "training_devices"
        scores = {
            k.removeprefix(UNSEEN_PREFIX): v
            for k, v in self.correction_scores_.items()
            if k.startswith(UNSEEN_PREFIX)
        }
        if not scores:
            return "none"
        return min(("none", "training_devices"), key=lambda k: scores[k])

    def _ridge(self, workloads, base, labels, mask) -> RidgeCV:
        chosen = [w for w, m in zip(workloads, mask, strict=True) if m]
        X = self._correction_features(chosen, base[mask])
        return RidgeCV(alphas=RIDGE_ALPHAS).fit(X, np.log(labels[mask] / base[mask]))

    def _chosen_params(self) -> dict:
        """The operator hyper-parameters most often chosen in the outer fit (for inner refits)."""
        chosen = list(self.operator_model_.params_.values())
        return max(chosen, key=lambda p: chosen.count(p)) if chosen else {}

    def _correction_features(
        self, workloads: list[Workload], sums: np.ndarray, unseen: bool = False
    ) -> np.ndarray:
        """``[train, log sum, device one-hot]``; ``unseen``: the one-hot all zero."""
        train = np.array([w.mode == "train" for w in workloads], dtype=float)
        onehot = np.array(
            [[w.device_name == d and not unseen for d in self.correction_devices_]
             for w in workloads],
            dtype=float,
        ).reshape(len(workloads), len(self.correction_devices_))  # fmt: skip
        return np.column_stack([train, np.log(np.maximum(sums, 1e-6)), onehot])

    # ------------------------------------------------------------------ prediction
    def _graph_set(self, workloads: list[Workload], **keys: Any) -> GraphSet:
        gs = super()._graph_set(workloads, **keys)
        gs.nodes = pd.concat([gs.nodes, kernel_columns(gs, self.operator_model_)], axis=1)
        return gs

    def _sums(self, gs: GraphSet) -> np.ndarray:
        pred = node_predictions(self.layerwise_, self.allreduce_, gs.nodes)["total_ms"]
        return gs.per_graph_sum(pred.to_numpy())

    def layer_sum_ms(self, workloads: list[Workload]) -> np.ndarray:
        """The uncorrected sum of the layer-wise predictions (the ``additive`` method).

        Returns:
            Milliseconds, shape (len(workloads),).

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
        """
        self.check_fitted()
        unique = list({w.workload_id: w for w in workloads}.values())
        by_id = dict(zip([w.workload_id for w in unique], self._sums(self._graph_set(unique)),
                         strict=True))  # fmt: skip
        return np.array([by_id[w.workload_id] for w in workloads])

    def _predict_unique(self, workloads: list[Workload], **keys: Any):
        """Iteration ms of distinct workloads, their graph set and node predictions.

        ``keys``: ``ids`` and ``arch_keys`` of :func:`~scaledl.graph.features.build_graph_set`.
        """
        if self.mode != "scaledl" or self.uses_gnn_:
            return super()._predict_unique(workloads, **keys)
        gs = self._graph_set(workloads, **keys)
        preds = node_predictions(self.layerwise_, self.allreduce_, gs.nodes)
        sums = gs.per_graph_sum(preds["total_ms"].to_numpy())
        return sums * self._correction_factor(workloads, sums), gs, preds

    def correction_factor(self, workloads: list[Workload], layer_sums_ms) -> np.ndarray:
        """The fallback's multiplicative correction of given layer sums of ``workloads``.

        What :meth:`predict_iteration_ms` multiplies a workload's layer sum by, for a sum the
        caller computed (a tensor-parallel rank's sharded layers, say).

        Args:
            workloads: the workloads (device and mode are the correction's features).
            layer_sums_ms: their layer sums, milliseconds, shape (len(workloads),).

        Returns:
            Factors, shape (len(workloads),); 1 where no correction was chosen.

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
            ValueError: the method corrects with its GNN (whole graphs, not a layer sum).
        """
        self.check_fitted()
        if self.mode != "scaledl" or self.uses_gnn_:
            raise ValueError("correction_factor: this fit corrects with the GNN, not a layer sum")
        return self._correction_factor(workloads, np.asarray(layer_sums_ms, dtype=float))

    def _correction_factor(self, workloads: list[Workload], sums: np.ndarray) -> np.ndarray:
        """The fallback's multiplicative correction of each layer sum (1: none)."""
        factor = np.ones(len(workloads))
        if self.correction_ is None:
            return factor
        seen = np.array([w.device_name in self.training_devices_ for w in workloads], bool)
        if self.unseen_correction_kind_ == "training_devices":
            seen[:] = True  # the seen devices' correction, the unseen one-hot all zero
        if seen.any():
            chosen = [w for w, s in zip(workloads, seen, strict=True) if s]
            X = self._correction_features(chosen, sums[seen])
            factor[seen] = np.exp(self.correction_.predict(X))
        return factor

    def predict(self, workloads: list[Workload]) -> pd.DataFrame:
        """Iteration and epoch predictions, with ``device_seen`` (device in the training data).

        Returns:
            DataFrame with ``workload_id``, ``iteration_s``, ``epoch_s``, ``device_seen``.
        """
        out = super().predict(workloads)
        out["device_seen"] = [w.device_name in self.training_devices_ for w in workloads]
        return out
