"""How much of each collective lane hides behind compute: measured overlap factors.

The composition (:mod:`scaledl.parallel.compose`) puts a layout's data-parallel collectives on
communication lanes beside the compute (DDP's bucket all-reduces, FSDP's prefetched
all-gathers and its reduce-scatters) and the pipeline's transfers on link lanes: with a
dedicated communication engine (NCCL on its own CUDA stream) they overlap the compute fully.
On a CPU host with gloo the collectives run on threads that compete with the ranks' compute for
the same cores, so only part of each collective is hidden. An :class:`Overlap` holds, per lane
of :data:`LANES`, the fraction ``h`` in ``[0, 1]`` of a collective's time that stays on its lane
(hidden); the remaining ``1 - h`` is added to the compute it would overlap (exposed):
``h = 1`` is the composition's full overlap, ``h = 0`` a serial collective.

:func:`fit_overlap` chooses the factors on *training* workloads only, by a one-dimensional grid
search per lane (the grid, :data:`GRID`, and the criterion are fixed a priori): first one factor
shared by every lane, then each lane the training workloads exercise on its own, the others
held. A lane no training workload exercises gets ``h = 0`` (``source`` ``exposed``): a
collective nothing measured is put on the critical path (the shared factor it kept before
2026-12-03 came from other mechanisms and moved a held-out FSDP composition by up to 27 points:
``docs/history/2026-12-code-notes.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

#: Collective lanes with an overlap factor (the tensor-parallel all-reduces are on the critical
#: path by construction, ZeRO-1's broadcasts follow the step: neither overlaps anything).
LANES = ("all_reduce", "all_gather", "reduce_scatter", "send")
#: Candidate factors of the grid search (fixed a priori, step 0.05).
GRID = np.round(np.linspace(0.0, 1.0, 21), 2)


@dataclass(frozen=True)
class Overlap:
    """Hidden fraction of each collective lane.

    Attributes:
        hidden: ``{lane: h}`` for every lane of :data:`LANES`, each in ``[0, 1]``.
        source: ``{lane: "assumed" | "fitted" | "exposed"}`` (``pooled``: a calibration of
            before 2026-12-03, module docstring).

    Raises:
        ValueError: a lane missing or a factor outside ``[0, 1]`` (naming the lane).
    """

    hidden: dict[str, float]
    source: dict[str, str]

    def __post_init__(self) -> None:
        for lane in LANES:
            h = self.hidden.get(lane)
            if h is None or not 0.0 <= h <= 1.0:
                raise ValueError(f"overlap: field {lane!r} must be in [0, 1], got {h!r}")

    @classmethod
    def full(cls) -> Overlap:
        """Every collective hidden behind compute (the composition's assumption)."""
        return cls.uniform(1.0, "assumed")

    @classmethod
    def uniform(cls, h: float, source: str = "fitted") -> Overlap:
        """One factor ``h`` for every lane."""
        return cls(dict.fromkeys(LANES, float(h)), dict.fromkeys(LANES, source))

    def split(self, lane: str, time_ms):
        """``(hidden_ms, exposed_ms)`` of a collective time on ``lane`` (any array shape)."""
        h = self.hidden[lane]
        return h * time_ms, (1.0 - h) * time_ms

    def to_dict(self) -> dict:
        """JSON-safe factors and sources."""
        return {"hidden": dict(self.hidden), "source": dict(self.source)}


def fit_overlap(
    spread: Callable[[Overlap], float], lanes_used: Iterable[str], grid: np.ndarray = GRID
) -> Overlap:
    """Choose the overlap factors on training workloads (module docstring).

    Args:
        spread: the criterion to minimise for a candidate :class:`Overlap`, computed on the
            training workloads only (the evaluation passes the standard deviation of
            ``log(measured / composed)``: the factors that make the composition's error most
            uniform, its level left to the learned correction).
        lanes_used: the lanes the training workloads exercise.
        grid: candidate factors, ascending; the first minimum wins.

    Returns:
        The fitted :class:`Overlap` (``Overlap.full()`` when no lane is used; a lane not used:
        0, ``exposed``).
    """
    used = [lane for lane in LANES if lane in set(lanes_used)]
    if not used:
        return Overlap.full()
    shared = float(grid[int(np.argmin([spread(Overlap.uniform(h)) for h in grid]))])
    hidden = {lane: shared if lane in used else 0.0 for lane in LANES}
    source = dict.fromkeys(LANES, "exposed")
    for lane in used:
        scores = [spread(Overlap({**hidden, lane: float(h)}, source)) for h in grid]
        hidden[lane] = float(grid[int(np.argmin(scores))])
        source[lane] = "fitted"
    return Overlap(hidden, source)
