"""Predictor bundles: save, verify and load trained ScaleDL predictors without running their code.

A bundle is a directory ``<root>/<name>/<version>/`` holding:

* ``manifest.json``: ``format_version``, ``name``, ``version``, ``created_at``,
  ``training_data`` (SHA-256 over the validated profile tables, workload count, families,
  devices; the DVC version of ``data/`` is the ``data.dvc`` commit that holds the bundle),
  ``feature_schema``, ``library_versions``, ``metrics`` and ``files`` (SHA-256 of every other
  file);
* ``layerwise.npz``: the fitted layer-wise models as NumPy arrays (no pickle, no scikit-learn:
  :mod:`scaledl.registry.layer_arrays`). A bundle written before it holds ``layerwise.skops``
  instead (the regressors in skops' safe format); such a bundle still loads, through skops
  (decision: no retraining forced; it then imports skops and scikit-learn, and the
  scikit-learn version check below applies);
* ``gnn.pt``: the GNN state dict, loaded with ``torch.load(weights_only=True)``;
* ``params.json``: the all-reduce model, epoch model, GNN configuration, training devices, the
  ids of the training workloads and the training domain (:mod:`scaledl.models.domain`, what
  the domain guard checks predictions against);
* ``calibration.json`` (optional): the conformal calibration of the prediction intervals
  (:class:`~scaledl.models.intervals.IntervalCalibration`), added when the bundle is saved or
  registered with one; a bundle without it predicts without intervals.

``<root>/<name>/latest`` is a one-line text file naming the newest version (a symlink to such a
file is read like it; a symlink to a version directory is refused with a clear error).
Publishing is durable (:mod:`scaledl.io.atomic`): every file and the version folder are fsynced
before the rename into place, the name directory after it, and ``latest`` the same way, so a
crash or power loss leaves ``latest`` on the old version or the new one; a crashed publish can
be retried to completion, and the temporaries a dead publish left are removed by the next one.
Of two concurrent publishes of one version, the loser of the rename finishes as a retry does
(same manifest) or raises ``ValueError`` naming the version.

Loading never runs code from a bundle. It checks the format version, that every file is a
regular file (a symlink or hardlink to one is fine: DVC's cache layouts; FIFOs and devices are
refused unread) of the size and SHA-256 the manifest records, and (when the bundle holds skops
files) the scikit-learn version *before* deserialising anything; ``layerwise.npz`` is read with
``allow_pickle=False``, its members' dtypes and shapes checked before their data are read and
every tree's structure checked (:mod:`scaledl.registry.layer_arrays`); skops builds only the
exact types of :data:`TRUSTED_TYPES` beyond its own safe defaults (no prefixes) and every
tree's structure is checked before anything predicts (:func:`load_skops`,
:mod:`scaledl.registry.trees`),
``torch.load`` builds only tensors (``weights_only=True``), every JSON file is read by
:func:`scaledl.io.safe.read_json` (regular, bounded in size and nesting, finite), and every
loaded number must be finite and in range. A registry version folder must resolve inside its
registry root (:func:`check_inside`). Any mismatch raises :class:`BundleError` (or a subclass)
naming the file, field and a bounded excerpt of the value.

The loader knows the files it reads (:data:`BUNDLE_FILES`, and :data:`OPTIONAL_BUNDLE_FILES`
when the manifest lists them): each must be listed in the manifest's ``files`` with its
SHA-256, so a file edited and dropped from the manifest is refused, not trusted (an optional
file the manifest does not list is never read). A manifest entry that is not a plain file name
of the bundle directory, or that the loader does not know, is refused too (a bundle from
another format). Other files in the directory are never read. :func:`list_predictors` lists a
broken version with its reason (whatever the error) instead of failing, so one damaged version
never hides the good ones.

This module writes and reads the CPU (``graph``) kind and holds what every kind shares (the
manifest, verification, publishing, listing); :mod:`scaledl.registry.kernel_bundle` is the GPU
(``kernel``) kind, and :mod:`scaledl.registry.kinds` picks the kind of a method or a bundle
(``save_bundle``, ``read_bundle``, ``build_method``, ``load_method``).

Loading is two steps so that a fresh process is fast: :func:`read_graph_bundle` verifies the
bundle and deserialises every file (``layerwise.npz``, ``torch.load``), without importing PyTorch
Geometric or skops; :func:`build_graph_method` builds the GNN module around the loaded weights
(this imports PyTorch Geometric, about 1.5 s of imports) and the fitted method.
:class:`~scaledl.Predictor` does the second step at its first prediction.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from scaledl.io.atomic import atomic_dir, remove_stale_temps, write_atomic
from scaledl.io.excerpt import bounded, excerpt
from scaledl.io.safe import UnsafeInputError, read_json, read_text
from scaledl.layout import DataLayout
from scaledl.models.allreduce_time import AllReduceTime
from scaledl.models.epoch_time import EpochTime
from scaledl.models.intervals import CalibrationError, IntervalCalibration
from scaledl.models.layer_time import LayerwisePredictor
from scaledl.registry.layer_arrays import LayerArraysError, read_layer_arrays, write_layer_arrays
from scaledl.registry.trees import TreeStructureError, check_trees

if TYPE_CHECKING:  # the loaders import these on use: `import scaledl` stays cheap
    import torch

    from scaledl.models.domain import TrainingDomain
    from scaledl.models.graph_prediction import GraphPrediction, GraphPredictor
    from scaledl.models.layerwise import LayerwiseModel

FORMAT_VERSION = 1
_LIBRARIES = ("scaledl", "torch", "torch_geometric", "scikit-learn", "skops", "transformers")
#: The exact types a layer-wise file may name beyond skops' defaults (its own safe list of
#: scikit-learn estimators, numpy arrays and builtins): the regressor and its boosted trees.
#: Exact names, never prefixes: a prefix such as ``numpy.`` admits functions (a numpy testing
#: helper that runs a string) that skops would call while loading.
TRUSTED_TYPES = frozenset(
    {"scaledl.models.layerwise.LayerTimeRegressor", "sklearn.tree._tree.Tree"}
)
#: Bounds of a layer regressor's fitted numbers (decisions; the committed CPU host's fits have
#: intercepts under 1 ms, scaled coefficients under 3 ms and correction ranges within the
#: default ``max_correction`` of 1): an intercept or coefficient (milliseconds at the largest
#: training feature) beyond 1000 s, or a log correction beyond +-10 (a factor of 22,000).
MAX_LAYER_MS = 1e6
MAX_LOG_CORRECTION = 10.0
#: Largest ``manifest.json`` and ``latest`` read (bytes): a bigger one is refused unread.
MAX_MANIFEST_BYTES = 1 << 20
_MAX_LATEST_BYTES = 256


_OPTIONAL_GNN_BUFFERS = {"delta_min", "delta_max"}
#: The files the loader reads besides ``manifest.json``; each must be listed in its ``files``.
BUNDLE_FILES = ("gnn.pt", "layerwise.npz", "params.json")
#: A CPU bundle's fitted layer-wise models (NumPy arrays, :mod:`scaledl.registry.layer_arrays`).
LAYER_FILE = "layerwise.npz"
#: What a CPU bundle written before ``layerwise.npz`` holds in its place (a skops file, read by
#: :func:`load_skops`: loading one imports skops and scikit-learn).
LEGACY_FILES = {LAYER_FILE: "layerwise.skops"}
#: Files a bundle may have; when the manifest lists one it is verified and read like the rest.
OPTIONAL_BUNDLE_FILES = ("calibration.json",)
CALIBRATION_FILE = "calibration.json"
#: ``predictor_kind`` of a manifest (absent: ``graph``) -> the files its loader reads: the CPU
#: predictor (``graph``) and the GPU predictor (``kernel``, :mod:`scaledl.registry.kernel_bundle`).
PREDICTOR_KINDS = {
    "graph": BUNDLE_FILES,
    "kernel": ("layerwise.skops", "operators.skops", "params.json"),
}
#: Columns of :func:`list_predictors`.
LIST_COLUMNS = (
    "name",
    "version",
    "latest",
    "status",
    "problem",
    "created_at",
    "training_workloads",
    "path",
)


class BundleError(RuntimeError):
    """A predictor bundle is missing, tampered with, truncated or unreadable."""


class IncompatibleBundleError(BundleError):
    """A bundle was written by an incompatible format or library version."""


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries a bundle depends on."""
    versions = {}
    for lib in _LIBRARIES:
        try:
            versions[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            versions[lib] = "unknown"
    return versions


def save_graph_bundle(
    method: GraphPrediction,
    root: Path = Path("data/predictors"),
    name: str = "scaledl",
    metrics: dict | None = None,
    training_data: dict | None = None,
    version: str | None = None,
    calibration: IntervalCalibration | None = None,
) -> Path:
    """Write a fitted ScaleDL predictor as a new bundle version and point ``latest`` at it.

    Args:
        method: a fitted :class:`~scaledl.models.methods.GraphMethod` of mode ``scaledl``, or
            a loaded :class:`~scaledl.models.graph_prediction.GraphPredictor` (the
            GPU predictor's kind: :func:`scaledl.registry.kernel_bundle.save_kernel_bundle`;
            :func:`scaledl.registry.kinds.save_bundle` picks the writer).
        root: registry root directory.
        name: predictor name (a directory under ``root``).
        metrics: evaluation metrics to record in the manifest.
        training_data: description of the training data (``sha256``, ``workloads``, ...).
        version: version string; default the UTC time ``YYYYMMDDTHHMMSSffffffZ``.
        calibration: the interval calibration to store (``calibration.json``); ``None`` saves
            a bundle that predicts without intervals.

    Returns:
        The bundle directory.

    Raises:
        scaledl.models.fitted.NotFittedError: the method is not fitted (a ``ValueError``).
        ValueError: the method is not a ScaleDL ``GraphMethod``, the version exists (a new
            training never writes the manifest of an existing version), or the calibration
            came from other profile tables than ``training_data["sha256"]``.
        OSError: writing failed (``ENOSPC``, ``EROFS``...); nothing is published.
    """
    # torch and the models (PyTorch Geometric): listing and verifying bundles need neither.
    import torch

    from scaledl.models.graph_prediction import GraphPrediction
    from scaledl.models.layerwise import layer_time_models

    if not isinstance(method, GraphPrediction) or method.mode != "scaledl":
        raise ValueError(
            f"save_bundle needs a fitted GraphMethod(mode='scaledl') or a loaded GraphPredictor, "
            f"got {method!r:.80}"
        )
    method.check_fitted()

    def write_models(tmp: Path) -> None:
        write_layer_arrays(layer_time_models(method.layerwise_.models_), tmp / LAYER_FILE)
        torch.save(method.gnn_.state_dict(), tmp / "gnn.pt")

    return publish_bundle(
        root,
        name,
        version,
        write_models=write_models,
        params=_graph_params(method),
        manifest=_graph_manifest(method),
        training_data=training_data,
        metrics=metrics,
        calibration=calibration,
    )


def _graph_manifest(method: GraphPrediction) -> dict[str, Any]:
    """The CPU predictor's own manifest fields: its feature schema and training summary."""
    # the models load torch and scikit-learn; listing and verifying bundles need neither.
    from scaledl.graph.layer_graph import EDGE_TYPES
    from scaledl.graph.units import LAYER_TYPES
    from scaledl.models.layer_time import LAYER_FEATURES

    return {
        "feature_schema": {
            "layer_types": list(LAYER_TYPES),
            "edge_types": list(EDGE_TYPES),
            "layer_features": list(LAYER_FEATURES),
            "gnn_in_channels": method.gnn_.in_channels,
        },
        "training_summary": {
            **method.history_,
            "fit_seconds": method.fit_seconds_,
            "training_workloads": len(method.training_workload_ids_),
        },
    }


def _graph_params(method: GraphPrediction) -> dict[str, Any]:
    """``params.json`` of a fitted CPU predictor (see the module docstring)."""
    return {
        "allreduce": method.allreduce_.to_dict() if method.allreduce_ is not None else None,
        "epoch": method.epoch_model_.to_dict(),
        "gnn_config": method.gnn_.config(),
        "gnn_prior": method.prior,
        "gnn_edges": method.edges,
        "gnn_system_nodes": method.system_nodes,
        "layerwise_min_samples": method.layerwise_.min_samples,
        "layerwise_band": (
            None if method.layerwise_.band_ is None else method.layerwise_.band_.to_dict()
        ),
        "training_devices": list(method.training_devices_),
        "training_workload_ids": list(method.training_workload_ids_),
        "training_domain": (
            None if method.training_domain_ is None else method.training_domain_.to_dict()
        ),
    }


def publish_bundle(
    root: Path,
    name: str,
    version: str | None,
    *,
    write_models: Callable[[Path], None],
    params: dict[str, Any],
    manifest: dict[str, Any],
    training_data: dict | None = None,
    metrics: dict | None = None,
    calibration: IntervalCalibration | None = None,
) -> Path:
    """Publish a new bundle version of any predictor kind and point ``latest`` at it.

    The one writer of bundles (:func:`save_graph_bundle`, and
    :func:`~scaledl.registry.kernel_bundle.save_kernel_bundle` for the GPU predictor): it
    writes the model files, ``params.json``, the optional ``calibration.json`` and the
    manifest (the common fields, the SHA-256 and size of every file) into a temporary folder
    that becomes ``<root>/<name>/<version>`` durably (:func:`_new_version`).

    Args:
        root: registry root directory.
        name: predictor name (a directory under ``root``).
        version: version string; ``None``: the UTC time ``YYYYMMDDTHHMMSSffffffZ``.
        write_models: writes the kind's model files into the folder it is given.
        params: the content of ``params.json``.
        manifest: the kind's own manifest fields (``feature_schema``, ``training_summary``,
            ``predictor_kind`` for a kernel bundle), merged with the common ones.
        training_data: description of the training data (``sha256``, ``workloads``, ...).
        metrics: evaluation metrics to record in the manifest.
        calibration: the interval calibration to store, or ``None``.

    Returns:
        The bundle directory.

    Raises:
        ValueError: the version exists with another manifest, or the calibration came from
            other profile tables than ``training_data["sha256"]``.
        OSError: writing failed (``ENOSPC``, ``EROFS``...); nothing is published.
    """
    check_calibration_data(calibration, (training_data or {}).get("sha256", ""), str(root))
    now = dt.datetime.now(dt.UTC)
    version = version or now.strftime("%Y%m%dT%H%M%S%fZ")
    target = Path(root) / name / version
    with _new_version(target) as tmp:
        write_models(tmp)
        _write_json(tmp / "params.json", params)
        if calibration is not None:
            calibration.write(tmp / CALIBRATION_FILE)
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir())}
        common = {
            "format_version": FORMAT_VERSION,
            "name": name,
            "version": version,
            "created_at": now.isoformat(),
            "training_data": training_data or {},
            "library_versions": library_versions(),
            "metrics": metrics or {},
            "files": files,
            "file_sizes": _file_sizes(tmp, files),
        }
        _write_json(tmp / "manifest.json", {**manifest, **common})
    return target


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """A bundle's JSON file (indented, sorted keys: the bytes its checksum covers)."""
    path.write_text(json.dumps(data, indent=2, sort_keys=True))


