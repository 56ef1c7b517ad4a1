"""Layout calibrations beside a predictor bundle: save, verify and load without running code.

A layout calibration (:class:`~scaledl.parallel.calibration.LayoutCalibration`) is saved in
the directory of the predictor bundle it serves, one folder per device and version:

* ``<bundle>/layouts/<device>/<version>/manifest.json``: ``format_version``, ``kind``
  (``layout_calibration``), ``version``, ``created_at``, ``device_name``, the bundle it was
  fitted beside (``predictor_name``, ``predictor_version``), the chosen ``recipe``, its
  collective model, overlap factors and correction, the training data (SHA-256 over the
  profile tables, workloads per kind), the in-sample figures, ``library_versions`` and the
  SHA-256 and size of the one other file (``files``, ``file_sizes``); validated as
  :class:`CalibrationManifest` (pydantic: unknown keys, non-finite numbers and out-of-range
  factors refused). Manifests saved before issue 52 also hold ``selection``, the candidates'
  inner leave-one-kind-out scores (:class:`SelectionRecord`): still read, not used;
* ``<bundle>/layouts/<device>/<version>/layerwise.skops``: the layer-wise regressors;
* ``<bundle>/layouts/<device>/latest``: a one-line file naming the newest version.

``<device>`` is the device name as a file name (:func:`device_folder`). The bundle's own
manifest does not list these files, so the bundle's checksums and version stay those of its
training; a calibration names the bundle it belongs to and is refused beside another.

Saving publishes the version folder with the registry's durable writers
(:func:`scaledl.io.atomic.atomic_dir`, then ``latest`` by :func:`~scaledl.io.atomic.
write_atomic`). Loading never runs code from the files, as for a bundle
(:mod:`scaledl.registry.bundle`): the manifest must be a regular file under 1 MiB of finite
JSON, the skops file a regular file of the recorded size and SHA-256, written by the same
scikit-learn minor version; skops builds only the types of
:data:`~scaledl.registry.bundle.TRUSTED_TYPES` beyond its safe defaults, every tree's
structure is checked (:func:`~scaledl.registry.bundle.load_skops`), every fitted number of the
regressors is checked finite and in range, and the correction and collective costs within
:data:`MAX_CORRECTION_INTERCEPT`, :data:`MAX_CORRECTION_COEF`, :data:`MAX_ALPHA_MS` and
:data:`MAX_MS_PER_BYTE`. Any problem raises
:class:`~scaledl.registry.bundle.BundleError` naming the file, the field and the value.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt, model_validator

from scaledl.io.atomic import atomic_dir, remove_stale_temps, write_atomic
from scaledl.io.excerpt import bounded, excerpt
from scaledl.io.schema import Artefact, parse_artefact
from scaledl.parallel.collectives import COLLECTIVES, CollectiveModel
from scaledl.parallel.overlap import LANES, Overlap
from scaledl.parallel.recipe import CANDIDATES, CORRECTION_FEATURES, Correction, LayoutRecipe
from scaledl.registry.bundle import (
    MAX_MANIFEST_BYTES,
    TRUSTED_TYPES,
    BundleError,
    _check_regressors,
    _read_bundle_json,
    _regular_file,
    latest_bundle,
    library_versions,
    load_skops,
    read_manifest,
    read_params,
    resolve_bundle,
    sha256_file,
)

#: The folder of a bundle that holds its layout calibrations.
LAYOUTS_DIR = "layouts"
FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
LAYERWISE_FILE = "layerwise.skops"
#: Bounds of a calibration's numbers, checked when it is saved and loaded (decisions: the
#: committed CPU host's fit has |coef| <= 0.05, intercept 0.30, latencies <= 1.8 ms and costs
#: <= 2.4e-6 ms/byte). The correction multiplies a composed time by ``exp(x @ coef +
#: intercept)`` over features of unit scale (shares in [0, 1], log2 sizes, log milliseconds):
#: an intercept beyond +-10 scales every time by more than e**10 (22,000x), a coefficient beyond
#: +-5 by e**5 (150x) per unit of a feature; neither is a fit of the recipe.
MAX_CORRECTION_INTERCEPT = 10.0
MAX_CORRECTION_COEF = 5.0
#: A collective's latency above 10 s or a cost above 1e-3 ms/byte (1 MB/s) is no network's.
MAX_ALPHA_MS = 1e4
MAX_MS_PER_BYTE = 1e-3

AlphaMs = Annotated[float, Field(ge=0.0, le=MAX_ALPHA_MS)]
MsPerByte = Annotated[float, Field(ge=0.0, le=MAX_MS_PER_BYTE)]
CorrectionCoef = Annotated[float, Field(ge=-MAX_CORRECTION_COEF, le=MAX_CORRECTION_COEF)]


class CollectivesParams(Artefact):
    """The collective model (:meth:`~scaledl.parallel.collectives.CollectiveModel.to_dict`).

    Attributes:
        kind: ``collective_model``.
        params: ``{collective: (alpha_ms, ms_per_byte)}`` for every collective, in
            ``[0, MAX_ALPHA_MS]`` and ``[0, MAX_MS_PER_BYTE]``.
        source: where each pair came from (``measured``, ``derived``, ``from <collective>``).
    """

    kind: Literal["collective_model"]
    params: dict[str, tuple[AlphaMs, MsPerByte]]
    source: dict[str, str]

    @model_validator(mode="after")
    def _every_collective(self) -> CollectivesParams:
        for name, keys in (("params", set(self.params)), ("source", set(self.source))):
            if keys != set(COLLECTIVES):
                raise ValueError(
                    f"field 'collectives.{name}' (value {sorted(keys)}): expected the "
                    f"collectives {list(COLLECTIVES)}"
                )
        return self


class OverlapParams(Artefact):
    """The overlap factors (:meth:`~scaledl.parallel.overlap.Overlap.to_dict`).

    Attributes:
        hidden: ``{lane: h}`` for every lane, each in ``[0, 1]``.
        source: ``{lane: "assumed" | "fitted" | "exposed" | "pooled"}`` (``pooled``: written
            by calibrations of before 2026-12-03, :mod:`scaledl.parallel.overlap`).
    """

    hidden: dict[str, float]
    source: dict[str, Literal["assumed", "fitted", "exposed", "pooled"]]

    @model_validator(mode="after")
    def _every_lane(self) -> OverlapParams:
        for name, values in (("hidden", self.hidden), ("source", self.source)):
            if set(values) != set(LANES):
                raise ValueError(
                    f"field 'overlap.{name}' (value {sorted(values)}): expected the lanes "
                    f"{list(LANES)}"
                )
        for lane, h in self.hidden.items():
            if not 0.0 <= h <= 1.0:
                raise ValueError(f"field 'overlap.hidden.{lane}' (value {h!r}): not in [0, 1]")
        return self


class CorrectionParams(Artefact):
    """The learned correction (:class:`~scaledl.parallel.recipe.Correction`).

    Attributes:
        features: :data:`~scaledl.parallel.recipe.CORRECTION_FEATURES`, in order.
        coef: one coefficient per feature, each within +-:data:`MAX_CORRECTION_COEF`.
        intercept: the intercept (log scale), within +-:data:`MAX_CORRECTION_INTERCEPT`.
    """

    features: tuple[str, ...]
    coef: tuple[CorrectionCoef, ...]
    intercept: Annotated[float, Field(ge=-MAX_CORRECTION_INTERCEPT, le=MAX_CORRECTION_INTERCEPT)]

    @model_validator(mode="after")
    def _features_match(self) -> CorrectionParams:
        if self.features != CORRECTION_FEATURES:
            raise ValueError(
                f"field 'correction.features' (value {list(self.features)}): this ScaleDL "
                f"reads {list(CORRECTION_FEATURES)}"
            )
        if len(self.coef) != len(self.features):
            raise ValueError(
                f"field 'correction.coef' (value {list(self.coef)}): {len(self.coef)} "
                f"coefficients for {len(self.features)} features"
            )
        return self


class SelectionRecord(Artefact):
    """The inner leave-one-kind-out scores of every candidate (manifests before issue 52).

    Validated when such a manifest is loaded, then not used; a calibration no longer writes
    it (the candidates' selection: ``benchmarks/history/layout_variants.py``).

    Attributes:
        chosen: the fitted recipe (:data:`scaledl.parallel.recipe.RECIPE`).
        lowest: the candidate with the lowest inner score (for information; ``None`` in
            calibrations saved when the lowest was the recipe by rule).
        mean_mre: every candidate's mean MRE over the held-out kinds.
        mre_by_kind: every candidate's MRE per held-out kind.
    """

    chosen: str
    lowest: str | None = None
    mean_mre: dict[str, NonNegativeFloat]
    mre_by_kind: dict[str, dict[str, NonNegativeFloat]]


class TrainingRecord(Artefact):
    """The profiles the calibration was fitted on.

    Attributes:
        sha256: SHA-256 over the profile tables (``tables_sha256``).
        directory: the folder they were read from.
        workloads: labelled workloads.
        by_kind: workloads per layout kind.
        workload_ids: their ids.
        spec_keys: their ids less the dataset size
            (:func:`~scaledl.parallel.calibration.spec_key`).
    """

    sha256: str
    directory: str
    workloads: PositiveInt
    by_kind: dict[str, NonNegativeInt]
    workload_ids: list[str]
    spec_keys: list[str]


class RankingRow(Artefact):
    """Kendall's tau of one model over its profiled layouts (in-sample).

    Attributes:
        model: the model (family, width, blocks, batch).
        layouts: its layouts.
        tau_calibrated: the tau (``None``: undefined).
    """

    model: str
    layouts: list[str]
    tau_calibrated: float | None


class InSampleRecord(Artefact):
    """The recipe on its own training workloads: in-sample, not an accuracy claim.

    Attributes:
        mre_by_kind: MRE per layout kind.
        ranking: Kendall's tau per model.
    """

    mre_by_kind: dict[str, NonNegativeFloat]
    ranking: list[RankingRow]


class CalibrationManifest(Artefact):
    """``manifest.json`` of a layout calibration (module docstring)."""

    format_version: Literal[1]
    kind: Literal["layout_calibration"]
    version: str
    created_at: str
    device_name: str
    predictor_name: str
    predictor_version: str
    recipe: Literal[tuple(CANDIDATES)]  # type: ignore[valid-type]
    layerwise_min_samples: PositiveInt
    layerwise_features: Literal["work", "kernel"]
    collectives: CollectivesParams
    overlap: OverlapParams | None
    correction: CorrectionParams
    selection: SelectionRecord | None = None  # written before issue 52 only
    training_data: TrainingRecord
    in_sample: InSampleRecord
    library_versions: dict[str, str]
    files: dict[str, str]
    file_sizes: dict[str, NonNegativeInt]

    @model_validator(mode="after")
    def _consistent(self) -> CalibrationManifest:
        if (self.overlap is not None) != CANDIDATES[self.recipe][1]:
            raise ValueError(
                f"field 'overlap' (value {excerpt(self.overlap)}): recipe {self.recipe!r} "
                f"{'has' if CANDIDATES[self.recipe][1] else 'has no'} overlap factors"
            )
        if set(self.files) != {LAYERWISE_FILE} or set(self.file_sizes) != {LAYERWISE_FILE}:
            raise ValueError(
                f"field 'files' (value {excerpt(sorted(self.files))}): expected exactly "
                f"[{LAYERWISE_FILE!r}] with its size"
            )
        return self


def device_folder(device_name: str) -> str:
    """The folder name of a device's calibrations: the name made safe, and a short hash.

    ``cpu:Intel(R) Xeon(R) Processor @ 2.60GHz`` -> ``cpu_Intel_R_Xeon_R_Processor_2.60GHz-
    <8 hex>`` (the hash keeps two names that differ only in punctuation apart).
    """
    safe = re.sub(r"[^A-Za-z0-9.]+", "_", device_name).strip("._")[:80] or "device"
    return f"{safe}-{hashlib.sha256(device_name.encode()).hexdigest()[:8]}"


def calibration_target(bundle: Path) -> tuple[Path, dict[str, Any], list[str]]:
    """The predictor bundle a layout calibration is saved beside, checked before any fit.

    Args:
        bundle: a predictor bundle or name directory (follows ``latest``).

    Returns:
        ``(bundle directory, its verified manifest, its training devices)``.

    Raises:
        BundleError: the bundle does not verify.
        ValueError: a GPU (kernel) predictor, whose layouts take Megatron-LM's recipe and no
            host calibration (naming the field).
    """
    bundle = resolve_bundle(Path(bundle))
    manifest = read_manifest(bundle)
    kind = manifest.get("predictor_kind", "graph")
    if kind != "graph":
        raise ValueError(
            f"{bundle / 'manifest.json'}: field 'predictor_kind' (value {kind!r}): a GPU "
            "predictor composes layouts by Megatron-LM's recipe (scaledl/parallel/megatron.py), "
            "not by a host's layout calibration; fit the layout calibration beside a CPU "
            "predictor"
        )
    params, _ = read_params(bundle)
    return bundle, manifest, list(params["training_devices"])


def check_calibration_device(device_name: str, manifest: dict[str, Any], devices: list[str]):
    """Refuse a calibration of a device the predictor was not trained on.

    Raises:
        ValueError: naming the field and the value.
    """
    if device_name not in devices:
        raise ValueError(
            f"profiles' field 'device_name' (value {device_name!r}): predictor "
            f"{manifest['version']} was trained on {devices}; profile the layouts on its host"
        )


def save_layout_calibration(calibration, bundle: Path, version: str | None = None) -> Path:
    """Publish a layout calibration beside a predictor bundle and point ``latest`` at it.

    Args:
        calibration: a fitted :class:`~scaledl.parallel.calibration.LayoutCalibration`.
        bundle: a predictor bundle or name directory (follows ``latest``).
        version: version string; default the UTC time ``YYYYMMDDTHHMMSSffffffZ``.

    Returns:
        The calibration's version folder.

    Raises:
        BundleError: the bundle does not verify.
        ValueError: a GPU (kernel) predictor, or a device the predictor was not trained on
            (:func:`calibration_target`, :func:`check_calibration_device`).
        OSError: writing failed; nothing is published.
    """
    # skops: only reading a calibration's fitted models needs it.
    import skops.io as sio

    bundle, manifest, devices = calibration_target(bundle)
    check_calibration_device(calibration.device_name, manifest, devices)
    now = dt.datetime.now(dt.UTC)
    version = version or now.strftime("%Y%m%dT%H%M%S%fZ")
    folder = bundle / LAYOUTS_DIR / device_folder(calibration.device_name)
    target = folder / version
    remove_stale_temps(folder)
    with atomic_dir(target) as tmp:
        sio.dump(calibration.recipe.layerwise.models_, tmp / LAYERWISE_FILE)
        record = _manifest(calibration, manifest, version, now, tmp / LAYERWISE_FILE)
        (tmp / MANIFEST_FILE).write_text(json.dumps(record, indent=2, sort_keys=True))
    write_atomic(folder / "latest", version + "\n")
    return target


def _manifest(calibration, bundle_manifest: dict, version: str, now, layer_file: Path) -> dict:
    """The JSON of :class:`CalibrationManifest` for a calibration being saved."""
    recipe: LayoutRecipe = calibration.recipe
    record = {
        "format_version": FORMAT_VERSION,
        "kind": "layout_calibration",
        "version": version,
        "created_at": now.isoformat(),
        "device_name": calibration.device_name,
        "predictor_name": bundle_manifest["name"],
        "predictor_version": bundle_manifest["version"],
        "recipe": recipe.name,
        "layerwise_min_samples": recipe.layerwise.min_samples,
        "layerwise_features": recipe.layerwise.features,
        "collectives": recipe.collectives.to_dict(),
        "overlap": None if recipe.overlap is None else recipe.overlap.to_dict(),
        "correction": {
            "features": list(CORRECTION_FEATURES),
            "coef": list(recipe.correction.coef),
            "intercept": recipe.correction.intercept,
        },
        "training_data": calibration.training_data,
        "in_sample": calibration.in_sample,
        "library_versions": library_versions(),
        "files": {LAYERWISE_FILE: sha256_file(layer_file)},
        "file_sizes": {LAYERWISE_FILE: layer_file.stat().st_size},
    }
    parse_artefact(CalibrationManifest, record, "layout calibration")  # what loading checks
    return record


def find_layout_calibration(bundle: Path, bundle_manifest: dict[str, Any], device_name: str):
    """The latest layout calibration of a device beside a bundle, verified and loaded.

    Args:
        bundle: the (verified) bundle directory.
        bundle_manifest: its manifest.
        device_name: the workloads' device.

    Returns:
        The :class:`~scaledl.parallel.calibration.LayoutCalibration`, or ``None`` when the
        bundle has none for the device (no folder, or no ``latest`` in it).

    Raises:
        BundleError: ``latest`` is unusable, or the calibration it names does not verify,
            belongs to another device or bundle (naming the file, field and value).
    """
    folder = Path(bundle) / LAYOUTS_DIR / device_folder(device_name)
    if not folder.is_dir():
        return None
    target = latest_bundle(folder)
    if target is None:
        return None
    calibration = read_layout_calibration(target)
    where = target / MANIFEST_FILE
    for field_name, value, expected in (
        ("device_name", calibration.device_name, device_name),
        ("predictor_version", calibration.predictor_version, bundle_manifest["version"]),
    ):
        if value != expected:
            raise BundleError(
                f"{where}: field {field_name!r} (value {excerpt(value)}): this calibration "
                f"belongs beside {excerpt(expected)}; fit it again (scaledl fit-layouts)"
            )
    return calibration


def read_layout_calibration(target: Path):
    """Verify and load one calibration version folder (module docstring).

    Returns:
        The :class:`~scaledl.parallel.calibration.LayoutCalibration` (its ``version`` set).

    Raises:
        BundleError: naming the file, the field and a bounded excerpt of the value.
    """
    # the models load torch and scikit-learn; listing and verifying calibrations need neither.
    from scaledl.models.layerwise import LayerwiseModel

    path = Path(target) / MANIFEST_FILE
    _regular_file(path, limit=MAX_MANIFEST_BYTES, what="unreadable layout calibration: ")
    data = _read_bundle_json(path, MAX_MANIFEST_BYTES, "unreadable layout calibration")
    try:
        m = parse_artefact(CalibrationManifest, data, str(path))
    except ValueError as exc:
        raise BundleError(f"{path}: unreadable layout calibration: {exc}") from exc
    saved = m.library_versions.get("scikit-learn", "")[:40]
    current = library_versions()["scikit-learn"]
    if saved.split(".")[:2] != current.split(".")[:2]:
        raise BundleError(
            f"{path}: field 'library_versions.scikit-learn' (value {saved!r}): this "
            f"environment has {current}; fit the layout calibration again"
        )
    layer_file = Path(target) / LAYERWISE_FILE
    _regular_file(layer_file, size=m.file_sizes[LAYERWISE_FILE], what="listed but ")
    actual = sha256_file(layer_file)
    if actual != m.files[LAYERWISE_FILE]:
        raise BundleError(
            f"{layer_file}: checksum mismatch (manifest {m.files[LAYERWISE_FILE][:12]}..., file "
            f"{actual[:12]}...): the calibration was altered or truncated"
        )
    models = load_skops(layer_file, TRUSTED_TYPES)
    try:
        layerwise = LayerwiseModel.from_fitted(
            models, min_samples=m.layerwise_min_samples, features=m.layerwise_features
        )
    except Exception as exc:
        raise BundleError(f"{layer_file}: cannot load: {bounded(str(exc), 300)}") from exc
    _check_regressors(layer_file, layerwise.models_)
    return _calibration(m, layerwise, path)


def _calibration(m: CalibrationManifest, layerwise, path: Path):
    """The :class:`~scaledl.parallel.calibration.LayoutCalibration` of a verified manifest."""
    # the layout models (torch); only fitting a calibration needs them.
    from scaledl.parallel.calibration import LayoutCalibration

    try:
        collectives = CollectiveModel.from_dict(m.collectives.model_dump(mode="json"))
        overlap = None
        if m.overlap is not None:
            overlap = Overlap(dict(m.overlap.hidden), dict(m.overlap.source))
    except ValueError as exc:
        raise BundleError(f"{path}: {exc}") from exc
    correction = Correction(m.correction.coef, m.correction.intercept)
    recipe = LayoutRecipe(m.recipe, layerwise, collectives, overlap, correction)
    return LayoutCalibration(
        recipe,
        m.device_name,
        m.training_data.model_dump(mode="json"),
        m.in_sample.model_dump(mode="json"),
        version=m.version,
        predictor_version=m.predictor_version,
    )
