"""The physically possible range of a layer's time: a roofline band around every prediction.

A layer cannot run faster than its work allows on its device, nor, on the evidence of the
training profiles, far slower. For one direction (forward or backward) of a layer:

* ``roofline_ms = max(flops / peak, bytes / bandwidth)`` (Williams et al. 2009), with ``flops``
  the pass's FLOPs, ``bytes`` the activations read and written (``input_bytes +
  output_bytes``) plus, backward, the weight gradient written (``4 * params``: fp32
  gradients);
* ``overhead_ms = operators * op_ms``: ATen operators launched (forward ``fwd_ops``, backward
  twice that) times the fastest per-operator time measured;
* the **lower bound** is ``max(roofline_ms, overhead_ms) / margin``;
* the **upper bound** is ``multiple * (roofline_ms + max(operators, 1) * op_ms)``.

The ceilings are those the training device *achieved*: ``peak`` is the highest FLOP/s and
``bandwidth`` the highest bytes/s any measured training layer reached in that direction, and
``op_ms`` the lowest time per operator. A profiling rank runs one thread on a shared host, so
what its layers reached is the ceiling that applies (the datasheet's or a multi-thread probe's
would be higher and the lower bound looser); every training layer lies at or above the lower
bound by construction. ``multiple`` is the largest ``measured / (roofline_ms + operators *
op_ms)`` seen in training times :data:`MARGIN`. On the reference CPU dataset (4,863 measured
nodes) the largest ratios were 17.1 forward and 87.5 backward, so the multiples 34.2 and 175
(figures in ``docs/layer_typing.md``).

:func:`bound_predictions` clamps predictions into the band and says which were clamped, and by
what; a clamped layer makes the prediction out of domain (:mod:`scaledl.models.guard`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

#: Factor on the largest measured/roofline ratio of training: the upper bound's headroom.
MARGIN = 2.0
#: Bytes per parameter of the weight gradient a backward writes (fp32 gradients).
GRAD_BYTES_PER_PARAM = 4.0
DIRECTIONS = ("forward", "backward")
_FLOPS = {"forward": "fwd_flops", "backward": "bwd_flops"}
_OPS_FACTOR = {"forward": 1.0, "backward": 2.0}


def _work(nodes: pd.DataFrame, direction: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FLOPs, bytes and ATen operators of one pass of each node, shape (n,) each."""
    flops = nodes[_FLOPS[direction]].to_numpy(np.float64)
    moved = (nodes["input_bytes"] + nodes["output_bytes"]).to_numpy(np.float64)
    if direction == "backward":
        moved = moved + GRAD_BYTES_PER_PARAM * nodes["params"].to_numpy(np.float64)
    ops = nodes["fwd_ops"].to_numpy(np.float64) * _OPS_FACTOR[direction]
    return flops, moved, ops


