"""Choose the workloads to profile: D-optimal, random or Latin-hypercube designs of a preset.

:func:`generate_design` builds a design from scratch; :func:`augment_design` adds ``k`` workloads
to the ones already profiled so that the determinant of the *combined* design is maximal
(sequential design, Atkinson, Donev & Tobias 2007, §11.5 and ch. 12; used for scheduled
retraining, weighted by the predictor's uncertainty when it is given). The D-optimal criterion
matched to the predictor is :mod:`scaledl.design.matched`; the response-surface criterion and its
exchange algorithm are in :mod:`scaledl.design.doptimal`, its model matrix in
:mod:`scaledl.design.features`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from scaledl.design.doptimal import d_efficiency, d_optimal_indices, log_det_information
from scaledl.design.errors import DesignError
from scaledl.design.features import FeatureModel, check_estimable, workload_factors
from scaledl.design.matched import (
    candidate_information,
    matched_d_optimal_indices,
    sequential_indices,
)
from scaledl.design.presets import SAMPLERS
from scaledl.design.samplers import lhs_indices, random_indices
from scaledl.design.space import candidate_workloads
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.spec import Workload

AUGMENT_SAMPLER = "doptimal-augment"
SEQUENTIAL_SAMPLER = "sequential"
DESIGN_COLUMNS = ("sampler", "seed", "log_det", "d_efficiency")


@dataclass
class DesignResult:
    """A chosen design.

    Attributes:
        table: one row per chosen workload: ``workload_id``, every :class:`Workload` field
            (``Workload.to_record()``), then ``sampler``, ``seed``, ``log_det``,
            ``d_efficiency`` (design-level values repeated on every row).
        log_det: ``log det(X^T X)`` of the design's model matrix (for an augmentation: of the
            combined design, profiled rows included); ``-inf`` when singular.
        d_efficiency: ``det(X^T X / n)^(1/p)`` (Atkinson et al. 2007, §11.1), 0 when singular.
        sampler: ``doptimal``, ``random``, ``lhs`` or ``doptimal-augment``.
        seed: the random seed.
        n_candidates: feasible candidates the design was chosen from.
        n_terms: model terms ``p``.
        terms: names of the model terms.
        n_fixed: rows already in the design (augmentation), 0 otherwise.
        preset: name of the preset.
        metadata: extra design-level values (``log_det_existing`` for an augmentation).
    """

    table: pd.DataFrame
    log_det: float
    d_efficiency: float
    sampler: str
    seed: int
    n_candidates: int
    n_terms: int
    terms: tuple[str, ...] = ()
    n_fixed: int = 0
    preset: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """Design-level values as a JSON-serialisable dict (stored in the parquet metadata)."""
        return {
            "sampler": self.sampler,
            "seed": self.seed,
            "log_det": self.log_det,
            "d_efficiency": self.d_efficiency,
            "n_workloads": len(self.table),
            "n_fixed": self.n_fixed,
            "n_candidates": self.n_candidates,
            "n_terms": self.n_terms,
            "terms": list(self.terms),
            "preset": self.preset,
            **self.metadata,
        }


def generate_design(
    preset: dict[str, Any],
    n: int,
    sampler: str = "doptimal",
    seed: int = 0,
    device_name: str = "cpu",
    backend: str = "gloo",
    n_starts: int | None = None,
) -> DesignResult:
    """Choose ``n`` workloads from a preset's candidates.

    Args:
        preset: a validated preset (:func:`scaledl.design.load_preset`).
        n: workloads to choose.
        sampler: ``doptimal`` (the criterion matched to the predictor,
            :mod:`scaledl.design.matched`: a compound D-criterion over the layer-wise models'
            information per layer type and the GNN's cells), ``doptimal-surface`` (modified
            Fedorov exchange maximising ``log det(X^T X)`` of the workload-level response
            surface), ``random`` (uniform without replacement) or ``lhs`` (Latin hypercube
            mapped to the nearest candidates). ``log_det`` and ``d_efficiency`` of the result
            are always the response surface's (comparable across samplers); a ``doptimal``
            design also stores its criterion value as ``matched_criterion``.
        seed: random seed; the design is deterministic for a seed.
        device_name: ``device_name`` of the workloads.
        backend: ``gloo`` or ``nccl``.
        n_starts: random starts of the exchange; defaults to ``preset["design"]["n_starts"]``.

    Returns:
        The design.

    Raises:
        DesignError: unknown sampler; ``n`` larger than the candidate set; fewer candidates or
            (for ``doptimal``) fewer runs than model terms; a singular model (aliased terms).
        PresetError: a family of the preset has no feasible candidate.
    """
    if sampler not in SAMPLERS:
        raise DesignError(f"unknown sampler {sampler!r}; expected one of {SAMPLERS}")
    candidates = candidate_workloads(preset, device_name, backend)
    if not (isinstance(n, int | np.integer) and 1 <= n <= len(candidates)):
        raise DesignError(
            f"preset {preset.get('name')!r}: cannot choose n={n!r} workloads from "
            f"{len(candidates)} candidates"
        )
    numeric, categorical = workload_factors(candidates)
    model = FeatureModel.fit(numeric, categorical, preset["design"]["model"])
    X = model.transform(numeric, categorical)
    check_estimable(X, model.terms, source=f"preset {preset.get('name')!r} candidate set")
    starts = int(n_starts if n_starts is not None else preset["design"]["n_starts"])
    criterion = None
    if sampler == "doptimal":
        info = candidate_information(candidates)
        idx, criterion = matched_d_optimal_indices(info, n, seed=seed, n_starts=starts)
        log_det = log_det_information(X[idx])
    elif sampler == "doptimal-surface":
        idx, log_det = d_optimal_indices(X, n, seed=seed, n_starts=starts)
    elif sampler == "random":
        idx = random_indices(len(candidates), n, seed)
        log_det = log_det_information(X[idx])
    else:
        idx = lhs_indices(model.unit_coordinates(numeric, categorical), n, seed)
        log_det = log_det_information(X[idx])
    chosen = [candidates[i] for i in idx]
    result = _result(chosen, sampler, seed, log_det, model, len(candidates), 0, preset)
    if criterion is not None:
        result.metadata["matched_criterion"] = criterion
    return result


def augment_design(
    preset: dict[str, Any],
    existing: pd.DataFrame,
    k: int,
    seed: int = 0,
    device_name: str = "cpu",
    backend: str = "gloo",
    n_starts: int | None = None,
    criterion: str = "matched",
    uncertainty: Callable[[list[Workload]], np.ndarray] | None = None,
) -> DesignResult:
    """Choose ``k`` more workloads maximising the criterion of the combined design.

    The already-profiled workloads are fixed rows of the design: they count in the criterion,
    are never removed and never chosen again (by ``workload_id``). Factor coding ranges and
    levels are fitted on candidates and profiled workloads together, so profiled workloads
    outside the preset's levels are coded consistently.

    With ``criterion="matched"`` (default) the combined design maximises the criterion matched
    to the predictor (:mod:`scaledl.design.matched`); given ``uncertainty`` (the predictor's
    relative uncertainty about each new candidate, e.g. its interval width over its
    prediction), the new workloads are the sequential design's: the uncertainty-weighted
    D-optimal augmentation (:func:`scaledl.design.matched.sequential_indices`), sampler
    ``sequential``. ``criterion="surface"`` maximises ``log det(X^T X)`` of the response
    surface (the product's criterion before the matched one).

    Args:
        preset: a validated preset (:func:`scaledl.design.load_preset`).
        existing: the design or workloads table of the profiled workloads: ``Workload`` fields
            per row (other columns are ignored); ``workload_id``, if present, must match the spec.
        k: new workloads to choose.
        seed: random seed.
        device_name: ``device_name`` of the new workloads.
        backend: ``gloo`` or ``nccl``.
        n_starts: random starts; defaults to ``preset["design"]["n_starts"]``.
        criterion: ``matched`` or ``surface`` (see above).
        uncertainty: ``new candidates -> (n_new,)`` positive relative uncertainties, or
            ``None`` for the unweighted criterion (``matched`` only).

    Returns:
        A design holding only the ``k`` new workloads; ``log_det`` and ``d_efficiency`` are of
        the combined design's response surface (``n = len(existing) + k``), ``sampler`` is
        ``doptimal-augment`` (or ``sequential`` with ``uncertainty``).

    Raises:
        DesignError: an ``existing`` row is not a valid workload or its ``workload_id`` does
            not match; ``k`` exceeds the new candidates; the combined design has fewer runs than
            model terms; a singular model.
    """
    profiled = workloads_from_table(existing, source="existing design")
    new = _unprofiled_candidates(preset, profiled, k, device_name, backend)
    pool = profiled + new
    numeric, categorical = workload_factors(pool)
    model = FeatureModel.fit(numeric, categorical, preset["design"]["model"])
    X = model.transform(numeric, categorical)
    check_estimable(X, model.terms, source=f"preset {preset.get('name')!r} candidates + existing")
    starts = int(n_starts if n_starts is not None else preset["design"]["n_starts"])
    idx, log_det, sampler = _augment_indices(
        X, pool, len(profiled), k, criterion, uncertainty, seed, starts
    )
    chosen = [pool[i] for i in idx]
    result = _result(chosen, sampler, seed, log_det, model, len(new), len(profiled), preset)
    result.metadata["log_det_existing"] = log_det_information(X[: len(profiled)])
    return result


def _unprofiled_candidates(
    preset: dict[str, Any], profiled: list[Workload], k: Any, device_name: str, backend: str
) -> list[Workload]:
    """The preset's candidates not profiled yet (by ``workload_id``), at least ``k`` of them.

    Raises:
        DesignError: ``k`` is not an integer in ``[1, number of new candidates]``.
    """
    profiled_ids = {w.workload_id for w in profiled}
    new = [
        w
        for w in candidate_workloads(preset, device_name, backend)
        if w.workload_id not in profiled_ids
    ]
    if not (isinstance(k, int | np.integer) and 1 <= k <= len(new)):
        raise DesignError(
            f"preset {preset.get('name')!r}: cannot choose k={k!r} new workloads: "
            f"{len(new)} candidates are not profiled yet"
        )
    return new


def _augment_indices(
    X: np.ndarray,
    pool: list[Workload],
    n_profiled: int,
    k: int,
    criterion: str,
    uncertainty: Callable[[list[Workload]], np.ndarray] | None,
    seed: int,
    n_starts: int,
) -> tuple[np.ndarray, float, str]:
    """The rows of ``pool`` to add to its first ``n_profiled`` (fixed) rows.

    Args:
        X: the coded response-surface matrix of ``pool``, shape (len(pool), terms).
        pool: the profiled workloads, then the new candidates.
        n_profiled: how many leading rows of ``pool`` are profiled (fixed).
        k: new rows to choose.
        criterion: ``matched`` or ``surface`` (see :func:`augment_design`).
        uncertainty: the new candidates' relative uncertainties, or ``None``.
        seed: random seed.
        n_starts: random starts of the exchange.

    Returns:
        ``(indices into pool, log det of the combined response surface, sampler name)``.

    Raises:
        DesignError: an unknown criterion, or ``uncertainty`` with ``surface``.
    """
    fixed = range(n_profiled)
    if criterion == "surface":
        if uncertainty is not None:
            raise DesignError("augment_design: uncertainty needs criterion='matched'")
        idx, log_det = d_optimal_indices(X, k, seed=seed, n_starts=n_starts, fixed=fixed)
        return idx, log_det, AUGMENT_SAMPLER
    if criterion != "matched":
        raise DesignError(
            f"augment_design: criterion must be 'matched' or 'surface', got {criterion!r}"
        )
    info = candidate_information(pool)
    sampler = AUGMENT_SAMPLER
    if uncertainty is None:
        combined, _ = matched_d_optimal_indices(
            info, n_profiled + k, seed=seed, n_starts=n_starts, include=list(fixed)
        )
        idx = np.setdiff1d(combined, np.arange(n_profiled))
    else:
        weights = np.ones(len(pool))
        weights[n_profiled:] = np.asarray(uncertainty(pool[n_profiled:]), dtype=float)
        idx = sequential_indices(info, list(fixed), k, weights)
        sampler = SEQUENTIAL_SAMPLER
    log_det = log_det_information(np.vstack([X[:n_profiled], X[idx]]))
    return idx, log_det, sampler


def workloads_from_table(table: pd.DataFrame, source: str = "table") -> list[Workload]:
    """Parse the rows of a design/workloads table into workloads, deduplicated by id.

    Args:
        table: one workload per row; columns that are not :class:`Workload` fields are ignored.
        source: name of the table, used in errors.

    Returns:
        The workloads in row order (first occurrence of each ``workload_id``).

    Raises:
        DesignError: ``table`` is not a DataFrame, a row is not a valid workload, or its
            ``workload_id`` column disagrees with the spec.
    """
    if not isinstance(table, pd.DataFrame):
        raise DesignError(f"{source}: expected a pandas DataFrame, got {type(table).__name__}")
    if len(table) and "family" not in table.columns:
        raise DesignError(f"{source}: no 'family' column; columns are {list(table.columns)}")
    fields = [c for c in Workload.model_fields if c in table.columns]
    out: list[Workload] = []
    seen: set[str] = set()
    for pos, (_, row) in enumerate(table.iterrows()):
        spec = {c: _plain(row[c]) for c in fields}
        try:
            w = Workload.from_record(spec, source=f"{source} row {pos}")
        except WorkloadError as exc:
            raise DesignError(str(exc)) from None
        if "workload_id" in table.columns:
            given = row["workload_id"]
            if isinstance(given, str) and given != w.workload_id:
                raise DesignError(
                    f"{source} row {pos}: workload_id {given!r} does not match its spec "
                    f"(computed {w.workload_id!r})"
                )
        if w.workload_id not in seen:
            seen.add(w.workload_id)
            out.append(w)
    return out


def design_table(
    workloads: Sequence[Workload], sampler: str, seed: int, log_det: float, d_eff: float
) -> pd.DataFrame:
    """The design table: ``Workload.to_record()`` rows plus the design columns."""
    records = [
        {
            **w.to_record(),
            "sampler": sampler,
            "seed": int(seed),
            "log_det": float(log_det),
            "d_efficiency": float(d_eff),
        }
        for w in workloads
    ]
    columns = ["workload_id", *Workload.model_fields, *DESIGN_COLUMNS]
    return pd.DataFrame.from_records(records, columns=columns)


def _result(
    chosen: list[Workload],
    sampler: str,
    seed: int,
    log_det: float,
    model: FeatureModel,
    n_candidates: int,
    n_fixed: int,
    preset: dict[str, Any],
) -> DesignResult:
    d_eff = d_efficiency(log_det, len(chosen) + n_fixed, model.n_terms)
    return DesignResult(
        table=design_table(chosen, sampler, seed, log_det, d_eff),
        log_det=float(log_det),
        d_efficiency=d_eff,
        sampler=sampler,
        seed=int(seed),
        n_candidates=n_candidates,
        n_terms=model.n_terms,
        terms=model.terms,
        n_fixed=n_fixed,
        preset=str(preset.get("name", "")),
    )


def _plain(value: Any) -> Any:
    """A table cell as a plain Python value; NaN/NA/None -> None."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
