"""Bundles of the GPU predictor (kernel-aware ScaleDL): saved and loaded without pickle.

The GPU predictor is a fitted :class:`~scaledl.models.kernel.KernelGraphMethod`: operator models
(:class:`~scaledl.models.operators.OperatorTimeModel`, gradient-boosted utilisation per operator
class and direction), kernel-aware layer-wise models and the log-space correction of their sum.
Its bundle is a predictor bundle like the CPU one (:mod:`scaledl.registry.bundle`: the same
manifest, checksums, durable publish, ``latest``, verification before anything is
deserialised, registration) whose manifest says ``"predictor_kind": "kernel"`` and whose files
are :data:`KERNEL_BUNDLE_FILES`:

* ``layerwise.skops``: the layer-wise regressors (as in a CPU bundle, same allow-list);
* ``operators.skops``: ``{"models": {op_class: {direction: GradientBoostingRegressor}},
  "correction": RidgeCV or None}``, loaded by skops with the exact types of
  :data:`OPERATOR_TRUSTED_TYPES` beyond its safe defaults (no prefixes, no pickle);
* ``params.json``: the constructor parameters, the fitted scalars (correction kind, devices,
  chosen operator hyper-parameters...), the epoch and all-reduce models, the training devices,
  workload ids and domain;
* ``calibration.json`` (optional): the conformal intervals, calibrated on the GPU evaluation
  (:mod:`scaledl.evaluation.gpu_calibration`).

Every loaded tree's structure is checked before anything predicts
(:mod:`scaledl.registry.trees`), and every loaded number finite (the correction's coefficients,
the layer regressors as in a CPU bundle). A bundle predicts any GPU of the device
table: a GPU never trained on is predicted from its specs and flagged by the domain guard
(``unseen_device``). A kernel-aware method whose correction is the GNN (trained with at least
``min_gnn_architectures`` architectures) is not stored by this format: :func:`save_kernel_bundle`
refuses it with that reason.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zipfile import ZIP_DEFLATED

import numpy as np

from scaledl.io.excerpt import bounded, excerpt
from scaledl.registry.bundle import (
    TRUSTED_TYPES,
    BundleError,
    BundleParts,
    _check_regressors,
    load_skops,
    publish_bundle,
    read_calibration,
    read_params,
    system_models,
)

if TYPE_CHECKING:
    from scaledl.models.intervals import IntervalCalibration
    from scaledl.models.kernel import KernelGraphMethod

KIND = "kernel"
#: The files a kernel bundle's loader reads besides ``manifest.json``.
KERNEL_BUNDLE_FILES = ("layerwise.skops", "operators.skops", "params.json")
#: The exact types ``operators.skops`` may name beyond skops' defaults (its safe list of
#: scikit-learn estimators, numpy arrays and builtins): the boosted trees and their loss.
OPERATOR_TRUSTED_TYPES = frozenset(
    {
        "sklearn._loss.link.IdentityLink",
        "sklearn._loss.link.Interval",
        "sklearn._loss.loss.HalfSquaredError",
        "sklearn.tree._tree.Tree",
    }
)


def _key(op_class: str, direction: str) -> str:
    return f"{op_class}/{direction}"


def save_kernel_bundle(
    method: KernelGraphMethod,
    root: Path,
    name: str = "scaledl-gpu",
    metrics: dict | None = None,
    training_data: dict | None = None,
    version: str | None = None,
    calibration: IntervalCalibration | None = None,
) -> Path:
    """Write a fitted GPU predictor as a new bundle version and point ``latest`` at it.

    Args:
        method: a fitted :class:`~scaledl.models.kernel.KernelGraphMethod` (mode ``scaledl``,
            fallback correction).
        root: registry root directory.
        name: predictor name (a directory under ``root``).
        metrics: evaluation metrics to record in the manifest.
        training_data: description of the training data (``sha256``, ``workloads``, ...).
        version: version string; default the UTC time ``YYYYMMDDTHHMMSSffffffZ``.
        calibration: the interval calibration (``calibration.json``), or ``None``.

    Returns:
        The bundle directory.

    Raises:
        sklearn.exceptions.NotFittedError: the method is not fitted.
        ValueError: not mode ``scaledl``, a GNN correction (not stored by this format), the
            version exists with another manifest, or a calibration of other profile tables.
        OSError: writing failed; nothing is published.
    """
    # skops: only reading a bundle's fitted models needs it.
    import skops.io as sio

    method.check_fitted()
    if method.mode != "scaledl" or method.uses_gnn_:
        raise ValueError(
            "save_kernel_bundle stores the kernel-aware ScaleDL with its fallback correction; "
            f"this one has mode {method.mode!r} and uses_gnn_={method.uses_gnn_} (a GNN "
            f"correction, trained with >= {method.min_gnn_architectures} architectures, is not "
            "stored by the kernel bundle format)"
        )
    operators = method.operator_model_
    nested: dict[str, dict[str, Any]] = {}
    for (op_class, direction), reg in operators.models_.items():
        nested.setdefault(op_class, {})[direction] = reg

    def write_models(tmp: Path) -> None:
        # Deflated: the boosted trees are ~50 MB stored, a few MB compressed.
        sio.dump(method.layerwise_.models_, tmp / "layerwise.skops", compression=ZIP_DEFLATED)
        sio.dump(
            {"models": nested, "correction": method.correction_},
            tmp / "operators.skops",
            compression=ZIP_DEFLATED,
        )

    return publish_bundle(
        root,
        name,
        version,
        write_models=write_models,
        params=_kernel_params(method),
        manifest={
            "predictor_kind": KIND,
            "feature_schema": {
                "layer_features": "kernel (kernel_fwd_ms, kernel_bwd_ms from the operator models)",
                "operator_models": sorted(_key(*k) for k in operators.models_),
                "devices": "any GPU of the device table (scaledl devices), from its specs",
            },
            "training_summary": {
                "fit_seconds": method.fit_seconds_,
                "training_workloads": len(method.training_workload_ids_),
                "correction": method.correction_kind_,
            },
        },
        training_data=training_data,
        metrics=metrics,
        calibration=calibration,
    )


def _kernel_params(method: KernelGraphMethod) -> dict[str, Any]:
    """``params.json`` of a fitted GPU predictor (see the module docstring)."""
    operators = method.operator_model_
    return {
        "init": _init_params(method),
        "layerwise_params": _jsonable(method.layerwise_params_),
        "layerwise_min_samples": method.layerwise_.min_samples,
        "includes_optimizer": method.includes_optimizer_,
        "correction_kind": method.correction_kind_,
        "correction_scores": method.correction_scores_,
        "correction_devices": list(method.correction_devices_),
        "operator_fit": {
            "params": {_key(*k): v for k, v in operators.params_.items()},
            "inner_mre": {_key(*k): _finite_or_none(v) for k, v in operators.inner_mre_.items()},
            "fallback": [_key(*k) for k in operators.fallback_],
            "clipped_share": {_key(*k): v for k, v in operators.clipped_share_.items()},
        },
        "allreduce": method.allreduce_.to_dict() if method.allreduce_ is not None else None,
        "epoch": method.epoch_model_.to_dict(),
        "training_devices": list(method.training_devices_),
        "training_workload_ids": list(method.training_workload_ids_),
        "training_domain": method.training_domain_.to_dict(),
    }


def _init_params(method: KernelGraphMethod) -> dict[str, Any]:
    params = method.get_params(deep=False)
    params["gnn_config"] = dataclasses.asdict(params["gnn_config"])
    return _jsonable(params)


def _jsonable(value: Any) -> Any:
    """Tuples as lists, recursively (JSON has no tuples; :func:`_untuple` reverses it)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _finite_or_none(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def read_kernel_parts(bundle: Path, manifest: dict[str, Any]) -> BundleParts:
    """Deserialise a verified kernel bundle (its manifest read by ``read_manifest``).

    Args:
        bundle: the bundle directory.
        manifest: its verified manifest.

    Returns:
        The :class:`~scaledl.registry.bundle.BundleParts` (``kind`` ``"kernel"``, the operator
        models and correction in ``operators``, no GNN state).

    Raises:
        BundleError: a type outside the allow-lists, an unreadable file or a non-finite or
            out-of-range number (naming the file, field and a bounded excerpt).
    """
    # the models load torch and scikit-learn; listing and verifying bundles need neither.
    from scaledl.models.layerwise import LayerwiseModel

    loaded = {
        file: load_skops(bundle / file, trusted)
        for file, trusted in (("layerwise.skops", TRUSTED_TYPES),
                              ("operators.skops", OPERATOR_TRUSTED_TYPES))
    }  # fmt: skip
    params_file = bundle / "params.json"
    params, checked = read_params(bundle, KIND)
    try:
        layerwise = LayerwiseModel.from_fitted(loaded["layerwise.skops"], **_layerwise_init(params))
    except (KeyError, TypeError, ValueError) as exc:
        raise BundleError(f"{params_file}: unreadable: {bounded(str(exc), 300)}") from exc
    domain, calibration = checked.training_domain, read_calibration(bundle, manifest)
    _check_regressors(bundle / "layerwise.skops", layerwise.models_)
    _check_operators(bundle / "operators.skops", loaded["operators.skops"])
    return BundleParts(
        bundle, manifest, layerwise, params, {}, domain, calibration, kind=KIND,
        operators=loaded["operators.skops"],
    )  # fmt: skip


def _layerwise_init(params: dict[str, Any]) -> dict[str, Any]:
    init = dict(params["layerwise_params"])
    if "unmeasured_types" in init:
        init["unmeasured_types"] = tuple(init["unmeasured_types"])
    return {**init, "min_samples": params["layerwise_min_samples"]}


def _check_operators(path: Path, operators: Any) -> None:
    """Refuse operator models that are not boosted trees or a correction with non-finite numbers.

    The trees' structure, thresholds and values were checked when loaded
    (:func:`~scaledl.registry.bundle.load_skops`).

    Raises:
        BundleError: naming the file, the model and the field.
    """
    # scikit-learn's estimators: only rebuilding the fitted models needs them.
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.linear_model import RidgeCV

    if not isinstance(operators, dict) or set(operators) != {"models", "correction"}:
        raise BundleError(f"{path}: expected a mapping with 'models' and 'correction'")
    models = operators["models"]
    if not isinstance(models, dict) or not models:
        raise BundleError(f"{path}: field 'models' (value {excerpt(models)}): no operator model")
    for op_class, by_direction in models.items():
        for direction, reg in (by_direction or {}).items():
            where = f"{path}: operator model {excerpt(op_class)}/{excerpt(direction)}"
            if not isinstance(reg, GradientBoostingRegressor):
                raise BundleError(f"{where}: not a GradientBoostingRegressor")
    correction = operators["correction"]
    if correction is not None:
        if not isinstance(correction, RidgeCV):
            raise BundleError(f"{path}: field 'correction': not a RidgeCV")
        for field_name in ("coef_", "intercept_"):
            value = np.asarray(getattr(correction, field_name, np.nan), dtype=float)
            if not np.isfinite(value).all():
                raise BundleError(
                    f"{path}: correction field {field_name!r} (value "
                    f"{excerpt(value.tolist())}): not finite"
                )


def build_kernel_method(parts: BundleParts) -> KernelGraphMethod:
    """The fitted GPU predictor of a read kernel bundle.

    Args:
        parts: from :func:`read_kernel_parts`.

    Returns:
        The fitted :class:`~scaledl.models.kernel.KernelGraphMethod`.

    Raises:
        BundleError: the parameters do not build the method.
    """
    # the models load PyTorch Geometric (about 1.5 s); only the first prediction needs them.
    from scaledl.models.gnn_training import GNNTrainConfig
    from scaledl.models.kernel import KernelGraphMethod
    from scaledl.models.operators import OperatorTimeModel

    params = parts.params
    try:
        init = dict(params["init"])
        init["gnn_config"] = GNNTrainConfig(**init["gnn_config"])
        op_init = dict(init.get("operator_params", {}))
        if "grid" in op_init:
            op_init["grid"] = tuple(op_init["grid"])
        init["operator_params"] = op_init
        method = KernelGraphMethod(**init)
        operators = OperatorTimeModel(**op_init)
        fit = params["operator_fit"]
        operators.models_ = {
            (c, d): reg for c, by in parts.operators["models"].items() for d, reg in by.items()
        }
        operators.params_ = {tuple(k.split("/")): v for k, v in fit["params"].items()}
        operators.inner_mre_ = {
            tuple(k.split("/")): (np.nan if v is None else v) for k, v in fit["inner_mre"].items()
        }
        operators.fallback_ = [tuple(k.split("/")) for k in fit["fallback"]]
        operators.clipped_share_ = {tuple(k.split("/")): v for k, v in fit["clipped_share"].items()}
        method.operator_model_ = operators
        method.layerwise_params_ = _layerwise_init(params)
        method.layerwise_params_.pop("min_samples")
        method.layerwise_ = parts.layerwise
        method.allreduce_, method.epoch_model_ = system_models(params)
        method.gnn_, method.history_ = None, {}
        method.uses_gnn_ = False
        method.includes_optimizer_ = bool(params["includes_optimizer"])
        method.correction_ = parts.operators["correction"]
        method.correction_kind_ = params["correction_kind"]
        method.correction_scores_ = dict(params["correction_scores"])
        method.correction_devices_ = list(params["correction_devices"])
        method.training_devices_ = list(params["training_devices"])
        method.training_workload_ids_ = list(params["training_workload_ids"])
        method.training_domain_ = parts.domain
        method.fit_seconds_ = 0.0
    except (KeyError, TypeError, ValueError) as exc:
        where = parts.path / "params.json"
        raise BundleError(
            f"{where}: cannot build the GPU predictor: {bounded(str(exc), 300)}"
        ) from exc
    return method
