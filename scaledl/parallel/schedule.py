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
``(p - 1) / (m + p - 1)`` (GPipe, Sec. 2.2; the tests check the replay against it). Unequal
stages, transfer costs and 1F1B's order are what the replay adds to that closed form.

**Point-to-point calls.** A stage posts its sends and receives in groups and waits for each
group (``_batch_p2p`` / ``_sorted_batch_p2p`` of ``torch/distributed/pipelining/schedules.py``,
torch 2.13: ``dist.isend`` / ``dist.irecv``, or ``batch_isend_irecv`` for a group that mixes
both), and each group costs the stage a fixed host time (``call_ms``: posting and waiting) on
its own compute lane, whatever the bytes. The two schedules group differently:
``ScheduleGPipe`` posts every receive and every send as a group of its own; ``Schedule1F1B``
puts the send after a forward and the receive before the next backward (``fwd_send_bwd_recv``),
and the send after a backward and the receive before the next forward (``bwd_send_fwd_recv``),
in one group; its warm-up forwards and cool-down backwards post theirs one by one, as GPipe
does (:func:`p2p_calls`; checked against torch's own schedule code for 1-5 stages and 1-8
micro-batches, ``tests/parallel/test_schedule.py``). With two stages and four micro-batches
each stage makes 8 calls under GPipe and 5 under 1F1B. On the 2-core CPU host (gloo) the
sixteen committed layout profiles of 2026-12-03 / 04 put GPipe at four micro-batches behind
1F1B in 62 of 64 (profile, model) pairs (from 4.8% ahead to 19.7% behind), the last stage
idling 0.2-0.3 ms at each call; the fixed cost of a call explains only part of that gap, the
rest (GPipe's last stage computing slower while its peer waits) has no model here. 1F1B's
groups are waited on at once (its sends block), which the replay does not model: the transfer
of a send starts when its compute ends, under either schedule. An inference pipeline
(``backward=False``) runs the forwards only, every send and receive a group of its own.
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
        makespan_ms: the latest ``stage_end_ms``.
        stage_end_ms: per stage, the end of its last backward or of its last point-to-point
            call after it (the send of the last gradient), whichever is later: when its
            gradients are complete and sent.
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


def p2p_calls(
    schedule: str, stage: int, stages: int, micro_batches: int, backward: bool = True
) -> list[tuple]:
    """A stage's tasks and its point-to-point calls, in the order it issues them.

    Each compute task ``("F", j)`` / ``("B", j)`` of :func:`stage_order` is preceded by the call
    that receives its input (stage ``s > 0``'s forwards, stage ``s < p - 1``'s backwards) and
    followed by the call that sends its output (stage ``s < p - 1``'s forwards, ``s > 0``'s
    backwards); under ``1f1b`` a send and the next receive are one call where the schedule
    turns from forward to backward or back (module docstring).

    Args:
        schedule: ``gpipe`` or ``1f1b``.
        stage: the stage's index, 0-based.
        stages: ``p``.
        micro_batches: ``m``.
        backward: ``False`` for inference: the forwards only, each send and receive alone.

    Returns:
        The stage's items in order: ``("F", j)``, ``("B", j)``, and the calls
        ``("call", k, ops)`` (``k`` counts the stage's calls from 0; ``ops`` holds
        ``("recv", kind, j)`` and ``("send", kind, j)`` entries naming the transfers).

    Raises:
        ValueError: an unknown schedule.
    """
    p = stages
    items: list[tuple] = []
    pending: tuple | None = None  # the send of the previous task, not yet issued
    previous = None
    if backward:
        order = stage_order(schedule, stage, p, micro_batches)
    else:
        stage_order(schedule, stage, p, micro_batches)  # the schedule's name is checked
        order = [("F", j) for j in range(micro_batches)]
    for kind, j in order:
        receives = (kind == "F" and stage > 0) or (kind == "B" and stage < p - 1)
        recv = ("recv", kind, j) if receives else None
        fused = backward and schedule == "1f1b" and pending and recv and previous != kind
        calls = [(pending, recv)] if fused else [(op,) for op in (pending, recv) if op]
        for ops in calls:
            items.append(("call", sum(i[0] == "call" for i in items), ops))
        items.append((kind, j))
        sends = (kind == "F" and stage < p - 1) or (kind == "B" and stage > 0)
        pending = ("send", kind, j) if sends else None
        previous = kind
    if pending:
        items.append(("call", sum(i[0] == "call" for i in items), (pending,)))
    return items


def replay_pipeline(
    forward_ms: Sequence,
    backward_ms: Sequence,
    micro_batches: int,
    schedule: str = "1f1b",
    p2p_ms: Times | Sequence = 0.0,
    call_ms: Times = 0.0,
    backward: bool = True,
) -> PipelineReplay:
    """Replay one iteration of a pipeline (module docstring).

    Args:
        forward_ms: per stage, the forward time of one micro-batch (one value for all, or a
            list of ``micro_batches`` values); a value may be an array (one per candidate).
        backward_ms: the same for the backward (0 for inference).
        micro_batches: ``m`` >= 1.
        schedule: ``gpipe`` or ``1f1b``.
        p2p_ms: time of one transfer between stages ``s`` and ``s + 1`` (activation forward,
            its gradient backward) on the link, one value or one per boundary (``p - 1``
            values).
        call_ms: the host time of one point-to-point call on the stage that issues it
            (:func:`p2p_calls`), milliseconds (a float or an array).
        backward: ``False`` for inference: no backward, no gradient transfer or call
            (``backward_ms`` is then ignored).

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
        for item in p2p_calls(schedule, s, p, m, backward):
            if item[0] == "call":
                waits = tuple(_transfer(s, kind, j) for op, kind, j in item[2] if op == "recv")
                tasks.append(Task(("call", s, item[1]), ("stage", s), call_ms, waits))
                continue
            kind, j = item
            if kind == "F":
                tasks.append(Task(("F", s, j), ("stage", s), fwd[s][j]))
                if s < p - 1:
                    tasks.append(Task(("sendF", s, j), ("fwd", s), links[s], (("F", s, j),)))
            else:
                tasks.append(Task(("B", s, j), ("stage", s), bwd[s][j], (("F", s, j),)))
                if s > 0:
                    tasks.append(Task(("sendB", s, j), ("bwd", s), links[s - 1], (("B", s, j),)))
    result = replay(_link_order(tasks))
    last = [("B", s, _last_backward(schedule, s, p, m)) if backward else ("F", s, m - 1)
            for s in range(p)]  # fmt: skip
    stage_end = [np.maximum(result.end_ms[last[s]], _last_call_end(result.end_ms, s))
                 for s in range(p)]  # fmt: skip
    busy = [sum(fwd[s]) + (sum(bwd[s]) if backward else 0.0) for s in range(p)]
    return PipelineReplay(np.maximum.reduce(stage_end), stage_end, busy)


def one_f_one_b_ms(
    rank_ms: Sequence[float], micro_batches: int, virtual_stages: int = 1
) -> tuple[float, float]:
    """Closed-form iteration of (interleaved) 1F1B: the steady state and the bubble.

    Each pipeline rank ``r`` spends ``rank_ms[r]`` on one micro-batch (forward and backward of
    all its model chunks). The slowest rank sets the pace, ``m * max(rank_ms)``; the bubble is
    the fill and drain through the other ranks, ``(sum(rank_ms) - max(rank_ms)) / v``. With
    equal ranks this is Narayanan et al. (SC 2021, Sec. 2.2) ``(p - 1) / (v m)`` of the ideal
    time, and with ``v = 1`` the ``(m + p - 1)(f + b)`` that :func:`replay_pipeline` replays;
    with unequal ranks it is Alpa's bound ``sum_i t_i + (m - 1) max_j t_j`` (Zheng et al.,
    OSDI 2022, Eq. 2), which the replay can beat when the slowest rank comes first (its
    warm-up forwards hide the others' fill). No transfer costs: the caller adds those.

    Args:
        rank_ms: per pipeline rank, one micro-batch's time (any unit), ``p`` >= 1 values.
        micro_batches: ``m`` >= 1.
        virtual_stages: ``v`` >= 1 model chunks per rank (interleaving).

    Returns:
        ``(steady, bubble)`` in the unit of ``rank_ms``; the iteration is their sum.

    Raises:
        ValueError: no ranks, ``m < 1`` or ``v < 1``.
    """
    if not rank_ms or micro_batches < 1 or virtual_stages < 1:
        raise ValueError(
            f"pipeline: {len(rank_ms)} ranks, {micro_batches} micro-batches, "
            f"{virtual_stages} virtual stages; need >= 1 of each"
        )
    slowest = max(rank_ms)
    return micro_batches * slowest, (sum(rank_ms) - slowest) / virtual_stages


def _transfer(stage: int, kind: str, j: int) -> tuple:
    """The transfer a receive of ``stage``'s task ``(kind, j)`` waits for."""
    return ("sendF", stage - 1, j) if kind == "F" else ("sendB", stage + 1, j)


def _last_call_end(end_ms: dict, stage: int) -> Times:
    """The end of the stage's last point-to-point call (0 without calls)."""
    ends = [t for name, t in end_ms.items() if name[0] == "call" and name[1] == stage]
    return np.maximum.reduce(ends) if ends else 0.0


def _last_backward(schedule: str, stage: int, stages: int, m: int) -> int:
    return [j for kind, j in stage_order(schedule, stage, stages, m) if kind == "B"][-1]


def _link_order(tasks: list[Task]) -> list[Task]:
    """Transfers on a link in micro-batch order (the order the receiver posts its recvs)."""
    compute = [t for t in tasks if t.lane[0] == "stage"]
    sends = sorted((t for t in tasks if t.lane[0] != "stage"), key=lambda t: (t.lane, t.name[2]))
    return compute + sends