@dataclass(frozen=True)
class DirectionBand:
    """The band of one direction (units: FLOP, byte, millisecond).

    Attributes:
        flops_per_ms: compute ceiling (highest FLOP per ms achieved in training).
        bytes_per_ms: memory ceiling (highest bytes per ms achieved in training).
        op_ms: fastest time per ATen operator measured in training.
        max_ratio: largest ``measured / (roofline + operators * op_ms)`` in training.
        multiple: ``max_ratio * margin``: the upper bound's factor.
        margin: the lower bound's divisor (the band's :data:`MARGIN`).
        samples: training layers the band was fitted on.
    """

    flops_per_ms: float
    bytes_per_ms: float
    op_ms: float
    max_ratio: float
    multiple: float
    margin: float
    samples: int

    def roofline_ms(self, nodes: pd.DataFrame, direction: str) -> np.ndarray:
        """``max(flops / peak, bytes / bandwidth)`` of each node, shape (n,)."""
        flops, moved, _ = _work(nodes, direction)
        return np.maximum(flops / self.flops_per_ms, moved / self.bytes_per_ms)

    def bounds(self, nodes: pd.DataFrame, direction: str) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bounds in ms of each node, shapes (n,) (module docstring)."""
        _, _, ops = _work(nodes, direction)
        roof = self.roofline_ms(nodes, direction)
        low = np.maximum(roof, ops * self.op_ms) / self.margin
        high = self.multiple * (roof + np.maximum(ops, 1.0) * self.op_ms)
        return low, high


@dataclass(frozen=True)
class RooflineBand:
    """Forward and backward bands fitted on one device's measured layers.

    Attributes:
        directions: ``{"forward": DirectionBand, "backward": DirectionBand}`` (a direction
            without measured layers is absent and not bounded).
        margin: the factor on the largest training ratio.
    """

    directions: dict[str, DirectionBand]
    margin: float = MARGIN

    @classmethod
    def fit(cls, samples: pd.DataFrame, margin: float = MARGIN) -> RooflineBand:
        """Fit the ceilings and multiples on measured layers.

        Args:
            samples: measured nodes: ``forward_ms``, ``backward_ms``, ``fwd_flops``,
                ``bwd_flops``, ``fwd_ops``, ``input_bytes``, ``output_bytes``, ``params``
                and, when present, ``node_kind`` (only ``layer`` rows are used).
            margin: factor >= 1 on the largest ratio.

        Returns:
            The band.

        Raises:
            ValueError: ``margin`` < 1, or no measured layer with work to fit on.
        """
        if not margin >= 1.0:
            raise ValueError(f"roofline band: field 'margin' must be >= 1, got {margin!r}")
        if "node_kind" in samples:
            samples = samples[samples["node_kind"] == "layer"]
        directions = {}
        for direction in DIRECTIONS:
            rows = samples[samples[f"{direction}_ms"].fillna(0.0) > 0]
            if rows.empty:
                continue
            t = rows[f"{direction}_ms"].to_numpy(np.float64)
            flops, moved, ops = _work(rows, direction)
            flops_per_ms, bytes_per_ms = float((flops / t).max()), float((moved / t).max())
            with_ops = ops > 0
            if flops_per_ms <= 0 or bytes_per_ms <= 0 or not with_ops.any():
                raise ValueError(
                    f"roofline band: the {direction} training layers have no FLOPs, bytes or "
                    "operators to fit ceilings on"
                )
            op_ms = float((t[with_ops] / ops[with_ops]).min())
            roof = np.maximum(flops / flops_per_ms, moved / bytes_per_ms)
            max_ratio = float((t / (roof + np.maximum(ops, 1.0) * op_ms)).max())
            directions[direction] = DirectionBand(
                flops_per_ms, bytes_per_ms, op_ms, max_ratio, max_ratio * margin, margin, len(rows)
            )
        if not directions:
            raise ValueError("roofline band: no measured layer to fit on")
        return cls(directions, margin)

    def to_dict(self) -> dict:
        """A JSON-able record (:meth:`from_dict` reads it back)."""
        return {
            "margin": self.margin,
            "directions": {d: vars(b).copy() for d, b in self.directions.items()},
        }

    @classmethod
    def from_dict(cls, record: dict) -> RooflineBand:
        """The band of :meth:`to_dict`'s record.

        Raises:
            ValueError: a missing or non-positive field (named).
        """
        directions = {}
        for direction, fields in dict(record["directions"]).items():
            if direction not in DIRECTIONS:
                raise ValueError(f"roofline band: unknown direction {direction!r}")
            band = DirectionBand(**fields)
            for name, value in vars(band).items():
                if not (np.isfinite(value) and value > 0):
                    raise ValueError(
                        f"roofline band: field 'directions.{direction}.{name}' must be a "
                        f"positive number, got {value!r}"
                    )
            directions[direction] = band
        return cls(directions, float(record["margin"]))


def bound_predictions(band: RooflineBand, nodes: pd.DataFrame, pred: pd.DataFrame) -> pd.DataFrame:
    """Clamp layer predictions into the band and say which were clamped.

    Args:
        band: the fitted band.
        nodes: the predicted nodes (columns of :func:`_work`, and ``node_kind`` when present:
            only ``layer`` nodes are bounded).
        pred: ``forward_ms`` and ``backward_ms`` aligned with ``nodes`` (a 0 prediction, a pass
            not run or not modelled, is left as is).

    Returns:
        ``pred`` with the times clamped and a ``bounded`` column: ``""``, or per clamped pass
        ``"<direction> <predicted> ms -> <bound> ms (<below 1/margin of the roofline | above N x
        roofline+overhead>)"``, ``"; "``-joined. The note does not name the layer: a
        prediction is shared by every node equal in what the models read
        (:func:`scaledl.models.node_times.node_predictions`), whatever its name;
        :func:`named_notes` adds the names.
    """
    out = pred.copy()
    notes = [[] for _ in range(len(out))]
    layer = (
        (nodes["node_kind"] == "layer").to_numpy()
        if "node_kind" in nodes
        else np.ones(len(nodes), dtype=bool)
    )
    for direction, b in band.directions.items():
        column = f"{direction}_ms"
        values = out[column].to_numpy(np.float64)
        low, high = b.bounds(nodes, direction)
        active = layer & (values > 0)
        below = active & (values < low)
        above = active & (values > high)
        for i in np.flatnonzero(below | above):
            bound = low[i] if below[i] else high[i]
            why = (
                f"below 1/{b.margin:g} of the roofline"
                if below[i]
                else f"above {b.multiple:.3g} x roofline+overhead"
            )
            notes[i].append(f"{direction} {values[i]:.4g} ms -> {bound:.4g} ms ({why})")
        out[column] = np.where(below, low, np.where(above, high, values))
    out["bounded"] = ["; ".join(n) for n in notes]
    return out


def named_notes(layer_names, notes) -> list[str]:
    """Each clamp note of :func:`bound_predictions` prefixed by its layer's name, per pass.

    Args:
        layer_names: node names, shape (n,).
        notes: their ``bounded`` notes, shape (n,) (``""``: not clamped, stays ``""``).

    Returns:
        ``"<layer> <note>"`` per clamped pass, ``"; "``-joined, per node.
    """
    return [
        "; ".join(f"{name} {part}" for part in str(note).split("; ")) if note else ""
        for name, note in zip(layer_names, notes, strict=True)
    ]
