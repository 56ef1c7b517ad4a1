"""The kind of a predictor bundle, and the writer, reader and builder of each kind.

Two kinds of bundle share one manifest, verification and registry layout
(:mod:`scaledl.registry.bundle`): ``graph``, the CPU predictor (a
:class:`~scaledl.models.methods.GraphMethod`; :mod:`scaledl.registry.bundle`), and ``kernel``,
the GPU predictor (a :class:`~scaledl.models.kernel.KernelGraphMethod`;
:mod:`scaledl.registry.kernel_bundle`). A manifest without ``predictor_kind`` is ``graph``.
The functions here pick the kind and call its module, so neither kind imports the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from scaledl.registry.bundle import (
    BundleParts,
    build_graph_method,
    read_graph_bundle,
    read_manifest,
    resolve_bundle,
    save_graph_bundle,
)
from scaledl.registry.kernel_bundle import (
    KIND,
    build_kernel_method,
    read_kernel_parts,
    save_kernel_bundle,
)

if TYPE_CHECKING:
    from scaledl.models.intervals import IntervalCalibration
    from scaledl.models.methods import GraphMethod


def save_bundle(
    method: GraphMethod,
    root: Path = Path("data/predictors"),
    name: str = "scaledl",
    metrics: dict | None = None,
    training_data: dict | None = None,
    version: str | None = None,
    calibration: IntervalCalibration | None = None,
) -> Path:
    """Write a fitted predictor as a new bundle version of its kind; ``latest`` points at it.

    Args:
        method: a fitted :class:`~scaledl.models.kernel.KernelGraphMethod` (written by
            :func:`~scaledl.registry.kernel_bundle.save_kernel_bundle`) or a fitted
            :class:`~scaledl.models.methods.GraphMethod` of mode ``scaledl``
            (:func:`~scaledl.registry.bundle.save_graph_bundle`).
        root: registry root directory.
        name: predictor name (a directory under ``root``).
        metrics: evaluation metrics to record in the manifest.
        training_data: description of the training data (``sha256``, ``workloads``, ...).
        version: version string; default the UTC time ``YYYYMMDDTHHMMSSffffffZ``.
        calibration: the interval calibration to store; ``None``: no intervals.

    Returns:
        The bundle directory.

    Raises:
        ValueError, OSError: as the kind's writer.
    """
    # torch and the models: listing and verifying bundles need neither.
    from scaledl.models.kernel import KernelGraphMethod

    if isinstance(method, KernelGraphMethod):
        return save_kernel_bundle(
            method, root, name, metrics, training_data, version, calibration
        )  # fmt: skip
    return save_graph_bundle(method, root, name, metrics, training_data, version, calibration)


def read_bundle(bundle: Path) -> BundleParts:
    """Verify a bundle of either kind and deserialise its files (no PyTorch Geometric import).

    Args:
        bundle: a bundle directory or a name directory (follows ``latest``).

    Returns:
        The :class:`~scaledl.registry.bundle.BundleParts`.

    Raises:
        BundleError: verification or deserialisation failed (naming the bundle or file).
    """
    bundle = resolve_bundle(bundle)
    manifest = read_manifest(bundle)
    if manifest.get("predictor_kind") == KIND:
        return read_kernel_parts(bundle, manifest)
    return read_graph_bundle(bundle, manifest)


def build_method(parts: BundleParts) -> Any:
    """The fitted method of a read bundle of either kind (imports the models).

    Args:
        parts: from :func:`read_bundle`.

    Returns:
        A fitted ``KernelGraphMethod``, or the ``GraphPredictor`` of a CPU bundle.

    Raises:
        BundleError: the saved weights do not fit the saved configuration.
    """
    if parts.kind == KIND:
        return build_kernel_method(parts)
    return build_graph_method(parts)


def load_method(bundle: Path) -> tuple[Any, dict[str, Any]]:
    """Load the method of a verified bundle (:func:`read_bundle` + :func:`build_method`).

    Returns:
        The method and the manifest.

    Raises:
        BundleError: verification or deserialisation failed.
    """
    parts = read_bundle(bundle)
    return build_method(parts), parts.manifest