def check_calibration_data(
    calibration: IntervalCalibration | None, training_sha256: str, where: str
) -> None:
    """Refuse a calibration computed on other profile tables than the predictor's.

    Args:
        calibration: the calibration (``None``: nothing to check).
        training_sha256: the bundle's ``training_data.sha256`` (``""``: not recorded).
        where: the bundle or registry, named in the error.

    Raises:
        scaledl.models.intervals.CalibrationError: both hashes are recorded and differ (a
            ``ValueError``).
    """
    if calibration is None or not training_sha256 or not calibration.training_data_sha256:
        return
    if calibration.training_data_sha256 != training_sha256:
        raise CalibrationError(
            f"{where}: the calibration ({calibration.source or 'calibration'}) was computed on "
            f"profile tables {calibration.training_data_sha256[:12]}..., the predictor was "
            f"trained on {training_sha256[:12]}...: evaluate the same data first"
        )


@contextmanager
def _new_version(target: Path) -> Iterator[Path]:
    """A temporary folder beside ``target`` that becomes ``target`` durably on success.

    Temporaries left by publishes that died (``kill -9``, power loss) are removed first. On an
    exception the folder is removed and nothing is published. On success the folder (every
    file fsynced) is renamed onto ``target`` and ``latest`` of the predictor name points at it.
    When ``target`` exists already (a publish that crashed after its rename, before
    ``latest``), the existing version is verified and, when its manifest is the one this
    publish wrote, finished: ``latest`` is written; so a crashed publish can be retried.

    Raises:
        ValueError: ``target`` exists already with another manifest (another training, other
            metrics).
        BundleError: ``target`` exists already and does not verify.
        OSError: writing failed (``ENOSPC``, ``EROFS``...); nothing is published.
    """
    remove_stale_temps(target.parent)
    with atomic_dir(target, if_exists=_finish_existing) as tmp:
        yield tmp
    _write_latest(target.parent, target.name)


