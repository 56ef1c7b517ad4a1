"""The domain guard: whether a prediction interpolates the training data or guesses beyond it.

Every prediction of a :class:`~scaledl.Predictor` is checked against the predictor's
:class:`~scaledl.models.domain.TrainingDomain` and carries ``in_domain`` (no reason below
applies) and ``extrapolation`` (the reasons, ``"; "``-joined, ``""`` in domain):

* ``family``: a family (``hf:<model_type>`` for Hugging Face configs) never trained on;
* ``precision``, ``mode``: a precision or mode never trained on (a predictor trained on
  ``fp32`` knows nothing of ``bf16`` kernels);
* ``num_nodes``, ``world_size``: a node count or world size never trained on (inter-node
  all-reduce, more ranks: the all-reduce model and the GNN extrapolate);
* ``layer_type``: layer types the layer-wise models predicted with their generic model (a type
  never measured, or measured too rarely for a model of its own);
* ``layer_time``: layer times the layer-wise models predicted outside the physically possible
  band and that were clamped into it (:mod:`scaledl.models.roofline`; which layer, which pass,
  from what to what);
* a size feature of :data:`~scaledl.models.domain.RANGE_FEATURES` outside its training range.

* ``device_name``: a device never trained on. A CPU predictor refuses such a device before
  predicting (it has no device features to extrapolate from); a GPU predictor (kernel-aware,
  :mod:`scaledl.registry.kernel_bundle`) predicts it from its specs and flags it here.

Each reason says which calibration stratum (:mod:`scaledl.models.intervals`) measures such
errors: ``unseen_family`` for a new family, ``beyond_range`` for sizes beyond the training
range, ``unseen_device`` for a device never trained on (the GPU evaluation's leave-one-GPU-out
errors), none for the others, which no evaluation split covers. The interval basis of a row is
``in_domain`` without reasons, the single stratum its reasons share, or ``widest`` (the widest
calibrated stratum) when they need several strata or one no stratum covers: an out-of-domain
prediction is flagged *and* its interval widens, it is never silently confident.
``strict=True`` turns any reason into an :class:`OutOfDomainError` naming the row and field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from scaledl.models.domain import TrainingDomain, range_features
from scaledl.models.roofline import named_notes
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.identity import family_key
from scaledl.workloads.spec import Workload


class OutOfDomainError(WorkloadError):
    """A workload lies outside the predictor's training domain and ``strict`` was asked."""


@dataclass(frozen=True)
class Extrapolation:
    """One reason a prediction lies outside the training domain.

    Attributes:
        field: the workload field (or derived size feature) that is outside.
        value: its value.
        reason: what is outside, in words.
        stratum: the calibration stratum that measures such errors, ``None`` when none does.
    """

    field: str
    value: Any
    reason: str
    stratum: str | None

    def text(self) -> str:
        """``field=value: reason``."""
        return f"{self.field}={_show(self.value)}: {self.reason}"


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _categorical(w: Workload, domain: TrainingDomain) -> list[Extrapolation]:
    out = []
    family = family_key(w)
    if family not in domain.families:
        out.append(
            Extrapolation(
                "family",
                family,
                f"family never trained on (trained on {list(domain.families)})",
                "unseen_family",
            )
        )
    if w.device_name not in domain.devices:
        out.append(
            Extrapolation(
                "device_name",
                w.device_name,
                f"device never trained on, predicted from its specs (trained on "
                f"{list(domain.devices)})",
                "unseen_device",
            )
        )
    checks = (
        ("precision", w.precision, domain.precisions, "precision"),
        ("mode", w.mode, domain.modes, "mode"),
        ("num_nodes", w.num_nodes, domain.num_nodes, "node count"),
        ("world_size", w.world_size, domain.world_sizes, "world size"),
    )
    for name, value, seen, what in checks:
        if value not in seen:
            reason = f"{what} never trained on (trained on {list(seen)})"
            out.append(Extrapolation(name, value, reason, None))
    return out


def _generic_types(nodes: pd.DataFrame | None) -> dict[str, list[str]]:
    """Workload id -> layer types its prediction took from the generic layer model."""
    if nodes is None or nodes.empty:
        return {}
    used = nodes[nodes["used_generic"].astype(bool)]
    return {
        str(wid): sorted(set(group["layer_type"].astype(str)))
        for wid, group in used.groupby("workload_id")
    }


#: Clamped layer passes named in one reason; the rest are counted.
MAX_BOUNDED_SHOWN = 3


