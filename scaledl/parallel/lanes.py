"""A list scheduler of tasks on serial resources ("lanes"), vectorised over candidates.

Every task runs on one lane (a stage's compute stream, a link, a communication stream) for a
duration, after the tasks it depends on. A lane runs its tasks one at a time in the order they
are given (the issue order of a CUDA stream or of a collective queue), so a task starts at

    start = max(end of the previous task on its lane, max(end of its dependencies))

the earliest-start rule of list scheduling / discrete-event replay used by trace-replay
simulators (dPRO, Hu et al., MLSys 2022; Daydream, Zhu et al., ATC 2020). Because the order on
each lane is fixed, the replay's structure does not depend on the durations: durations may be
NumPy arrays of one shape (one entry per candidate layout) and every time comes out with that
shape, so a planner replays thousands of candidates of one structure in one pass.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Task:
    """One task of a replay.

    Attributes:
        name: unique name (any hashable, e.g. ``("F", stage, micro_batch)``).
        lane: the lane it runs on; a lane runs one task at a time, in list order.
        duration_ms: milliseconds, a float or an array (one per candidate), >= 0.
        after: names of the tasks it waits for.
    """

    name: Hashable
    lane: Hashable
    duration_ms: float | np.ndarray
    after: tuple[Hashable, ...] = ()


@dataclass(frozen=True)
class Replay:
    """Start and end of every task, milliseconds (floats or arrays, as the durations)."""

    start_ms: dict[Hashable, float | np.ndarray]
    end_ms: dict[Hashable, float | np.ndarray]

    @property
    def makespan_ms(self) -> float | np.ndarray:
        """The end of the last task (0 without tasks)."""
        ends = list(self.end_ms.values())
        return np.maximum.reduce(ends) if ends else 0.0


def replay(tasks: Sequence[Task]) -> Replay:
    """Replay tasks on their lanes (module docstring).

    Args:
        tasks: the tasks; on each lane in the order they run.

    Returns:
        The :class:`Replay`.

    Raises:
        ValueError: a duplicate name, a dependency on an unknown task, a negative duration, or
            a deadlock (a lane's next task waits for a task that can never run first).
    """
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"replay: task name {dup!r} appears twice")
    known = set(names)
    queues: dict[Hashable, list[Task]] = {}
    for t in tasks:
        missing = [d for d in t.after if d not in known]
        if missing:
            raise ValueError(f"replay: task {t.name!r} waits for unknown task {missing[0]!r}")
        if np.any(np.asarray(t.duration_ms) < 0) or not np.all(np.isfinite(t.duration_ms)):
            raise ValueError(f"replay: task {t.name!r} has duration {t.duration_ms!r}")
        queues.setdefault(t.lane, []).append(t)
    start: dict[Hashable, float | np.ndarray] = {}
    end: dict[Hashable, float | np.ndarray] = {}
    lane_free: dict[Hashable, float | np.ndarray] = dict.fromkeys(queues, 0.0)
    heads = dict.fromkeys(queues, 0)
    remaining = len(tasks)
    while remaining:
        progressed = False
        for lane, queue in queues.items():
            while heads[lane] < len(queue):
                t = queue[heads[lane]]
                if any(d not in end for d in t.after):
                    break
                s = lane_free[lane]
                for d in t.after:
                    s = np.maximum(s, end[d])
                start[t.name], end[t.name] = s, s + t.duration_ms
                lane_free[lane] = end[t.name]
                heads[lane] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = [q[heads[lane]].name for lane, q in queues.items() if heads[lane] < len(q)]
            raise ValueError(f"replay: deadlock, the next tasks {stuck[:4]} wait on each other")
    return Replay(start, end)