def _finish_existing(tmp: Path, target: Path) -> None:
    """Accept an existing version whose verified manifest is the one written in ``tmp``."""
    try:
        existing = read_manifest(target)
    except BundleError as exc:
        raise BundleError(
            f"{target}: bundle version {target.name!r} exists already and does not verify "
            f"({exc}); remove it to publish it again"
        ) from exc
    if existing != _read_bundle_json(tmp / "manifest.json", MAX_MANIFEST_BYTES, "unreadable"):
        raise ValueError(
            f"{target}: bundle version {target.name!r} exists already with another manifest "
            "(another training or other metrics)"
        )


def _write_latest(name_dir: Path, version: str) -> None:
    write_atomic(name_dir / "latest", version + "\n")


def _regular_file(
    path: Path, size: int | None = None, limit: int | None = None, what: str = ""
) -> None:
    """Refuse a path that is not a regular file (after symlinks) or has the wrong size.

    A symlink or hardlink to a regular file is fine (DVC's cache layouts); a FIFO, a device
    (``/dev/zero``), a directory or a dangling link is refused before anything reads it.

    Args:
        path: the file.
        size: its size in bytes according to the manifest (``None``: not recorded).
        limit: the largest size accepted (``None``: any).
        what: put before the reason in the message (e.g. ``"unreadable manifest: "``).

    Raises:
        BundleError: naming the file and what it is.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        reason = "a dangling symlink" if os.path.islink(path) else "missing"
        raise BundleError(f"{path}: {what}{reason}") from None
    except OSError as exc:
        raise BundleError(f"{path}: {what}cannot stat: {exc}") from exc
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "a FIFO, device or socket"
        raise BundleError(f"{path}: {what}not a regular file ({kind}): refused unread")
    if size is not None and info.st_size != size:
        raise BundleError(
            f"{path}: {what}{info.st_size} bytes, the manifest says {size}: the bundle was "
            "altered or truncated"
        )
    if limit is not None and info.st_size > limit:
        raise BundleError(f"{path}: {what}{info.st_size} bytes, more than {limit}: refused unread")


def _read_latest(name_dir: Path) -> str | None:
    """The version a name directory's ``latest`` names (``None``: there is no ``latest``).

    ``latest`` is a one-line file; a symlink to such a file is read like it.

    Raises:
        BundleError: ``latest`` is a directory, a symlink to one, a FIFO, a device, a dangling
            symlink, too big, not UTF-8, or names no plain version directory name.
    """
    latest = Path(name_dir) / "latest"
    if not os.path.lexists(latest):
        return None
    try:
        _regular_file(latest, limit=_MAX_LATEST_BYTES)
    except BundleError as exc:
        raise BundleError(
            f"{exc}; `latest` must be a one-line file naming a version (not a symlink to a "
            "version directory)"
        ) from None
    try:
        # A byte-order mark (an editor's UTF-8 "with BOM") is no part of the name, as CRLF.
        version = read_text(latest, _MAX_LATEST_BYTES).removeprefix("\ufeff").strip()
    except (OSError, UnsafeInputError) as exc:
        raise BundleError(f"{latest}: unreadable: {exc}") from exc
    if version in ("", ".", "..") or Path(version).name != version:
        raise BundleError(f"{latest}: names {excerpt(version)}, not a version directory name")
    return version


def latest_bundle(name_dir: Path) -> Path | None:
    """The version directory a name directory's ``latest`` names: the one way to resolve it.

    Args:
        name_dir: ``<registry>/<name>``.

    Returns:
        ``<name_dir>/<version>``; ``None`` when there is no ``latest`` (nothing registered).

    Raises:
        BundleError: ``latest`` is unusable (see :func:`_read_latest`), names a version that
            has no ``manifest.json`` or one that lies outside the registry (:func:`check_inside`).
    """
    version = _read_latest(name_dir)
    if version is None:
        return None
    bundle = Path(name_dir) / version
    check_inside(bundle, Path(name_dir).absolute().parent)
    if not (bundle / "manifest.json").exists():
        held = sorted(
            p.name
            for p in Path(name_dir).iterdir()
            if p.is_dir() and not p.name.startswith(".") and (p / "manifest.json").exists()
        )
        raise BundleError(
            f"{Path(name_dir) / 'latest'}: names version {version!r}, which has no manifest.json"
            f" (versions here: {bounded(', '.join(held), 200) if held else 'none'})"
        )
    return bundle


def check_inside(version_dir: Path, root: Path) -> None:
    """Refuse a registry version folder that resolves outside its registry root.

    A version folder that is a symlink to elsewhere would serve and list files the registry
    does not hold. Symlinked *files* stay allowed (DVC's cache layouts).

    Args:
        version_dir: ``<root>/<name>/<version>``.
        root: the registry root (links in it resolved too).

    Raises:
        BundleError: naming the folder, where it resolves and the root.
    """
    resolved = Path(version_dir).resolve()
    if not resolved.is_relative_to(Path(root).resolve()):
        raise BundleError(
            f"{version_dir}: outside the registry root, refused (it resolves to {resolved}; "
            f"the root is {Path(root).resolve()}): a version folder must lie inside its registry"
        )


def resolve_bundle(path: Path) -> Path:
    """The bundle directory of ``path``: a bundle, or a name directory (follows ``latest``).

    A bundle in a registry name directory (one holding ``latest``) must lie inside the
    registry (:func:`check_inside`); a bundle elsewhere (a candidate) is taken as named.

    Raises:
        BundleError: no bundle there, ``latest`` is unusable (see :func:`_read_latest`), or a
            registry version outside its registry.
    """
    path = Path(path)
    if os.path.lexists(path / "manifest.json"):
        parent = path.absolute().parent  # lexical: `v2` given from inside its name directory
        if os.path.lexists(parent / "latest"):
            check_inside(path, parent.parent)
        return path
    bundle = latest_bundle(path)
    if bundle is not None:
        return bundle
    raise BundleError(_no_bundle_message(path))


def _no_bundle_message(path: Path) -> str:
    """Why ``path`` is no bundle, and what to give instead (see :func:`resolve_bundle`).

    A folder of versions without ``latest`` (copied without it) names its versions; a registry
    root names its predictors; a missing path or a file says so.
    """
    head = f"{path}: not a predictor bundle (no manifest.json) nor a name directory"
    if not path.exists():
        return f"{head}: no such file or folder"
    if not path.is_dir():
        return f"{head}: a file, not a folder"
    subdirs = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    versions = [p.name for p in subdirs if (p / "manifest.json").exists()]
    if versions:
        return (
            f"{head}: it holds versions {bounded(', '.join(versions), 200)} but no `latest` "
            f"file naming the current one; give a version folder ({path / versions[-1]}) or "
            f"write a version's name into {path / 'latest'}"
        )
    names = [p.name for p in subdirs if os.path.lexists(p / "latest")]
    if names:
        return (
            f"{head}: a registry root holding {bounded(', '.join(names), 200)}; give a name "
            f"directory ({path / names[0]})"
        )
    return head


def read_manifest(bundle: Path) -> dict[str, Any]:
    """The manifest of a bundle, after checking its format and every file's checksum.

    Every file is checked to be a regular file (a symlink or hardlink to one is fine: DVC's
    cache layouts) of the size the manifest records (``file_sizes``; bundles written before it
    was recorded skip the size) before it is hashed, so a FIFO or ``/dev/zero`` is refused
    without being read.

    Raises:
        BundleError: the manifest is unreadable, or a file is missing, not a regular file, of
            another size or altered.
        IncompatibleBundleError: format version or scikit-learn version differ.
    """
    path = Path(bundle) / "manifest.json"
    _regular_file(path, limit=MAX_MANIFEST_BYTES, what="unreadable manifest: ")
    manifest = _read_bundle_json(path, MAX_MANIFEST_BYTES, "unreadable manifest")
    if not isinstance(manifest, dict):
        raise BundleError(f"{path}: unreadable manifest: not a JSON object")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise IncompatibleBundleError(
            f"{path}: field 'format_version' is {excerpt(manifest.get('format_version'))}; "
            f"this ScaleDL reads {FORMAT_VERSION}"
        )
    files, sizes = manifest.get("files"), manifest.get("file_sizes", {})
    if not isinstance(files, dict):
        raise BundleError(
            f"{path}: field 'files' (value {excerpt(files)}): expected name -> sha256"
        )
    if not isinstance(sizes, dict) or not all(_is_size(v) for v in sizes.values()):
        raise BundleError(
            f"{path}: field 'file_sizes' (value {excerpt(sizes)}): expected name -> bytes"
        )
    kind = manifest.get("predictor_kind", "graph")
    if kind not in PREDICTOR_KINDS:
        raise IncompatibleBundleError(
            f"{path}: field 'predictor_kind' is {excerpt(kind)}; this ScaleDL reads "
            f"{sorted(PREDICTOR_KINDS)}"
        )
    required = list(PREDICTOR_KINDS[kind])
    for i, name in enumerate(required):
        legacy = LEGACY_FILES.get(name) if kind == "graph" else None
        if name not in files and legacy in files:
            required[i] = legacy  # a bundle written before `name`: read the old file
        elif name not in files:
            raise BundleError(
                f"{Path(bundle) / name}: not listed in {path} field 'files': the loader reads it, "
                "so an unverified file is refused"
            )
    known = (*required, *OPTIONAL_BUNDLE_FILES)
    for name, expected in files.items():
        if name not in known:
            raise BundleError(
                f"{Path(bundle) / excerpt(name)[1:-1]}: listed in {path} field 'files' but not a "
                f"bundle file ({', '.join(known)})"
            )
        file = Path(bundle) / name
        _regular_file(file, size=sizes.get(name), what="listed in the manifest but ")
        actual = sha256_file(file)
        if actual != expected:
            raise BundleError(
                f"{file}: checksum mismatch (manifest {str(expected)[:12]}..., file "
                f"{actual[:12]}...): the bundle was altered or truncated"
            )
    versions = manifest.get("library_versions")
    saved = str(versions.get("scikit-learn", ""))[:40] if isinstance(versions, dict) else ""
    # Only skops files hold scikit-learn objects; NumPy arrays and tensors do not.
    skops_files = any(str(name).endswith(".skops") for name in files)
    current = library_versions()["scikit-learn"] if skops_files else saved
    if saved.split(".")[:2] != current.split(".")[:2]:
        raise IncompatibleBundleError(
            f"{path}: written with scikit-learn {saved}, this environment has {current}; "
            "retrain or install the same minor version"
        )
    return manifest


def _read_bundle_json(path: Path, max_bytes: int, what: str) -> Any:
    """A bundle's JSON file through :func:`scaledl.io.safe.read_json`: regular, bounded, finite.

    Args:
        path: the file.
        max_bytes: the largest size accepted, in bytes.
        what: the reason's first words (``unreadable manifest``).

    Raises:
        BundleError: missing, not a regular file, over ``max_bytes``, nested deeper than
            :data:`scaledl.io.safe.MAX_JSON_DEPTH`, a non-finite number or not JSON (naming
            the file).
    """
    try:
        return read_json(path, max_bytes=max_bytes)
    except (OSError, UnsafeInputError) as exc:
        reason = str(exc).removeprefix(f"{path}: ")
        raise BundleError(f"{path}: {what}: {reason}") from None


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _file_sizes(directory: Path, files: dict[str, str]) -> dict[str, int]:
    return {name: (Path(directory) / name).stat().st_size for name in files}


@dataclass(frozen=True)
class BundleParts:
    """A verified bundle's deserialised files, before the GNN module is built.

    Attributes:
        path: the bundle directory.
        manifest: its manifest.
        layerwise: the fitted layer-wise models (a CPU bundle's: a
            :class:`~scaledl.models.layer_time.LayerwisePredictor`, no scikit-learn).
        params: ``params.json``.
        gnn_state: the GNN's state dict (tensors only).
        domain: the training domain (``None`` for bundles written before it was recorded).
        calibration: the interval calibration (``None`` when the bundle has none).
        kind: ``graph`` (CPU predictor) or ``kernel`` (GPU predictor, any device of the device
            table).
        operators: a kernel bundle's operator models and correction (``None`` otherwise).
    """

    path: Path
    manifest: dict[str, Any]
    layerwise: LayerwisePredictor | LayerwiseModel
    params: dict[str, Any]
    gnn_state: dict[str, torch.Tensor]
    domain: TrainingDomain | None = None
    calibration: IntervalCalibration | None = None
    kind: str = "graph"
    operators: dict[str, Any] | None = None

    @property
    def training_devices(self) -> list[str]:
        """Devices the predictor was trained on."""
        return list(self.params["training_devices"])


def read_graph_bundle(bundle: Path, manifest: dict[str, Any]) -> BundleParts:
    """Verify a CPU (``graph``) bundle and deserialise its files (no PyTorch Geometric import).

    Args:
        bundle: a resolved bundle directory (:func:`resolve_bundle`).
        manifest: its :func:`read_manifest`.

    Returns:
        The :class:`BundleParts`.

    Raises:
        BundleError: verification or deserialisation failed (naming the bundle or file).
    """
    # torch: listing and verifying bundles need none.
    import torch

    from scaledl.models.roofline import RooflineBand

    _check_layer_types(bundle, manifest)
    layer_file = bundle / LAYER_FILE
    if LAYER_FILE in manifest["files"]:
        try:
            models = read_layer_arrays(layer_file)
        except LayerArraysError as exc:
            raise BundleError(str(exc)) from None
    else:  # written before layerwise.npz: skops (imports skops and scikit-learn)
        layer_file = bundle / LEGACY_FILES[LAYER_FILE]
        models = load_skops(layer_file, TRUSTED_TYPES)
    params, checked = read_params(bundle)
    try:
        if not isinstance(models, dict) or "*" not in models:
            raise ValueError("layer-wise models: no generic '*' pair")
        band = params.get("layerwise_band")
        layerwise = LayerwisePredictor(
            models,
            band_=None if band is None else RooflineBand.from_dict(band),
            min_samples=params["layerwise_min_samples"],
        )
        state = torch.load(bundle / "gnn.pt", weights_only=True, map_location="cpu")
    except Exception as exc:
        raise BundleError(f"{bundle}: cannot load predictor: {bounded(str(exc), 300)}") from exc
    _check_loaded_numbers(bundle, layer_file, layerwise, state)
    calibration = read_calibration(bundle, manifest)
    return BundleParts(
        bundle, manifest, layerwise, params, state, checked.training_domain, calibration
    )


def load_skops(path: Path, trusted: frozenset[str]) -> Any:
    """Load a verified skops file: allow-listed types only, every tree's structure checked.

    The one skops loader of every bundle kind (CPU and GPU bundles, layout calibrations):
    :func:`check_skops_types`, then ``skops.io.load``, then
    :func:`~scaledl.registry.trees.check_trees` before anything predicts.

    Args:
        path: the ``.skops`` file (its size and checksum verified by the caller).
        trusted: the exact type names allowed beyond skops' defaults.

    Returns:
        The loaded object.

    Raises:
        BundleError: a type outside the allow-list, an unreadable file, or a tree whose
            structure prediction cannot walk (naming the file, the estimator, the node, the
            field and the value).
    """
    # skops: only reading a bundle's fitted models needs it.
    import skops.io as sio

    check_skops_types(path, trusted)
    try:
        loaded = sio.load(path, trusted=sorted(trusted))
    except Exception as exc:
        raise BundleError(f"{path}: cannot load: {bounded(str(exc), 300)}") from exc
    try:
        check_trees(loaded, str(path))
    except TreeStructureError as exc:
        raise BundleError(str(exc)) from None
    return loaded


def _check_layer_types(bundle: Path, manifest: dict[str, Any]) -> None:
    """Refuse a CPU bundle whose GNN was trained on another layer-type vocabulary.

    The GNN's input width includes one column per layer type, so a bundle written with another
    :data:`~scaledl.graph.units.LAYER_TYPES` cannot read today's node features.

    Raises:
        IncompatibleBundleError: ``feature_schema.layer_types`` differs (both lists named).
    """
    # scaledl.graph.units imports torch: deferred, as read_bundle defers torch
    from scaledl.graph.units import LAYER_TYPES

    schema = manifest.get("feature_schema")
    types = schema.get("layer_types") if isinstance(schema, dict) else None
    if types != list(LAYER_TYPES):
        raise IncompatibleBundleError(
            f"{bundle / 'manifest.json'}: field 'feature_schema.layer_types' is "
            f"{excerpt(types)}; this ScaleDL's layer types are {list(LAYER_TYPES)}: retrain the "
            "predictor (`scaledl train`)"
        )


def check_skops_types(path: Path, trusted: frozenset[str]) -> None:
    """Refuse a skops file naming a type beyond skops' safe defaults and ``trusted``.

    Args:
        path: the ``.skops`` file (verified by :func:`read_manifest`).
        trusted: the exact type names allowed beyond skops' defaults (no prefixes).

    Raises:
        BundleError: the file cannot be read, or names types outside the allow-list (listed).
    """
    # skops: only reading a bundle's fitted models needs it.
    import skops.io as sio

    try:
        untrusted = sio.get_untrusted_types(file=path)
    except Exception as exc:
        raise BundleError(f"{path}: cannot read: {bounded(str(exc), 300)}") from exc
    refused = sorted(set(untrusted) - trusted)
    if refused:
        raise BundleError(
            f"{path}: refuses to load types outside the allow-list: {excerpt(refused)} "
            f"(allowed beyond skops' defaults: {sorted(trusted)})"
        )


def read_params(bundle: Path, kind: str = "graph") -> tuple[dict[str, Any], Any]:
    """A bundle's ``params.json``, validated as its kind's model (:mod:`scaledl.registry.params`).

    Args:
        bundle: the bundle directory.
        kind: the manifest's ``predictor_kind``.

    Returns:
        ``(params, model)``: the decoded mapping and its validated
        :class:`~scaledl.registry.params.GraphParams` or ``KernelParams``.

    Raises:
        BundleError: unreadable, not UTF-8, not JSON, a non-finite number, or not the model
            (naming the file, the field and the value).
    """
    # the models load torch and scikit-learn; listing and verifying bundles need neither.
    from scaledl.registry.params import check_params

    params_file = bundle / "params.json"
    params = _read_bundle_json(params_file, MAX_MANIFEST_BYTES, "unreadable")
    try:
        return params, check_params(params, kind, str(params_file))
    except ValueError as exc:
        raise BundleError(str(exc)) from None


def read_calibration(bundle: Path, manifest: dict[str, Any]) -> IntervalCalibration | None:
    """A bundle's interval calibration (``None`` when the manifest does not list one).

    Raises:
        BundleError: the calibration is malformed (naming the file and field).
    """
    if CALIBRATION_FILE not in manifest["files"]:
        return None
    try:
        return IntervalCalibration.read(bundle / CALIBRATION_FILE)
    except ValueError as exc:
        raise BundleError(str(exc)) from exc


def _check_loaded_numbers(
    bundle: Path, layer_file: Path, layerwise: LayerwisePredictor, state
) -> None:
    """Refuse loaded model numbers that are not finite or out of their range.

    ``params.json`` is checked when read (:func:`read_params`: no ``NaN``/``Infinity``, the
    epoch model's overhead coefficients and the all-reduce model's latency and per-byte cost
    non-negative); here: every layer regressor's fitted arrays are finite with non-negative
    work coefficients and positive scales, and every GNN tensor is finite (the clamp buffers
    ``delta_min``/``delta_max`` may be infinite, an open clamp, never NaN).

    Raises:
        BundleError: naming the file, the field and a bounded excerpt of the value.
    """
    # torch: only reading the GNN weights needs it.
    import torch

    _check_regressors(layer_file, layerwise.models_)
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise BundleError(f"{bundle / 'gnn.pt'}: not a state dict of tensors")
    for key, tensor in state.items():
        ok = ~torch.isnan(tensor) if key in _OPTIONAL_GNN_BUFFERS else torch.isfinite(tensor)
        if not bool(ok.all()):
            raise BundleError(f"{bundle / 'gnn.pt'}: tensor {excerpt(key)} holds non-finite values")


def _check_regressors(path: Path, models: Any) -> None:
    """Refuse layer regressors whose fitted arrays are not finite or out of range.

    In range: ``coef_`` in ``[0, MAX_LAYER_MS]``, ``|intercept_| <= MAX_LAYER_MS``, ``scale_``
    positive, ``correction_range_`` a ``(low, high)`` with ``-MAX_LOG_CORRECTION <= low <=
    high <= MAX_LOG_CORRECTION``.

    Raises:
        BundleError: naming the file, the regressor, the field and a bounded excerpt.
    """
    try:
        pairs = [(t, d, reg) for t, pair in models.items() for d, reg in (pair or {}).items()]
    except (AttributeError, TypeError) as exc:
        raise BundleError(f"{path}: not a mapping of layer type -> regressors: {exc}") from exc
    for layer_type, direction, reg in pairs:
        if reg is None:
            continue
        try:
            arrays = {
                name: np.asarray(getattr(reg, name, np.nan), dtype=float)
                for name in ("coef_", "intercept_", "scale_", "correction_range_")
            }
        except (TypeError, ValueError) as exc:
            raise BundleError(f"{path}: regressor {layer_type}/{direction}: {exc}") from exc
        bad = [k for k, v in arrays.items() if not np.isfinite(v).all()]
        bad += ["coef_"] * bool(((arrays["coef_"] < 0) | (arrays["coef_"] > MAX_LAYER_MS)).any())
        bad += ["intercept_"] * bool((np.abs(arrays["intercept_"]) > MAX_LAYER_MS).any())
        bad += ["scale_"] * bool((arrays["scale_"] <= 0).any())
        low_high = arrays["correction_range_"]
        bad += ["correction_range_"] * bool(
            low_high.shape != (2,)
            or not -MAX_LOG_CORRECTION <= low_high[0] <= low_high[1] <= MAX_LOG_CORRECTION
        )
        if bad:
            raise BundleError(
                f"{path}: regressor {excerpt(layer_type)}/{excerpt(direction)} field {bad[0]!r} "
                f"(value {excerpt(arrays[bad[0]].tolist())}): not finite or out of range"
            )


def build_graph_method(parts: BundleParts) -> GraphPredictor:
    """The fitted ScaleDL method of a read CPU bundle (builds the GNN: imports PyTorch Geometric).

    Args:
        parts: from :func:`read_graph_bundle`.

    Returns:
        The :class:`~scaledl.models.graph_prediction.GraphPredictor` (GNN in eval mode): it
        predicts what the saved :class:`~scaledl.models.methods.GraphMethod` did, without
        scikit-learn or SciPy.

    Raises:
        BundleError: the saved weights do not fit the GNN of the saved configuration, or the
            saved GNN settings are invalid.
    """
    # the models load torch and PyTorch Geometric (about 1.5 s); only the first prediction
    # needs them, listing and verifying bundles neither.
    from scaledl.models.gnn import RuntimeGNN
    from scaledl.models.graph_prediction import GraphPredictor

    params = parts.params
    try:
        gnn = RuntimeGNN(**params["gnn_config"])
        # Bundles written before the correction clamp existed lack its two buffers: they load
        # with the clamp open (+-inf), which is how they were evaluated. Anything else missing
        # or unexpected is an error.
        missing, unexpected = gnn.load_state_dict(parts.gnn_state, strict=False)
        if unexpected or set(missing) - _OPTIONAL_GNN_BUFFERS:
            raise ValueError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
        allreduce, epoch_model = system_models(params)
    except Exception as exc:
        raise BundleError(f"{parts.path / 'gnn.pt'}: cannot build predictor: {exc}") from exc
    gnn.eval()
    try:
        return GraphPredictor(
            mode="scaledl",
            # Bundles written before the critical-path prior corrected the plain sum.
            prior=params.get("gnn_prior", "sum"),
            edges=params.get("gnn_edges", True),
            system_nodes=params.get("gnn_system_nodes", True),
            layerwise=parts.layerwise,
            allreduce=allreduce,
            gnn=gnn,
            epoch_model=epoch_model,
            training_devices=params["training_devices"],
            # Bundles written before the ids were recorded have none.
            training_workload_ids=params.get("training_workload_ids", []),
            history=parts.manifest.get("training_summary"),
            training_domain=parts.domain,
        )
    except ValueError as exc:
        raise BundleError(f"{parts.path / 'params.json'}: cannot build predictor: {exc}") from exc


def system_models(params: dict[str, Any]) -> tuple[AllReduceTime | None, EpochTime]:
    """The all-reduce model (``None``: trained without communication) and the epoch model.

    Args:
        params: a bundle's ``params.json``.

    Raises:
        ValueError: a malformed model (naming the field and value); KeyError: one is missing.
    """
    allreduce = AllReduceTime.from_dict(params["allreduce"]) if params["allreduce"] else None
    return allreduce, EpochTime.from_dict(params["epoch"])


def register_bundle(
    bundle: Path,
    root: Path,
    name: str = "scaledl",
    metrics: dict | None = None,
    calibration: IntervalCalibration | None = None,
) -> Path:
    """Copy a verified bundle into a registry as a new version and point ``latest`` at it.

    The version keeps the bundle's own version string (its training time); the manifest's
    ``name`` and ``metrics`` are set, every other file is copied byte for byte (their checksums
    stay valid). With ``calibration``, ``calibration.json`` is written (replacing the bundle's)
    and listed in the manifest with its checksum: this is how the pipeline attaches the
    evaluation's interval calibration to the predictor it registers.

    Args:
        bundle: the bundle to register (e.g. a candidate).
        root: registry root.
        name: predictor name.
        metrics: metrics to record in the manifest (replacing the bundle's).
        calibration: the interval calibration to store, or ``None`` to keep the bundle's.

    Returns:
        The registered bundle directory.

    Registering is idempotent, so a publish that crashed (after renaming the version into
    place, before ``latest``) is finished by running it again: an existing version whose
    verified manifest is the one this call writes is kept and ``latest`` points at it.

    Raises:
        BundleError: the bundle does not verify, or the registry holds that version damaged.
        ValueError: the registry already holds that version with another manifest (other
            metrics or calibration), or the calibration came from other profile tables than
            the bundle's training data.
        OSError: writing failed (``ENOSPC``, ``EROFS``...); nothing is published.
    """
    bundle = resolve_bundle(bundle)
    manifest = read_manifest(bundle)
    training = manifest.get("training_data")
    sha = training.get("sha256", "") if isinstance(training, dict) else ""
    check_calibration_data(calibration, sha, str(bundle))
    version = manifest["version"]
    target = Path(root) / name / version
    with _new_version(target) as tmp:
        files = dict(manifest["files"])
        for file in files:
            if not (calibration is not None and file == CALIBRATION_FILE):
                shutil.copy2(bundle / file, tmp / file)
        if calibration is not None:
            files[CALIBRATION_FILE] = sha256_file(calibration.write(tmp / CALIBRATION_FILE))
        manifest = {
            **manifest,
            "name": name,
            "metrics": metrics or {},
            "files": files,
            "file_sizes": _file_sizes(tmp, files),
        }
        _write_json(tmp / "manifest.json", manifest)
    return target


def list_predictors(root: Path | None = None) -> pd.DataFrame:
    """Every bundle version under a registry root, each verified as :func:`read_manifest` does.

    The root defaults to ``<data>/predictors`` (:class:`scaledl.layout.DataLayout`).

    A name is any directory of the root that is not hidden, a version any directory of a name
    directory that is not hidden (publishes write into hidden temporary directories). A version
    that fails verification is listed with ``status`` ``"broken"`` (or ``"incompatible"``:
    another format or scikit-learn version) and the reason, never skipped and never fatal. A
    ``latest`` that names a missing version (dangling) is listed as a row of that version with
    status ``"missing"``; an unusable ``latest`` (a directory, a symlink to one, a FIFO...) as a
    row of version ``"latest"`` with status ``"broken"``.

    Returns:
        One row per version, columns :data:`LIST_COLUMNS`: ``name``, ``version``, ``latest``
        (bool), ``status`` (``"ok"``, ``"broken"``, ``"incompatible"``, ``"missing"``),
        ``problem`` (the reason, ``""`` when ok), ``created_at``, ``training_workloads``
        (nullable ``Int64``: ``<NA>`` without a readable count) and ``path``.

    Raises:
        BundleError: ``root`` is a file (a missing root lists nothing).
    """
    if root is None:
        root = DataLayout.from_env().predictors_dir
    rows = []
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise BundleError(f"{root}: not a registry root (a file, not a folder)")
    names = (
        sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if root.exists()
        else []
    )  # hidden: a trace cache beside a bundle given directly (scaledl.graph.trace_cache)
    for name_dir in names:
        try:
            latest, latest_problem = _read_latest(name_dir), ""
        except Exception as exc:  # listed, never fatal: one bad name hides no other
            latest, latest_problem = None, _one_line(exc, name_dir / "latest")
        versions = sorted(
            p for p in name_dir.iterdir()
            if p.is_dir() and p.name != "latest" and not p.name.startswith(".")
        )  # fmt: skip
        for bundle in versions:
            rows.append(_list_row(name_dir.name, bundle, bundle.name == latest, root))
        if latest_problem:
            rows.append(_problem_row(name_dir, "latest", "broken", latest_problem))
        elif latest is not None and latest not in {v.name for v in versions}:
            problem = f"{name_dir / 'latest'}: names version {latest!r}, which does not exist"
            rows.append(_problem_row(name_dir, latest, "missing", problem))
    # Nullable integers: a row without a manifest leaves the others' counts integers.
    table = pd.DataFrame(rows, columns=list(LIST_COLUMNS))
    return table.astype({"training_workloads": "Int64"})


def _list_row(name: str, bundle: Path, is_latest: bool, root: Path) -> dict[str, Any]:
    try:
        check_inside(bundle, root)
        manifest, status, problem = read_manifest(bundle), "ok", ""
    except IncompatibleBundleError as exc:
        manifest, status, problem = {}, "incompatible", _one_line(exc, bundle)
    except Exception as exc:  # any error: listed broken, never fatal (hides no other version)
        manifest, status, problem = {}, "broken", _one_line(exc, bundle)
    data = manifest.get("training_data")
    count = data.get("workloads") if isinstance(data, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count < 2**63:
        count = None  # listed, never fatal: the column is a nullable int64
    return {
        "name": name,
        "version": bundle.name,
        "latest": is_latest,
        "status": status,
        "problem": problem,
        "created_at": manifest.get("created_at", ""),
        "training_workloads": count,
        "path": str(bundle),
    }


def _one_line(exc: Exception, where: Path) -> str:
    """An error's first line, bounded; other than a :class:`BundleError`, with ``where``."""
    text = (str(exc).splitlines() or [""])[0]
    if not isinstance(exc, BundleError):
        text = f"{where}: {type(exc).__name__}: {text}".rstrip(": ")
    return bounded(text, 300)


def _problem_row(name_dir: Path, version: str, status: str, problem: str) -> dict[str, Any]:
    return {
        "name": name_dir.name,
        "version": version,
        "latest": True,
        "status": status,
        "problem": problem,
        "created_at": "",
        "training_workloads": None,
        "path": str(name_dir / "latest"),
    }