def _bounded_layers(nodes: pd.DataFrame | None) -> dict[str, tuple[str, ...]]:
    """Workload id -> the clamp notes of its nodes (``bounded`` column; none without it).

    With a ``layer_name`` column (per-node predictions), each note is prefixed by its layer's
    name (:func:`~scaledl.models.roofline.named_notes`); without, the notes name it already.
    """
    if nodes is None or nodes.empty or "bounded" not in nodes:
        return {}
    clamped = nodes[nodes["bounded"].astype(str) != ""]
    notes = clamped["bounded"].astype(str).to_numpy()
    if "layer_name" in clamped:
        notes = np.array(named_notes(clamped["layer_name"].astype(str), notes), dtype=object)
    frame = pd.DataFrame({"workload_id": clamped["workload_id"].astype(str), "note": notes})
    return {str(wid): tuple(group["note"]) for wid, group in frame.groupby("workload_id")}


def _bounded_reasons(notes: tuple[str, ...]) -> list[Extrapolation]:
    """The reason for layer times clamped into the roofline band (none: no reason)."""
    if not notes:
        return []
    passes = [p for note in notes for p in note.split("; ")]
    shown = "; ".join(passes[:MAX_BOUNDED_SHOWN])
    more = len(passes) - MAX_BOUNDED_SHOWN
    tail = f"; and {more} more" if more > 0 else ""
    return [
        Extrapolation(
            "layer_time",
            f"{len(passes)} layer pass(es)",
            f"clamped into the roofline band: {shown}{tail}",
            None,
        )
    ]


def check_domain(
    workloads: list[Workload],
    domain: TrainingDomain | None,
    nodes: pd.DataFrame | None = None,
    ids: list[str] | None = None,
    arch_keys: list[str] | None = None,
) -> list[list[Extrapolation]]:
    """The reasons each workload lies outside the training domain.

    Args:
        workloads: the workloads predicted.
        domain: the predictor's training domain; ``None`` (a bundle written before domains were
            recorded) flags every workload.
        nodes: the per-node predictions (``workload_id``, ``layer_type``, ``used_generic`` and
            optionally ``bounded``), for the layer-type and layer-time reasons.
        ids: the workloads' ids as ``nodes`` names them (default their ``workload_id``).
        arch_keys: their :func:`~scaledl.graph.features.architecture_key`, when known.

    Returns:
        One list of :class:`Extrapolation` per workload (empty: in domain).

    Raises:
        scaledl.workloads.fields.WorkloadError: a workload's model cannot be traced.
    """
    if domain is None:
        reason = Extrapolation(
            "training_domain",
            None,
            "the bundle records no training domain (written before the domain guard): retrain it",
            None,
        )
        return [[reason] for _ in workloads]
    features = range_features(workloads, arch_keys=arch_keys)
    ranges = [(name, lo, hi) for name, (lo, hi) in domain.ranges.items() if name in features]
    values = features[[name for name, _, _ in ranges]].to_numpy(dtype=float)
    lows, highs = np.array([r[1] for r in ranges]), np.array([r[2] for r in ranges])
    outside = np.isfinite(values) & ((values < lows) | (values > highs))
    generic = _generic_types(nodes)
    bounded = _bounded_layers(nodes)
    # Reasons are built once per distinct cause and shared by the workloads they apply to (a
    # planner's grid repeats each world size, each batch, each set of generic layer types).
    categorical: dict[tuple, list[Extrapolation]] = {}
    layer: dict[tuple[str, ...], list[Extrapolation]] = {}
    sizes: dict[tuple, list[Extrapolation]] = {}
    out = []
    for i, w in enumerate(workloads):
        key = (w.family, w.config_path, w.precision, w.mode, w.num_nodes, w.world_size)
        if key not in categorical:
            categorical[key] = _categorical(w, domain)
        types = tuple(generic.get(w.workload_id if ids is None else ids[i], []))
        if types not in layer:
            layer[types] = _layer_type_reasons(types, domain)
        cols = np.flatnonzero(outside[i])
        size_key = (tuple(cols.tolist()), tuple(values[i, cols].tolist()))
        if size_key not in sizes:
            sizes[size_key] = _size_reasons([ranges[j] for j in cols], size_key[1])
        notes = bounded.get(w.workload_id if ids is None else ids[i], ())
        out.append(categorical[key] + layer[types] + sizes[size_key] + _bounded_reasons(notes))
    return out


