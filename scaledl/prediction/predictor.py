"""The consumer-facing :class:`Predictor`: load a bundle, predict runtimes of workloads.

Workloads come as :class:`~scaledl.workloads.spec.Workload` objects, dicts, or DataFrame rows
(one workload per row, columns named as the spec's fields; an empty cell is a field not given,
except in the fields every workload has, :func:`~scaledl.workloads.spec.table_row`). A NaN or
infinite value in a dict is an error, never a default. A predictor predicts for the device it
was trained on: a dict or row without
``device_name`` means "the predictor's device" (an error when it was trained on several), a
bare ``cpu`` or ``cuda`` the predictor's one device of that kind; a ``device_name`` not among
the training devices is an error, never a silent guess, except for a GPU predictor (a kernel
bundle, :mod:`scaledl.registry.kernel_bundle`), which predicts any GPU of the device table from
its specs and flags one it never trained on (``in_domain`` False, ``device_name`` reason).
Every workload is built and traced (meta device, cached) before predicting, so a model that
cannot be built is an error naming the row, never a traceback.

Every prediction says whether it lies inside the training domain and, if not, why
(:mod:`scaledl.models.guard`; ``strict=True`` makes that an error), and, with ``coverage``,
carries conformal intervals calibrated on out-of-sample errors of the same kind
(:mod:`scaledl.models.intervals`).

:func:`load_predictor` verifies the bundle and deserialises its files; the GNN module (PyTorch
Geometric) is built around the loaded weights at the first prediction, so loading in a fresh
process does not pay for PyTorch Geometric's imports before they are needed.

Predictions without ``detail`` take the batched path of :mod:`scaledl.prediction`: rows are
parsed, traced and predicted once per distinct spec less its dataset size, the GNN over many
graphs at once; the numbers are those of the per-workload path.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from scaledl.devices import UnknownDeviceError, device_spec
from scaledl.devices.local import normalise_device_name
from scaledl.graph import trace_cache
from scaledl.graph.features import check_traceable
from scaledl.models.guard import check_domain, guard_columns, raise_if_outside
from scaledl.models.intervals import CalibrationError
from scaledl.prediction.gpu_layouts import composed_by_megatron, gpu_system
from scaledl.prediction.layouts import RECIPE_PREDICTOR
from scaledl.prediction.predict import consistent_epoch_bounds, predict_rows
from scaledl.registry.bundle import BundleError, BundleParts
from scaledl.registry.kinds import build_method, read_bundle
from scaledl.registry.layouts import find_layout_calibration
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.parallelism import is_data_parallel, layout_label
from scaledl.workloads.spec import Workload, is_missing

#: The trace cache's folder in the predictor's name directory (hidden: listings skip it).
TRACE_CACHE_DIR = ".trace-cache"

if TYPE_CHECKING:
    from scaledl.models.domain import TrainingDomain
    from scaledl.models.intervals import IntervalCalibration
    from scaledl.parallel.calibration import LayoutCalibration


class Predictor:
    """A loaded ScaleDL predictor.

    Args:
        parts: the verified, deserialised bundle (:func:`~scaledl.registry.kinds.read_bundle`).

    Attributes:
        manifest: the bundle's manifest (version, training data, metrics, ...).
        path: the bundle directory.
    """

    def __init__(self, parts: BundleParts) -> None:
        self._parts = parts
        self._built = None
        self._layouts: dict[str, LayoutCalibration | None] = {}
        self.manifest = parts.manifest
        self.path = parts.path

    @property
    def version(self) -> str:
        """The bundle version."""
        return self.manifest["version"]

    @property
    def devices(self) -> list[str]:
        """Devices the predictor was trained on."""
        return self._parts.training_devices

    @property
    def training_workload_ids(self) -> list[str]:
        """Ids of the workloads it was trained on (empty for bundles that predate the record)."""
        return list(self._parts.params.get("training_workload_ids", []))

    @property
    def method(self):
        """The fitted method, built on first access.

        A CPU bundle's :class:`~scaledl.models.graph_prediction.GraphPredictor`, a GPU bundle's
        :class:`~scaledl.models.kernel.KernelGraphMethod`.

        Raises:
            scaledl.registry.bundle.BundleError: the weights do not fit the saved GNN.
        """
        if self._built is None:
            self._built = build_method(self._parts)
        return self._built

    @property
    def domain(self) -> TrainingDomain | None:
        """What the training workloads covered (``None`` for bundles that predate the record)."""
        return self._parts.domain

    @property
    def calibration(self) -> IntervalCalibration | None:
        """The interval calibration (``None`` when the bundle has none)."""
        return self._parts.calibration

    def layout_calibration(self, device_name: str) -> LayoutCalibration | None:
        """The layout calibration of a device saved beside this bundle, loaded once.

        Args:
            device_name: the device (a workload's ``device_name``).

        Returns:
            The :class:`~scaledl.parallel.calibration.LayoutCalibration`; ``None`` when the
            bundle has none for the device (layouts then take the ``current`` recipe).

        Raises:
            scaledl.registry.bundle.BundleError: the calibration does not verify (naming the
                file, field and value); never a silent fallback.
        """
        if device_name not in self._layouts:
            self._layouts[device_name] = find_layout_calibration(
                self.path, self.manifest, device_name
            )
        return self._layouts[device_name]

    def predict(
        self,
        workloads: Any,
        detail: bool = False,
        source: str = "",
        coverage: float | None = None,
        strict: bool = False,
    ) -> pd.DataFrame:
        """Predict iteration and epoch time, with the domain check and, on request, intervals.

        Every row is checked by the domain guard (:mod:`scaledl.models.guard`): ``in_domain``
        and ``extrapolation`` say whether the workload lies inside what the predictor was
        trained on and, if not, why. With ``coverage``, the calibrated interval of each time
        comes from the conformal calibration stored in the bundle
        (:mod:`scaledl.models.intervals`), in the stratum the guard assigns
        (``interval_basis``): an out-of-domain row gets a wider interval, never a narrower one.

        Args:
            workloads: a DataFrame (one row per workload), or a list of ``Workload``s or dicts.
            detail: also return per-node predictions.
            source: where the workloads came from (a file), named in errors.
            coverage: the intervals' coverage in (0, 1) (e.g. 0.9); ``None``: no interval.
            strict: raise instead of flagging a workload outside the training domain.

        Returns:
            One row per workload, in input order: ``workload_id``, ``family``, ``batch_size``,
            ``world_size``, ``iteration_s``, ``epoch_s``, ``steps_per_epoch``,
            ``used_generic_layer_model`` (a layer type unseen in training was predicted by the
            generic model), ``in_domain``, ``extrapolation`` (the guard's reasons, ``""`` in
            domain), ``recipe`` (what answered: ``predictor``, its own method; for a layout
            ``current``, the predictor's layer-wise models, or ``calibrated:<candidate>@<version>``,
            the layout calibration of its device, :mod:`scaledl.prediction.layouts`),
            ``predictor_version``; with ``coverage`` also ``iteration_s_low``,
            ``iteration_s_high``, ``epoch_s_low``, ``epoch_s_high`` (seconds; ``0`` and
            ``inf`` when the stratum has too few calibration residuals), ``interval_basis``
            and ``interval_calibration`` (how the interval's half-width was obtained:
            ``conformal``, ``normal_prediction_bound`` for a new family calibrated on too few
            families for the conformal quantile, or ``unbounded``). With ``detail=True``, a
            tuple of that frame and a per-node frame (``workload_id``, ``node_index``,
            ``node_kind``: ``layer``, ``allreduce`` or ``optimizer``, ``layer_name``,
            ``layer_type``, ``forward_ms``, ``backward_ms``, ``used_generic``, ``bounded``,
            ``total_ms``).

        Raises:
            scaledl.workloads.fields.WorkloadError: a workload is invalid or its model cannot be
                built or traced (names source, row and field), or it asks for a device the
                predictor was not trained on.
            scaledl.models.guard.OutOfDomainError: ``strict`` and a workload lies outside the
                training domain (names source, row, field and value).
            scaledl.models.intervals.CalibrationError: ``coverage`` outside (0, 1), or the
                bundle has no interval calibration.
            scaledl.registry.bundle.BundleError: the weights do not fit the saved GNN (found
                at the first prediction, when the GNN is built), or the predictor returned a
                non-finite time (a bundle's numbers are checked when loaded, so this is a
                last guard).
        """
        if coverage is not None:
            self.check_coverage(coverage)
        if not detail:
            return predict_rows(self, workloads, source, coverage, strict)
        return self._predict_detail(workloads, source, coverage, strict)

    def _predict_detail(
        self, workloads: Any, source: str, coverage: float | None, strict: bool
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """:meth:`predict` with ``detail``: the per-workload path, with the per-node frame."""
        specs = self._to_workloads(workloads, source)
        _refuse_layouts(specs, source, self.predicts_any_device)
        result, nodes = self.method.predict_with_detail(specs)
        generic = nodes.groupby("workload_id")["used_generic"].any()
        result.insert(1, "family", [w.family for w in specs])
        result.insert(2, "batch_size", [w.batch_size for w in specs])
        result.insert(3, "world_size", [w.world_size for w in specs])
        result["steps_per_epoch"] = [w.steps_per_epoch for w in specs]
        result["used_generic_layer_model"] = result["workload_id"].map(generic).fillna(False)
        if not np.isfinite(result[["iteration_s", "epoch_s"]].to_numpy()).all():
            raise BundleError(f"{self.path}: predictor returned non-finite times")
        reasons = check_domain(specs, self.domain, nodes)
        if strict:
            raise_if_outside(reasons, source)
        guard = guard_columns(reasons)
        result["in_domain"] = guard["in_domain"].to_numpy()
        result["extrapolation"] = guard["extrapolation"].to_numpy()
        if coverage is not None:
            self._insert_intervals(result, guard["interval_basis"].tolist(), coverage)
        result["recipe"] = RECIPE_PREDICTOR  # detail covers data-parallel workloads only
        result["predictor_version"] = self.version
        return result, nodes

    def _insert_intervals(self, result: pd.DataFrame, basis: list[str], coverage: float) -> None:
        """Insert ``<target>_s_low``/``_high`` after each time, then the interval's basis/method."""
        bounds = {
            target: self.calibration.interval(
                target, result[f"{target}_s"].to_numpy(), basis, coverage
            )[:2]
            for target in ("iteration", "epoch")
        }
        bounds["epoch"] = consistent_epoch_bounds(
            *bounds["epoch"], result["steps_per_epoch"].to_numpy(), *bounds["iteration"]
        )
        for target in ("epoch", "iteration"):  # inserted after each point prediction
            low, high = bounds[target]
            at = result.columns.get_loc(f"{target}_s") + 1
            result.insert(at, f"{target}_s_low", low)
            result.insert(at + 1, f"{target}_s_high", high)
        result["interval_basis"] = basis
        result["interval_calibration"] = self.calibration.row_methods(basis, coverage)

    def check_coverage(self, coverage: float) -> None:
        """Refuse a coverage outside (0, 1) or a bundle without calibration, before predicting.

        Raises:
            scaledl.models.intervals.CalibrationError: naming the coverage or the bundle.
        """
        if not isinstance(coverage, (int, float)) or not 0.0 < coverage < 1.0:
            percent = (
                f" (a fraction: {coverage / 100:g} for {coverage:g}%)"
                if isinstance(coverage, (int, float)) and 50.0 <= coverage < 100.0
                else ""
            )
            raise CalibrationError(f"coverage must lie in (0, 1), got {coverage!r}{percent}")
        if self.calibration is None:
            raise CalibrationError(
                f"{self.path}: predictor {self.version} has no interval calibration "
                "(calibration.json): register it through the pipeline, or save it with the "
                "calibration.json that `scaledl evaluate` writes (`scaledl train --calibration`)"
            )

    def parse_workloads(self, workloads: Any, source: str = "") -> list[Workload]:
        """The validated workloads :meth:`predict` would predict (device resolved, traced).

        Args:
            workloads: as for :meth:`predict`.
            source: where they came from, named in errors.

        Returns:
            One :class:`~scaledl.workloads.spec.Workload` per row, in order.

        Raises:
            scaledl.workloads.fields.WorkloadError: as :meth:`predict`.
        """
        return self._to_workloads(workloads, source)

    def _to_workloads(self, workloads: Any, source: str = "") -> list[Workload]:
        records, table = self.records(workloads, source)
        parse = self.parse_record(table)
        prefix = f"{source}: " if source else ""
        return [parse(rec, f"{prefix}row {i + 1}") for i, rec in enumerate(records)]

    def records(self, workloads: Any, source: str = "") -> tuple[list[Any], bool]:
        """The rows of :meth:`predict`'s input, and whether they are table rows.

        Args:
            workloads: as for :meth:`predict`.
            source: where they came from, named in errors.

        Returns:
            ``(records, table)``: dicts or ``Workload`` objects, and ``True`` for the rows of
            a DataFrame (empty cells are fields not given).

        Raises:
            scaledl.workloads.fields.WorkloadError: a DataFrame column given twice, or no row.
        """
        table = isinstance(workloads, pd.DataFrame)
        if table:
            duplicated = workloads.columns[workloads.columns.duplicated()].tolist()
            if duplicated:
                raise WorkloadError(
                    f"{source or 'workloads'}: column(s) {duplicated} given twice; keep one each"
                )
            records = workloads.to_dict("records")
        elif isinstance(workloads, (Workload, dict)):
            records = [workloads]
        else:
            records = list(workloads)
        if not records:
            prefix = f"{source}: " if source else ""
            raise WorkloadError(f"{prefix}no workload to predict (no row)")
        return records, table

    def parse_record(self, table: bool):
        """The parser of one row: validated, device resolved and checked, model traced.

        Args:
            table: the rows are table rows (:func:`~scaledl.workloads.spec.table_row`).

        Returns:
            ``parse(record, where) -> Workload``, raising
            :class:`~scaledl.workloads.fields.WorkloadError` naming ``where`` (on a GPU
            predictor also for a layout its Megatron-LM recipe does not compose,
            :func:`scaledl.prediction.gpu_layouts.gpu_system`).
        """

        def parse(record: Any, where: str) -> Workload:
            if isinstance(record, Workload):
                w = record
            else:
                w = Workload.from_record(self._with_device(record, where), where, table=table)
            if w.device_name not in self.devices:
                self._check_unseen_device(w.device_name, where)
            if self.predicts_any_device and not is_data_parallel(w):
                gpu_system(w, where)  # a layout Megatron-LM's recipe cannot compose: an error
            check_traceable(w, where)
            return w

        return parse

    @property
    def predicts_any_device(self) -> bool:
        """Whether devices never trained on are predicted from their specs (a GPU predictor)."""
        return self._parts.kind == "kernel"

    def _check_unseen_device(self, device: str, where: str) -> None:
        """Refuse a device never trained on, unless this GPU predictor has its specs."""
        trained = f"predictor {self.version} was trained on {self.devices}"
        if not self.predicts_any_device:
            raise WorkloadError(f"{where}: field 'device_name' (value {device!r}): {trained}")
        try:
            device_spec(device)
        except UnknownDeviceError as exc:
            raise WorkloadError(
                f"{where}: field 'device_name' (value {device!r}): not in the device table, so "
                f"it cannot be predicted from its specs ({trained}; `scaledl devices` lists "
                f"the known ones): {exc}"
            ) from None

    def _with_device(self, record: Any, where: str) -> Any:
        """The record with its missing or bare ``device_name`` resolved to a training device."""
        if not isinstance(record, dict):
            return record  # Workload.from_record names the problem
        device = record.get("device_name")
        owner = f"predictor {self.version}"
        try:
            if device is None or is_missing(device):
                if len(self.devices) != 1:
                    raise ValueError(
                        f"device_name is required: {owner} was trained on {self.devices}"
                    )
                device = self.devices[0]
            elif isinstance(device, str):
                device = normalise_device_name(device, self.devices, owner)
        except ValueError as exc:
            raise WorkloadError(f"{where}: field 'device_name': {exc}") from None
        return {**record, "device_name": device}


def load_predictor(path: Path | str) -> Predictor:
    """Load a predictor bundle (or the ``latest`` of a name directory), verified first.

    Args:
        path: a bundle directory (``data/predictors/scaledl/<version>``) or a name directory
            (``data/predictors/scaledl``, follows its ``latest`` file).

    Returns:
        The :class:`Predictor`.

    The traced architectures are cached beside the bundle, in ``<name>/.trace-cache``
    (:mod:`scaledl.graph.trace_cache`), so the next process does not trace them again.

    Raises:
        scaledl.registry.bundle.BundleError: missing, tampered, truncated or incompatible.
    """
    parts = read_bundle(Path(path))
    trace_cache.use_directory(parts.path.parent / TRACE_CACHE_DIR)
    return Predictor(parts)


def _refuse_layouts(specs: list[Workload], source: str, gpu: bool = False) -> None:
    """Per-node detail is the layer graph's: refuse a tensor/pipeline/sharded layout.

    On a GPU predictor (``gpu``) also a data-parallel workload of several GPUs that
    Megatron-LM's recipe composes (:func:`scaledl.prediction.gpu_layouts.composed_by_megatron`):
    its iteration is a composition, not the layer graph's sum.

    Raises:
        WorkloadError: naming the row and the layout.
    """
    for i, w in enumerate(specs):
        where = f"{source + ': ' if source else ''}row {i + 1}: layout {layout_label(w)!r}"
        if not is_data_parallel(w):
            raise WorkloadError(
                f"{where}: per-node detail covers data-parallel workloads only; predict layouts "
                "without detail (scaledl.parallel composes them)"
            )
        if gpu and composed_by_megatron(w):
            raise WorkloadError(
                f"{where}: on a GPU predictor data parallelism of several GPUs is composed by "
                "the Megatron-LM recipe (its iteration is not the layer graph's sum), so it has "
                "no per-node detail; predict it without detail, or one GPU with detail"
            )
