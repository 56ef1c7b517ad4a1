"""The batched prediction path of :class:`~scaledl.Predictor`: cost per distinct answer.

Rows are parsed once per spec less its dataset size (:mod:`scaledl.prediction.rows`); the
iteration time, the generic layer model's use and the domain guard's reasons are computed once
per such spec (:mod:`scaledl.prediction.engine`), and each row gets its own steps per epoch,
epoch time (:class:`~scaledl.models.epoch.EpochModel`) and intervals. The numbers are those of
predicting each row alone (``tests/prediction`` pins them against the per-workload path).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd

from scaledl.graph.features import architecture_key
from scaledl.models.guard import Extrapolation, check_domain, guard_columns, raise_if_outside
from scaledl.prediction.engine import IterationPredictions, predict_iterations
from scaledl.prediction.gpu_layouts import composed_by_megatron, uncomposed_reason
from scaledl.prediction.layouts import RECIPE_PREDICTOR, predict_layout_workloads
from scaledl.prediction.rows import parse_rows
from scaledl.registry.bundle import BundleError
from scaledl.workloads.parallelism import is_data_parallel
from scaledl.workloads.spec import Workload

if TYPE_CHECKING:
    from scaledl.models.domain import TrainingDomain
    from scaledl.models.intervals import IntervalCalibration
    from scaledl.models.methods import GraphMethod
    from scaledl.parallel.calibration import LayoutCalibration


class LoadedPredictor(Protocol):
    """What the batched path reads of a loaded predictor; :class:`~scaledl.Predictor` is one.

    Declared here, not imported, because the predictor calls this module.
    """

    path: Path

    @property
    def version(self) -> str:
        """The bundle version."""

    @property
    def method(self) -> GraphMethod:
        """The fitted method (built on first access)."""

    @property
    def domain(self) -> TrainingDomain | None:
        """What the training workloads covered (``None``: not recorded)."""

    @property
    def calibration(self) -> IntervalCalibration | None:
        """The interval calibration (``None``: none)."""

    @property
    def predicts_any_device(self) -> bool:
        """Whether devices never trained on are predicted from their specs (a GPU predictor)."""

    def layout_calibration(self, device_name: str) -> LayoutCalibration | None:
        """The layout calibration of a device saved beside the bundle, or ``None``."""

    def records(self, workloads: Any, source: str = "") -> tuple[list[Any], bool]:
        """The rows of the input, and whether they are table rows."""

    def parse_record(self, table: bool) -> Callable[[Any, str], Workload]:
        """The parser of one row, ``parse(record, where) -> Workload``."""


@dataclass(frozen=True)
class SpecPredictions:
    """Per distinct spec (a workload less its dataset size): what every row of it shares.

    Attributes:
        workloads: the specs.
        iteration_s: predicted iteration seconds, shape (n,).
        used_generic: whether a layer type was predicted by the generic layer model, (n,).
        reasons: the domain guard's reasons per spec (empty: in domain).
        recipes: what answered each spec: ``predictor`` (its own method), ``current``, a
            layout calibration's label or ``megatron:<system>`` (a GPU predictor's composed
            layouts and data parallelism, :mod:`scaledl.prediction.layouts`).
    """

    workloads: list[Workload]
    iteration_s: np.ndarray
    used_generic: np.ndarray
    reasons: list[list[Extrapolation]]
    recipes: list[str]


def predict_specs(
    predictor: LoadedPredictor, workloads: list[Workload], arch_keys: list[str] | None = None
) -> SpecPredictions:
    """Iteration time and domain reasons of distinct specs.

    Plain data-parallel specs take the predictor's method (the GNN on the layer graph); specs
    with a tensor, pipeline or sharded layout the layout composition of :mod:`scaledl.parallel`
    with their device's recipe (:func:`~scaledl.prediction.layouts.predict_layout_workloads`:
    the layout calibration beside the predictor, else the predictor's layer-wise models),
    flagged by the domain guard (field ``layout``). On a GPU predictor, Megatron-LM's recipe
    also composes the plain data-parallel specs of several GPUs it can compose (gradient
    all-reduce and optimizer step included); the others of several GPUs keep the predictor's
    single-GPU iteration, flagged (:func:`~scaledl.prediction.gpu_layouts.uncomposed_reason`).

    Args:
        predictor: the loaded predictor.
        workloads: distinct specs (already validated and traceable).
        arch_keys: their architecture keys, when known.

    Returns:
        The :class:`SpecPredictions`.

    Raises:
        scaledl.registry.bundle.BundleError: the GNN cannot be built, a time is not finite, or
            a layout calibration does not verify.
        scaledl.workloads.fields.WorkloadError: a GPU layout the Megatron-LM recipe refuses
            (:func:`scaledl.prediction.gpu_layouts.gpu_system`).
    """
    if arch_keys is None:
        arch_keys = [architecture_key(w) for w in workloads]
    if predictor.predicts_any_device:  # Megatron-LM's recipe (scaledl.prediction.gpu_layouts)
        layout = np.array([composed_by_megatron(w) for w in workloads], dtype=bool)
    else:
        layout = np.array([not is_data_parallel(w) for w in workloads], dtype=bool)
    ddp = np.flatnonzero(~layout)
    iteration_ms = np.empty(len(workloads))
    generic: list[tuple[str, ...]] = [()] * len(workloads)
    bounded: list[tuple[str, ...]] = [()] * len(workloads)
    recipes = [RECIPE_PREDICTOR] * len(workloads)
    extra: list[list[Extrapolation]] = [
        uncomposed_reason(w) if predictor.predicts_any_device else [] for w in workloads
    ]
    if len(ddp):
        iterations = predict_iterations(
            predictor.method, [workloads[i] for i in ddp], [arch_keys[i] for i in ddp]
        )
        iteration_ms[ddp] = iterations.iteration_ms
        for i, types, notes in zip(ddp, iterations.generic_types, iterations.bounded, strict=True):
            generic[i], bounded[i] = types, notes
    if layout.any():  # tensor/pipeline/sharded layouts: the composition (scaledl.parallel)
        rows = np.flatnonzero(layout)
        answer = predict_layout_workloads(
            predictor, [workloads[i] for i in rows], [arch_keys[i] for i in rows]
        )
        iteration_ms[rows] = answer.iteration_ms
        for j, i in enumerate(rows):
            generic[i], recipes[i], extra[i] = (
                answer.generic_types[j], answer.recipes[j], answer.reasons[j]
            )  # fmt: skip
    iteration_s = iteration_ms / 1000.0
    if not np.isfinite(iteration_s).all():
        raise BundleError(f"{predictor.path}: predictor returned non-finite times")
    labels = [str(i) for i in range(len(workloads))]
    nodes = IterationPredictions(iteration_ms, generic, bounded).generic_nodes(labels)
    reasons = check_domain(workloads, predictor.domain, nodes, ids=labels, arch_keys=arch_keys)
    reasons = [r + x for r, x in zip(reasons, extra, strict=True)]
    used = np.array([bool(t) for t in generic], dtype=bool)
    return SpecPredictions(list(workloads), iteration_s, used, reasons, recipes)


def epoch_columns(
    predictor: LoadedPredictor,
    iteration_s: np.ndarray,
    steps: np.ndarray,
    batch: np.ndarray,
    basis: list[str],
    coverage: float | None,
) -> dict[str, np.ndarray]:
    """Epoch time and, with ``coverage``, the intervals of iteration and epoch time per row.

    Args:
        predictor: the loaded predictor.
        iteration_s: per row, shape (n,).
        steps: steps per epoch per row.
        batch: per-rank batch size per row.
        basis: the interval basis of each row (:func:`~scaledl.models.guard.guard_columns`).
        coverage: interval coverage, or ``None``.

    Returns:
        ``iteration_s``, ``epoch_s`` and with ``coverage`` ``iteration_s_low``,
        ``iteration_s_high``, ``epoch_s_low``, ``epoch_s_high``, in that column order; the
        epoch bounds are :func:`consistent_epoch_bounds`.

    Raises:
        scaledl.registry.bundle.BundleError: an epoch time is not finite.
    """
    epoch_s = predictor.method.epoch_model_.predict(iteration_s, steps, batch)
    if not np.isfinite(epoch_s).all():
        raise BundleError(f"{predictor.path}: predictor returned non-finite times")
    out = {"iteration_s": iteration_s}
    if coverage is not None:
        low, high, _ = predictor.calibration.interval("iteration", iteration_s, basis, coverage)
        out.update(iteration_s_low=low, iteration_s_high=high)
    out["epoch_s"] = epoch_s
    if coverage is not None:
        low, high, _ = predictor.calibration.interval("epoch", epoch_s, basis, coverage)
        low, high = consistent_epoch_bounds(
            low, high, steps, out["iteration_s_low"], out["iteration_s_high"]
        )
        out.update(epoch_s_low=low, epoch_s_high=high)
    return out


def consistent_epoch_bounds(
    epoch_low, epoch_high, steps, iteration_low, iteration_high
) -> tuple[np.ndarray, np.ndarray]:
    """The calibrated epoch interval raised to at least ``steps`` times the iteration's bounds.

    An epoch runs ``steps`` iterations plus an overhead >= 0 (the epoch model), so an epoch
    bound below ``steps`` times the iteration's would contradict the iteration interval; the
    two are calibrated separately, so this is checked per row.

    Args:
        epoch_low: the calibrated epoch lower bound, seconds, shape (n,).
        epoch_high: the calibrated epoch upper bound, seconds, shape (n,).
        steps: steps per epoch, shape (n,).
        iteration_low: the iteration lower bound, seconds, shape (n,).
        iteration_high: the iteration upper bound, seconds, shape (n,).

    Returns:
        ``(low, high)``, seconds, shape (n,).
    """
    steps = np.asarray(steps, dtype=float)
    return (
        np.maximum(np.asarray(epoch_low, dtype=float), steps * np.asarray(iteration_low, float)),
        np.maximum(np.asarray(epoch_high, dtype=float), steps * np.asarray(iteration_high, float)),
    )


def _distinct_specs(workloads: list[Workload]) -> tuple[list[Workload], np.ndarray]:
    """Merge equal specs (groups keyed by their records may parse to one spec)."""
    index: dict[tuple, int] = {}
    of = np.empty(len(workloads), dtype=np.int64)
    unique = []
    for g, w in enumerate(workloads):
        key = tuple(v for k, v in w.__dict__.items() if k != "dataset_size")
        of[g] = index.setdefault(key, len(unique))
        if of[g] == len(unique):
            unique.append(w)
    return unique, of


def predict_rows(
    predictor: LoadedPredictor,
    workloads: Any,
    source: str = "",
    coverage: float | None = None,
    strict: bool = False,
    first_row: int = 1,
) -> pd.DataFrame:
    """:meth:`Predictor.predict <scaledl.Predictor.predict>` without ``detail``.

    Args:
        predictor: the loaded predictor.
        workloads: a DataFrame, a list of ``Workload``s or dicts, one workload or dict.
        source: where they came from, named in errors.
        coverage: interval coverage (checked by the caller), or ``None``.
        strict: raise on the first row outside the training domain.
        first_row: the number of the first row in ``source`` (a chunk of a file).

    Returns:
        The predictions frame :meth:`Predictor.predict` documents.

    Raises:
        scaledl.workloads.fields.WorkloadError: as :meth:`Predictor.predict`.
        scaledl.models.guard.OutOfDomainError: ``strict`` and a row lies outside.
        scaledl.registry.bundle.BundleError: as :meth:`Predictor.predict`.
    """
    records, table = predictor.records(workloads, source)
    parsed = parse_rows(records, predictor.parse_record(table), source, table, first_row)
    specs, spec_of_group = _distinct_specs(parsed.workloads)
    shared = predict_specs(predictor, specs)
    row_spec = spec_of_group[parsed.group]
    reasons = [shared.reasons[s] for s in row_spec]
    if strict:
        raise_if_outside(reasons, source, first_row)
    guard = guard_columns(shared.reasons)
    batch = np.array([w.batch_size for w in specs], dtype=np.int64)[row_spec]
    columns = epoch_columns(
        predictor, shared.iteration_s[row_spec], parsed.steps_per_epoch, batch,
        guard["interval_basis"].to_numpy()[row_spec].tolist(), coverage,
    )  # fmt: skip
    result = pd.DataFrame(
        {
            "workload_id": parsed.workload_ids,
            "family": np.array([w.family for w in specs], dtype=object)[row_spec],
            "batch_size": batch,
            "world_size": np.array([w.world_size for w in specs], dtype=np.int64)[row_spec],
            **columns,
            "steps_per_epoch": parsed.steps_per_epoch,
            "used_generic_layer_model": shared.used_generic[row_spec],
            "in_domain": guard["in_domain"].to_numpy()[row_spec],
            "extrapolation": guard["extrapolation"].to_numpy()[row_spec],
        }
    )
    if coverage is not None:
        basis = guard["interval_basis"].to_numpy()[row_spec]
        result["interval_basis"] = basis
        result["interval_calibration"] = predictor.calibration.row_methods(basis.tolist(), coverage)
    result["recipe"] = np.array(shared.recipes, dtype=object)[row_spec]
    result["predictor_version"] = predictor.version
    return result