def _layer_type_reasons(types: tuple[str, ...], domain: TrainingDomain) -> list[Extrapolation]:
    """The reason for layer types predicted by the generic layer model (none: no reason)."""
    if not types:
        return []
    never = [t for t in types if t not in domain.layer_types]
    detail = f"never measured in training: {never}" if never else "too few measured"
    return [
        Extrapolation(
            "layer_type", ",".join(types), f"predicted by the generic layer model ({detail})", None
        )
    ]


def _size_reasons(ranges: list[tuple[str, float, float]], values: tuple) -> list[Extrapolation]:
    """The reasons for size features outside their training range."""
    reasons = []
    for (name, lo, hi), value in zip(ranges, values, strict=True):
        side = "above" if value > hi else "below"
        reason = f"{side} the training range [{lo:.4g}, {hi:.4g}]"
        reasons.append(Extrapolation(name, float(value), reason, "beyond_range"))
    return reasons


def interval_basis(reasons: list[Extrapolation]) -> str:
    """The calibration stratum of a prediction with these reasons (module docstring)."""
    if not reasons:
        return "in_domain"
    strata = {r.stratum for r in reasons}
    if len(strata) == 1 and None not in strata:
        return strata.pop()
    return "widest"


def guard_columns(reasons: list[list[Extrapolation]]) -> pd.DataFrame:
    """``in_domain``, ``extrapolation`` and ``interval_basis`` columns of the reasons.

    Returns:
        One row per workload.
    """
    texts: dict[int, str] = {}  # reasons are shared by many rows (check_domain): text once
    for r in reasons:
        for x in r:
            if id(x) not in texts:
                texts[id(x)] = x.text()
    return pd.DataFrame(
        {
            "in_domain": [not r for r in reasons],
            "extrapolation": ["; ".join([texts[id(x)] for x in r]) for r in reasons],
            "interval_basis": [interval_basis(r) for r in reasons],
        }
    )


def raise_if_outside(
    reasons: list[list[Extrapolation]], source: str = "", first_row: int = 1
) -> None:
    """:class:`OutOfDomainError` for the first workload outside the domain (``strict``).

    Args:
        reasons: per workload, from :func:`check_domain`.
        source: where the workloads came from (a file), named in the message.
        first_row: the row number of ``reasons[0]`` in the source (a chunk of a file; the
            count of other rows outside is then the chunk's).

    Raises:
        OutOfDomainError: naming the source, the row (from 1), each field and value, and how
            many other rows are outside too.
    """
    flagged = [i for i, r in enumerate(reasons) if r]
    if not flagged:
        return
    first = flagged[0]
    prefix = f"{source}: " if source else ""
    fields = "; ".join(
        f"field {r.field!r} (value {_show(r.value)}): {r.reason}" for r in reasons[first]
    )
    more = f" ({len(flagged) - 1} more row(s) outside too)" if len(flagged) > 1 else ""
    raise OutOfDomainError(
        f"{prefix}row {first + first_row}: outside the predictor's training domain (strict): "
        f"{fields}{more}"
    )


def summarise_outside(extrapolation: list[str], shown: int = 5) -> list[str]:
    """Lines telling which rows lie outside the training domain, summarised when many do.

    With at most ``shown`` rows outside, one line per row (``row 3: outside the training
    domain: <reasons>``). With more, one headline, one line per reason (field and reason,
    values dropped) with its count of rows, and the first ``shown`` rows, so a file of a
    million rows prints a few lines, not a million.

    Args:
        extrapolation: the ``extrapolation`` column of :meth:`Predictor.predict` (``""``
            in domain), in row order.
        shown: rows listed in full.

    Returns:
        The lines (none when every row lies in domain).
    """
    flagged = [(i, text) for i, text in enumerate(extrapolation) if text]
    rows = [f"row {i + 1}: outside the training domain: {text}" for i, text in flagged[:shown]]
    if len(flagged) <= shown:
        return rows
    counts: dict[str, int] = {}
    for _, text in flagged:
        for item in set(text.split("; ")):
            field, _, reason = item.partition(": ")
            key = f"{field.partition('=')[0]}: {reason}"
            counts[key] = counts.get(key, 0) + 1
    lines = [f"{len(flagged)} of {len(extrapolation)} rows outside the training domain, by reason:"]
    lines += [f"  {n} rows: {key}" for key, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    return [*lines, f"the first {shown}:", *rows]
