"""Replay of a pipeline-parallel schedule: GPipe and 1F1B over stages and micro-batches.

A replica's ``p`` stages each hold a contiguous slice of the model; its batch is split into
``m`` micro-batches. Stage ``s`` runs the forward ``F(s, j)`` of micro-batch ``j`` after
receiving the activation of ``F(s - 1, j)``, and its backward ``B(s, j)`` after receiving the
gradient of ``B(s + 1, j)`` (the last stage right after its own forward). Each transfer is a
task on the link between the two stages (``torch.distributed`` ``isend``/``irecv``: the sender's
compute goes on), so an iteration is the makespan of :func:`scaledl.parallel.lanes.replay` over
one compute lane per stage and one lane per link and direction. Orders per stage:

* ``gpipe`` (Huang et al., "GPipe", NeurIPS 2019): every forward, then every backward, micro-
  batches in order (``torch.distributed.pipelining.ScheduleGPipe``);
* ``1f1b`` (Narayanan et al., "PipeDream", SOSP 2019; the flush variant of "Memory-Efficient
  Pipeline-Parallel DNN Training", ICML 2021, ``Schedule1F1B``): ``min(p - s - 1, m)`` warm-up
  forwards, then one forward and one backward alternately, then the remaining backwards.

With equal stages (forward ``f``, backward ``b``) and free transfers both take
``(m + p - 1)(f + b)``: each stage idles ``(p - 1)(f + b)``, the bubble fraction
``(p - 1) / (m + p - 1)`` (GPipe, Sec. 2.2) of :func:`bubble_fraction`. Unequal stages, transfer
costs and 1F1B's order are what the replay adds to that closed form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scaledl.parallel.lanes import Task, replay
from scaledl.workloads.parallelism import PIPELINE_SCHEDULES

Times = float | np.ndarray


@dataclass(frozen=True)
class PipelineReplay:
    """The replayed iteration of one pipeline (floats, or arrays with one entry per candidate).

    Attributes:
        makespan_ms: the end of the last backward over all stages.
        stage_end_ms: per stage, the end of its last backward (when its gradients are complete).
        stage_busy_ms: per stage, its compute time (forwards and backwards).
    """

    makespan_ms: Times
    stage_end_ms: list[Times]
    stage_busy_ms: list[Times]

    @property
    def bubble_fraction(self) -> Times:
        """The idle share of the iteration of the busiest stage, ``1 - busy / makespan``."""
        busiest = np.maximum.reduce(self.stage_busy_ms)
        return 1.0 - busiest / np.maximum(self.makespan_ms, 1e-12)


def bubble_fraction(stages: int, micro_batches: int) -> float:
    """The closed-form bubble ``(p - 1) / (m + p - 1)`` of equal stages (GPipe, Sec. 2.2).

    Raises:
        ValueError: a count below 1.
    """
    if stages < 1 or micro_batches < 1:
        raise ValueError(f"stages={stages}, micro_batches={micro_batches}: need >= 1")
    return (stages - 1) / (micro_batches + stages - 1)


def stage_order(schedule: str, stage: int, stages: int, micro_batches: int) -> list[tuple]:
    """The order of a stage's tasks: ``("F", j)`` and ``("B", j)`` (module docstring).

    Raises:
        ValueError: an unknown schedule.
    """
    m = micro_batches
    if schedule == "gpipe":
        return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
    if schedule != "1f1b":
        raise ValueError(f"field 'pipeline_schedule' must be one of {PIPELINE_SCHEDULES}")
    warmup = min(stages - stage - 1, m)
    order = [("F", j) for j in range(warmup)]
    for i in range(m - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", j) for j in range(m - warmup, m)]


def _per_micro_batch(name: str, values: Sequence, stages: int, m: int) -> list[list[Times]]:
    if len(values) != stages:
        raise ValueError(f"pipeline: {name} has {len(values)} stages, expected {stages}")
    out = []
    for s, v in enumerate(values):
        if isinstance(v, (list, tuple)):
            if len(v) != m:
                raise ValueError(f"pipeline: {name}[{s}] has {len(v)} micro-batches, not {m}")
            out.append(list(v))
        else:
            out.append([v] * m)
    return out


def replay_pipeline(
    forward_ms: Sequence,
    backward_ms: Sequence,
    micro_batches: int,
    schedule: str = "1f1b",
    p2p_ms: Times | Sequence = 0.0,
) -> PipelineReplay:
    """Replay one iteration of a pipeline (module docstring).

    Args:
        forward_ms: per stage, the forward time of one micro-batch (one value for all, or a
            list of ``micro_batches`` values); a value may be an array (one per candidate).
        backward_ms: the same for the backward (0 for inference).
        micro_batches: ``m`` >= 1.
        schedule: ``gpipe`` or ``1f1b``.
        p2p_ms: time of one transfer between stages ``s`` and ``s + 1`` (activation forward,
            its gradient backward), one value or one per boundary (``p - 1`` values).

    Returns:
        The :class:`PipelineReplay`.

    Raises:
        ValueError: lengths that do not match the stages or micro-batches, an unknown
            schedule, or a negative time.
    """
    p, m = len(forward_ms), int(micro_batches)
    if p < 1 or m < 1:
        raise ValueError(f"pipeline: {p} stages, {m} micro-batches; need >= 1 of each")
    fwd = _per_micro_batch("forward_ms", forward_ms, p, m)
    bwd = _per_micro_batch("backward_ms", backward_ms, p, m)
    links = list(p2p_ms) if isinstance(p2p_ms, (list, tuple)) else [p2p_ms] * (p - 1)
    if len(links) != p - 1:
        raise ValueError(f"pipeline: p2p_ms has {len(links)} values, expected {p - 1}")
    tasks = []
    for s in range(p):
        for kind, j in stage_order(schedule, s, p, m):
            if kind == "F":
                after = (("sendF", s - 1, j),) if s > 0 else ()
                tasks.append(Task(("F", s, j), ("stage", s), fwd[s][j], after))
                if s < p - 1:
                    tasks.append(Task(("sendF", s, j), ("fwd", s), links[s], (("F", s, j),)))
            else:
                after = (("F", s, j),) + ((("sendB", s + 1, j),) if s < p - 1 else ())
                tasks.append(Task(("B", s, j), ("stage", s), bwd[s][j], after))
                if s > 0:
                    tasks.append(Task(("sendB", s, j), ("bwd", s), links[s - 1], (("B", s, j),)))
    result = replay(_link_order(tasks))
    stage_end = [result.end_ms[("B", s, _last_backward(schedule, s, p, m))] for s in range(p)]
    busy = [sum(fwd[s]) + sum(bwd[s]) for s in range(p)]
    return PipelineReplay(np.maximum.reduce(stage_end), stage_end, busy)


def _last_backward(schedule: str, stage: int, stages: int, m: int) -> int:
    return [j for kind, j in stage_order(schedule, stage, stages, m) if kind == "B"][-1]


def _link_order(tasks: list[Task]) -> list[Task]:
    """Transfers on a link in micro-batch order (the order the receiver posts its recvs)."""
    compute = [t for t in tasks if t.lane[0] == "stage"]
    sends = sorted((t for t in tasks if t.lane[0] != "stage"), key=lambda t: (t.lane, t.name[2]))
    return compute + sends
