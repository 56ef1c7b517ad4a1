"""Predictor bundles: save, verify and load trained ScaleDL predictors without running their code.

A bundle is a directory ``<root>/<name>/<version>/`` holding:

* ``manifest.json``: ``format_version``, ``name``, ``version``, ``created_at``,
  ``training_data`` (SHA-256 over the validated profile tables, workload count, families,
  devices; the DVC version of ``data/`` is the ``data.dvc`` commit that holds the bundle),
  ``feature_schema``, ``library_versions``, ``metrics`` and ``files`` (SHA-256 of every other
  file);
* ``layerwise.skops``: the layer-wise regressors, in skops' safe format (no pickle);
* ``gnn.pt``: the GNN state dict, loaded with ``torch.load(weights_only=True)``;
* ``params.json``: the all-reduce model, epoch model, GNN configuration, training devices, the
  ids of the training workloads and the training domain (:mod:`scaledl.models.domain`, what
  the domain guard checks predictions against);
* ``calibration.json`` (optional): the conformal calibration of the prediction intervals
  (:class:`~scaledl.models.intervals.IntervalCalibration`), added when the bundle is saved or
  registered with one; a bundle without it predicts without intervals.

``<root>/<name>/latest`` is a one-line text file naming the newest version. Loading checks the
format version, every checksum and the scikit-learn version *before* deserialising anything, and
deserialises only allow-listed types; any mismatch raises :class:`BundleError` (or a subclass)
naming the file.

The loader knows the files it reads (:data:`BUNDLE_FILES`, and :data:`OPTIONAL_BUNDLE_FILES`
when the manifest lists them): each must be listed in the manifest's ``files`` with its
SHA-256, so a file edited and dropped from the manifest is refused, not trusted (an optional
file the manifest does not list is never read). A manifest entry that is not a plain file name
of the bundle directory, or that the loader does not know, is refused too (a bundle from
another format). Other files in the directory are never read. :func:`list_predictors` lists a
broken version with its reason instead of failing, so one damaged version never hides the good
ones.

Loading is two steps so that a fresh process is fast: :func:`read_bundle` verifies the bundle and
deserialises every file (skops, ``torch.load``), without importing PyTorch Geometric;
:func:`build_method` builds the GNN module around the loaded weights (this imports PyTorch
Geometric, about 1.5 s of imports) and the fitted method. :class:`~scaledl.registry.Predictor`
does the second step at its first prediction.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:  # the loaders import these on use: `import scaledl` stays cheap
    import torch

    from scaledl.models.domain import TrainingDomain
    from scaledl.models.intervals import IntervalCalibration
    from scaledl.models.layerwise import LayerwiseModel
    from scaledl.models.methods import GraphMethod

FORMAT_VERSION = 1
_LIBRARIES = ("scaledl", "torch", "torch_geometric", "scikit-learn", "skops", "transformers")
# Types a layer-wise file may contain beyond skops' defaults (sklearn estimators, numpy).
_TRUSTED_PREFIXES = ("sklearn.", "numpy.", "scaledl.models.layerwise.LayerTimeRegressor")


_OPTIONAL_GNN_BUFFERS = {"delta_min", "delta_max"}
#: The files the loader reads besides ``manifest.json``; each must be listed in its ``files``.
BUNDLE_FILES = ("gnn.pt", "layerwise.skops", "params.json")
#: Files a bundle may have; when the manifest lists one it is verified and read like the rest.
OPTIONAL_BUNDLE_FILES = ("calibration.json",)
CALIBRATION_FILE = "calibration.json"
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


def tables_sha256(directory: Path) -> str:
    """SHA-256 over the parquet files of a directory (names and bytes, sorted by name)."""
    digest = hashlib.sha256()
    for path in sorted(Path(directory).glob("*.parquet")):
        digest.update(path.name.encode())
        digest.update(sha256_file(path).encode())
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


def save_bundle(
    method: GraphMethod,
    root: Path = Path("data/predictors"),
    name: str = "scaledl",
    metrics: dict | None = None,
    training_data: dict | None = None,
    version: str | None = None,
    calibration: IntervalCalibration | None = None,
) -> Path:
    """Write a fitted ScaleDL predictor as a new bundle version and point ``latest`` at it.

    Args:
        method: a fitted :class:`~scaledl.models.methods.GraphMethod` of mode ``scaledl``.
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
        sklearn.exceptions.NotFittedError: the method is not fitted (a ``ValueError``).
        ValueError: the method is not a ScaleDL ``GraphMethod``, the version exists, or the
            calibration came from other profile tables than ``training_data["sha256"]``.
    """
    import skops.io as sio
    import torch

    from scaledl.graph.layer_graph import EDGE_TYPES
    from scaledl.graph.units import LAYER_TYPES
    from scaledl.models.layerwise import LAYER_FEATURES
    from scaledl.models.methods import GraphMethod

    if not isinstance(method, GraphMethod) or method.mode != "scaledl":
        raise ValueError(
            f"save_bundle needs a fitted GraphMethod(mode='scaledl'), got {method!r:.80}"
        )
    method.check_fitted()
    check_calibration_data(calibration, (training_data or {}).get("sha256", ""), str(root))
    now = dt.datetime.now(dt.UTC)
    version = version or now.strftime("%Y%m%dT%H%M%S%fZ")
    target = Path(root) / name / version
    with _new_version(target) as tmp:
        sio.dump(method.layerwise_.models_, tmp / "layerwise.skops")
        torch.save(method.gnn_.state_dict(), tmp / "gnn.pt")
        params = {
            "allreduce": method.allreduce_.to_dict() if method.allreduce_ is not None else None,
            "epoch": method.epoch_model_.to_dict(),
            "gnn_config": method.gnn_.config(),
            "gnn_prior": method.prior,
            "gnn_edges": method.edges,
            "gnn_system_nodes": method.system_nodes,
            "layerwise_min_samples": method.layerwise_.min_samples,
            "training_devices": list(method.training_devices_),
            "training_workload_ids": list(method.training_workload_ids_),
            "training_domain": (
                None if method.training_domain_ is None else method.training_domain_.to_dict()
            ),
        }
        (tmp / "params.json").write_text(json.dumps(params, indent=2, sort_keys=True))
        if calibration is not None:
            calibration.write(tmp / CALIBRATION_FILE)
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir())}
        manifest = {
            "format_version": FORMAT_VERSION,
            "name": name,
            "version": version,
            "created_at": now.isoformat(),
            "training_data": training_data or {},
            "feature_schema": {
                "layer_types": list(LAYER_TYPES),
                "edge_types": list(EDGE_TYPES),
                "layer_features": list(LAYER_FEATURES),
                "gnn_in_channels": method.gnn_.in_channels,
            },
            "library_versions": library_versions(),
            "metrics": metrics or {},
            "training_summary": {
                **method.history_,
                "fit_seconds": method.fit_seconds_,
                "training_workloads": len(method.training_workload_ids_),
            },
            "files": files,
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return target


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
    from scaledl.models.intervals import CalibrationError

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
    """A temporary folder beside ``target`` that becomes ``target`` atomically on success.

    On an exception the folder is removed and nothing is published; on success ``latest`` of
    the predictor name points at the new version.

    Raises:
        ValueError: ``target`` exists already.
    """
    if target.exists():
        raise ValueError(f"{target}: bundle version {target.name!r} exists already")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _write_latest(target.parent, target.name)


def _write_latest(name_dir: Path, version: str) -> None:
    tmp = name_dir / ".latest.tmp"
    tmp.write_text(version + "\n")
    os.replace(tmp, name_dir / "latest")


def resolve_bundle(path: Path) -> Path:
    """The bundle directory of ``path``: a bundle, or a name directory (follows ``latest``).

    Raises:
        BundleError: no bundle there.
    """
    path = Path(path)
    if (path / "manifest.json").exists():
        return path
    latest = path / "latest"
    if latest.exists():
        version = latest.read_text().strip()
        if version in ("", ".", "..") or Path(version).name != version:
            raise BundleError(f"{latest}: names {version!r}, not a version directory name")
        bundle = path / version
        if not (bundle / "manifest.json").exists():
            raise BundleError(f"{latest}: names version {version!r}, which has no manifest.json")
        return bundle
    raise BundleError(f"{path}: not a predictor bundle (no manifest.json) nor a name directory")


def read_manifest(bundle: Path) -> dict[str, Any]:
    """The manifest of a bundle, after checking its format and every file's checksum.

    Raises:
        BundleError: the manifest is unreadable or a file is missing or altered.
        IncompatibleBundleError: format version or scikit-learn version differ.
    """
    path = Path(bundle) / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path}: unreadable manifest: {exc}") from exc
    if not isinstance(manifest, dict):
        raise BundleError(f"{path}: unreadable manifest: not a JSON object")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise IncompatibleBundleError(
            f"{path}: field 'format_version' is {manifest.get('format_version')!r}; this ScaleDL "
            f"reads {FORMAT_VERSION}"
        )
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise BundleError(f"{path}: field 'files' (value {files!r:.80}): expected name -> sha256")
    for name in BUNDLE_FILES:
        if name not in files:
            raise BundleError(
                f"{Path(bundle) / name}: not listed in {path} field 'files': the loader reads it, "
                "so an unverified file is refused"
            )
    known = (*BUNDLE_FILES, *OPTIONAL_BUNDLE_FILES)
    for name, expected in files.items():
        if name not in known:
            raise BundleError(
                f"{Path(bundle) / name}: listed in {path} field 'files' but not a bundle file "
                f"({', '.join(known)})"
            )
        file = Path(bundle) / name
        if not file.exists():
            raise BundleError(f"{file}: listed in the manifest but missing")
        actual = sha256_file(file)
        if actual != expected:
            raise BundleError(
                f"{file}: checksum mismatch (manifest {expected[:12]}..., file {actual[:12]}...): "
                "the bundle was altered or truncated"
            )
    saved = manifest.get("library_versions", {}).get("scikit-learn", "")
    current = library_versions()["scikit-learn"]
    if saved.split(".")[:2] != current.split(".")[:2]:
        raise IncompatibleBundleError(
            f"{path}: written with scikit-learn {saved}, this environment has {current}; "
            "retrain or install the same minor version"
        )
    return manifest


@dataclass(frozen=True)
class BundleParts:
    """A verified bundle's deserialised files, before the GNN module is built.

    Attributes:
        path: the bundle directory.
        manifest: its manifest.
        layerwise: the fitted layer-wise model.
        params: ``params.json``.
        gnn_state: the GNN's state dict (tensors only).
        domain: the training domain (``None`` for bundles written before it was recorded).
        calibration: the interval calibration (``None`` when the bundle has none).
    """

    path: Path
    manifest: dict[str, Any]
    layerwise: LayerwiseModel
    params: dict[str, Any]
    gnn_state: dict[str, torch.Tensor]
    domain: TrainingDomain | None = None
    calibration: IntervalCalibration | None = None

    @property
    def training_devices(self) -> list[str]:
        """Devices the predictor was trained on."""
        return list(self.params["training_devices"])


def read_bundle(bundle: Path) -> BundleParts:
    """Verify a bundle and deserialise its files (no PyTorch Geometric import).

    Args:
        bundle: a bundle directory or a name directory (follows ``latest``).

    Returns:
        The :class:`BundleParts`.

    Raises:
        BundleError: verification or deserialisation failed (naming the bundle or file).
    """
    import skops.io as sio
    import torch

    from scaledl.models.domain import TrainingDomain
    from scaledl.models.intervals import IntervalCalibration
    from scaledl.models.layerwise import LayerwiseModel

    bundle = resolve_bundle(bundle)
    manifest = read_manifest(bundle)
    layer_file = bundle / "layerwise.skops"
    try:
        untrusted = sio.get_untrusted_types(file=layer_file)
    except Exception as exc:
        raise BundleError(f"{layer_file}: cannot read: {exc}") from exc
    refused = [t for t in untrusted if not t.startswith(_TRUSTED_PREFIXES)]
    if refused:
        raise BundleError(f"{layer_file}: refuses to load untrusted types {refused}")
    try:
        params = json.loads((bundle / "params.json").read_text())
        models = sio.load(layer_file, trusted=untrusted)
        layerwise = LayerwiseModel.from_fitted(models, min_samples=params["layerwise_min_samples"])
        state = torch.load(bundle / "gnn.pt", weights_only=True, map_location="cpu")
    except Exception as exc:
        raise BundleError(f"{bundle}: cannot load predictor: {exc}") from exc
    domain = calibration = None
    try:
        if params.get("training_domain") is not None:
            domain = TrainingDomain.from_dict(
                params["training_domain"], source=f"{bundle / 'params.json'} key 'training_domain'"
            )
        if CALIBRATION_FILE in manifest["files"]:
            calibration = IntervalCalibration.read(bundle / CALIBRATION_FILE)
    except ValueError as exc:
        raise BundleError(str(exc)) from exc
    return BundleParts(bundle, manifest, layerwise, params, state, domain, calibration)


def build_method(parts: BundleParts) -> GraphMethod:
    """The fitted ScaleDL method of a read bundle (builds the GNN: imports PyTorch Geometric).

    Args:
        parts: from :func:`read_bundle`.

    Returns:
        The fitted :class:`~scaledl.models.methods.GraphMethod`, GNN in eval mode.

    Raises:
        BundleError: the saved weights do not fit the GNN of the saved configuration.
    """
    from scaledl.models.allreduce import AlphaBetaAllReduce
    from scaledl.models.epoch import EpochModel
    from scaledl.models.gnn import RuntimeGNN
    from scaledl.models.methods import GraphMethod

    params = parts.params
    try:
        gnn = RuntimeGNN(**params["gnn_config"])
        # Bundles written before the correction clamp existed lack its two buffers: they load
        # with the clamp open (+-inf), which is how they were evaluated. Anything else missing
        # or unexpected is an error.
        missing, unexpected = gnn.load_state_dict(parts.gnn_state, strict=False)
        if unexpected or set(missing) - _OPTIONAL_GNN_BUFFERS:
            raise ValueError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
        allreduce = (
            AlphaBetaAllReduce.from_dict(params["allreduce"]) if params["allreduce"] else None
        )
        epoch_model = EpochModel.from_dict(params["epoch"])
    except Exception as exc:
        raise BundleError(f"{parts.path / 'gnn.pt'}: cannot build predictor: {exc}") from exc
    gnn.eval()
    return GraphMethod.from_fitted(
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


def load_method(bundle: Path) -> tuple[GraphMethod, dict[str, Any]]:
    """Load the ScaleDL method of a verified bundle (:func:`read_bundle` + :func:`build_method`).

    Returns:
        The method and the manifest.

    Raises:
        BundleError: verification or deserialisation failed.
    """
    parts = read_bundle(bundle)
    return build_method(parts), parts.manifest


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

    Raises:
        BundleError: the bundle does not verify.
        ValueError: the registry already holds that version, or the calibration came from
            other profile tables than the bundle's training data.
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
        manifest = {**manifest, "name": name, "metrics": metrics or {}, "files": files}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return target


def list_predictors(root: Path = Path("data/predictors")) -> pd.DataFrame:
    """Every bundle version under a registry root, each verified as :func:`read_manifest` does.

    A version is any directory of a name directory that is not hidden (``save_bundle`` writes
    into hidden temporary directories). A version that fails verification is listed with
    ``status`` ``"broken"`` (or ``"incompatible"``: another format or scikit-learn version)
    and the reason, never skipped and never fatal.

    Returns:
        One row per version, columns :data:`LIST_COLUMNS`: ``name``, ``version``, ``latest``
        (bool), ``status`` (``"ok"``, ``"broken"``, ``"incompatible"``), ``problem`` (the
        reason, ``""`` when ok), ``created_at``, ``training_workloads`` and ``path``.
    """
    rows = []
    root = Path(root)
    for name_dir in sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []:
        latest = (name_dir / "latest").read_text().strip() if (name_dir / "latest").exists() else ""
        versions = (p for p in name_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
        for bundle in sorted(versions):
            try:
                manifest, status, problem = read_manifest(bundle), "ok", ""
            except IncompatibleBundleError as exc:
                manifest, status, problem = {}, "incompatible", str(exc)
            except BundleError as exc:
                manifest, status, problem = {}, "broken", str(exc)
            data = manifest.get("training_data")
            rows.append(
                {
                    "name": name_dir.name,
                    "version": bundle.name,
                    "latest": bundle.name == latest,
                    "status": status,
                    "problem": problem,
                    "created_at": manifest.get("created_at", ""),
                    "training_workloads": data.get("workloads") if isinstance(data, dict) else None,
                    "path": str(bundle),
                }
            )
    return pd.DataFrame(rows, columns=list(LIST_COLUMNS))
