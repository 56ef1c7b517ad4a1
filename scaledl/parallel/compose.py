"""The iteration of a layout from per-layer times: shards, sharding, pipeline, sync, step.

Inputs are what one rank of each stage runs (:mod:`scaledl.parallel.shard`): per layer its
forward and backward time on the sharded shapes of one micro-batch, its tensor-parallel
all-reduce time and its parameter bytes. Every time may be an array (one entry per candidate of
one structure), :mod:`scaledl.parallel.lanes` replays them all at once. Per stage:

1. **tensor parallelism**: each layer's all-reduce is on the critical path (the next layer
   needs the full activation), added to its forward and, once more, to its backward;
2. **FSDP / ZeRO-2 forward** (``fsdp``, ``zero2``): before a unit computes, its parameters are
   all-gathered over the ``dp`` ranks; the all-gather of unit ``u`` is issued when unit
   ``u - 1`` starts computing (FSDP2's one-unit prefetch, Zhao et al., "PyTorch FSDP",
   VLDB 2023, Sec. 3.3), on a communication lane, so it hides under that compute;
3. **backward** in reverse unit order; ``fsdp`` all-gathers each unit again (prefetched the
   same way; ``zero2`` keeps the gathered parameters, FSDP2 ``reshard_after_forward=False``);
4. **gradient synchronisation**, overlapped with the backward of the last micro-batch:
   ``none`` / ``zero1``: DDP's buckets (layers in reverse order, 1 MiB then 25 MiB,
   :mod:`scaledl.graph.layer_graph`) all-reduced over ``dp`` when their last gradient is ready
   (Li et al., VLDB 2020); ``zero2`` / ``fsdp``: one reduce-scatter per unit after its backward
   (Rajbhandari et al., SC 2020, Sec. 5). The part of the lane that outlasts the backward is
   exposed. Where the collective model holds FSDP2's micro-benchmarked API costs
   (:data:`~scaledl.parallel.collectives.FSDP_API`, :mod:`scaledl.profiling.fsdp_probe`) a
   ``zero2`` / ``fsdp`` unit instead costs them on the critical path, its all-gathers and
   reduce-scatter inside them, each direction on its own (a forward cost without a backward
   one, too few positive probe rows, keeps the lanes for the backward). The probe times one
   unit alone, so nothing of it overlaps compute: right on the CPU hosts it was measured on
   (the collectives are the smaller part there), fully serial where a GPU would prefetch;
5. **pipeline**: the stages' forward and backward per micro-batch, with the activation transfer
   between stages, replayed by :func:`scaledl.parallel.schedule.replay_pipeline`; a send's
   latency ``alpha`` is the fixed cost of each point-to-point call on the stage that issues it
   (receives too, and 1F1B's fused send-and-receive calls once:
   :func:`scaledl.parallel.schedule.p2p_calls`), its bytes the transfer;
   the collectives of 2 to 4 and the transfers of 5 overlap compute by the factors of an
   :class:`~scaledl.parallel.overlap.Overlap` (default: fully; on CPU/gloo measured ones),
   the exposed share added to the compute they overlap;
6. **optimizer step** on the stage's parameters (``1/dp`` of them with any sharding), then for
   ``zero1`` the updated partitions sent to every rank: PyTorch's ``ZeroRedundancyOptimizer``
   broadcasts each rank's ``1/dp`` partition in turn (``dp`` broadcasts); ``zero2``/``fsdp``
   gather them in the next forward.

The iteration ends when the slowest stage has synchronised, stepped and gathered. With the
defaults (one stage, one micro-batch, no sharding) this is the critical path of
:mod:`scaledl.models.critical_path` at layer granularity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scaledl.graph.layer_graph import BUCKET_CAP_BYTES, FIRST_BUCKET_BYTES
from scaledl.parallel.collectives import CollectiveModel
from scaledl.parallel.lanes import Task, replay
from scaledl.parallel.overlap import Overlap
from scaledl.parallel.schedule import replay_pipeline

Times = float | np.ndarray


@dataclass(frozen=True)
class LayoutInputs:
    """One layout structure's per-layer inputs (arrays: one column per candidate).

    Attributes:
        stage: stage of each layer, shape (n_layers,).
        unit: sharding unit of each layer (-1: root), shape (n_layers,).
        forward_ms: forward of one micro-batch on one rank, shape (n_layers, n) or (n_layers,).
        backward_ms: backward, same shape (0 for inference).
        tp_allreduce_ms: tensor-parallel all-reduce after each layer, same shape.
        param_bytes: parameter bytes of each layer on one rank (after the TP split),
            shape (n_layers,).
        boundary_bytes: activation bytes sent from stage ``s`` to ``s + 1`` per micro-batch,
            shape (p - 1, n) or (p - 1,).
        optimizer_ms: optimizer step of each stage's (sharded) parameters, shape (p, n) or (p,).
        dp_size: data-parallel ranks, scalar or shape (n,).
        micro_batches: ``m``.
        schedule: ``gpipe`` or ``1f1b``.
        sharding: ``none``, ``zero1``, ``zero2`` or ``fsdp``.
        train: training (else forward only).
    """

    stage: np.ndarray
    unit: np.ndarray
    forward_ms: np.ndarray
    backward_ms: np.ndarray
    tp_allreduce_ms: np.ndarray
    param_bytes: np.ndarray
    boundary_bytes: np.ndarray
    optimizer_ms: np.ndarray
    dp_size: Times
    micro_batches: int
    schedule: str
    sharding: str
    train: bool


def stack_inputs(columns: list[LayoutInputs]) -> LayoutInputs:
    """Several candidates of one structure as one :class:`LayoutInputs` (one column each).

    Args:
        columns: inputs of one column each (2-D per-layer and per-stage arrays of width 1,
            or 1-D), sharing the structure: stages, units, parameter bytes, ``micro_batches``,
            schedule, sharding and mode.

    Returns:
        The inputs with the per-candidate arrays side by side, shape (rows, len(columns)).

    Raises:
        ValueError: the columns do not share the structure (naming the field).
    """
    first = columns[0]
    for name in ("micro_batches", "schedule", "sharding", "train"):
        if any(getattr(x, name) != getattr(first, name) for x in columns):
            raise ValueError(f"stack_inputs: field {name!r} differs between the columns")
    for name in ("stage", "unit", "param_bytes"):
        if any(not np.array_equal(getattr(x, name), getattr(first, name)) for x in columns):
            raise ValueError(f"stack_inputs: field {name!r} differs between the columns")

    def side_by_side(name: str) -> np.ndarray:
        arrays = [np.asarray(getattr(x, name), dtype=float) for x in columns]
        return np.concatenate([a if a.ndim == 2 else a[:, None] for a in arrays], axis=1)

    return LayoutInputs(
        stage=first.stage, unit=first.unit,
        forward_ms=side_by_side("forward_ms"), backward_ms=side_by_side("backward_ms"),
        tp_allreduce_ms=side_by_side("tp_allreduce_ms"), param_bytes=first.param_bytes,
        boundary_bytes=side_by_side("boundary_bytes"), optimizer_ms=side_by_side("optimizer_ms"),
        dp_size=np.concatenate([np.atleast_1d(np.asarray(x.dp_size, dtype=float))
                                for x in columns]),
        micro_batches=first.micro_batches, schedule=first.schedule, sharding=first.sharding,
        train=first.train,
    )  # fmt: skip


@dataclass(frozen=True)
class LayoutIteration:
    """The composed iteration and its parts (floats or arrays, one entry per candidate).

    Attributes:
        iteration_ms: the iteration.
        pipeline_ms: the pipeline replay's makespan (forwards, backwards, transfers).
        bubble_fraction: idle share of the busiest stage in the pipeline replay.
        exposed_sync_ms: the gradient synchronisation outlasting the backward (slowest stage).
        optimizer_ms: optimizer step and, for ``zero1``, the parameter broadcasts (slowest).
    """

    iteration_ms: Times
    pipeline_ms: Times
    bubble_fraction: Times
    exposed_sync_ms: Times
    optimizer_ms: Times


def _groups(values: np.ndarray, rows: np.ndarray, keys: np.ndarray) -> list[np.ndarray]:
    """Sum ``values`` (rows x candidates) over the rows of each key, keys in first order."""
    seen = list(dict.fromkeys(keys[rows].tolist()))
    return [values[rows[keys[rows] == k]].sum(axis=0) for k in seen]


def _forward(parts: list[Times], gather: list[Times] | None) -> Times:
    """Forward of one micro-batch: units in order, all-gathers prefetched one unit ahead."""
    if gather is None:
        return sum(parts)
    tasks = []
    for u, (f, g) in enumerate(zip(parts, gather, strict=True)):
        after = (("F", u - 2),) if u >= 2 else ()
        tasks.append(Task(("G", u), "gather", g, after))
        tasks.append(Task(("F", u), "compute", f, (("G", u),)))
    return replay(tasks).makespan_ms


def _backward(
    parts: list[Times], gather: list[Times] | None, syncs: list[tuple[int, Times]]
) -> tuple[Times, Times]:
    """Backward of ``parts`` (in backward order) and the sync lane: (compute end, lane end).

    Args:
        parts: backward time of each part, in the order backward runs them.
        gather: per part, an all-gather before it (prefetched one part ahead), or ``None``.
        syncs: ``(part index, time)``: a collective issued when that part's backward ends,
            served in list order on the sync lane.
    """
    tasks = []
    for k, b in enumerate(parts):
        after = ()
        if gather is not None:
            tasks.append(Task(("G", k), "gather", gather[k], (("B", k - 2),) if k >= 2 else ()))
            after = (("G", k),)
        tasks.append(Task(("B", k), "compute", b, after))
    for i, (k, t) in enumerate(syncs):
        tasks.append(Task(("S", i), "sync", t, (("B", k),)))
    result = replay(tasks)
    compute_end = result.end_ms[("B", len(parts) - 1)]
    sync_end = result.end_ms[("S", len(syncs) - 1)] if syncs else 0.0
    return compute_end, sync_end


def ddp_buckets(param_bytes_reverse: np.ndarray) -> list[tuple[int, float]]:
    """DDP's buckets over layers in backward order: ``(index of the last layer, bytes)``.

    The first bucket closes at 1 MiB, the others at 25 MiB (``bucket_cap_mb``); layers without
    parameters join the current bucket.
    """
    buckets, current, cap = [], 0.0, FIRST_BUCKET_BYTES
    for k, nbytes in enumerate(param_bytes_reverse.tolist()):
        current += nbytes
        if current >= cap:
            buckets.append((k, current))
            current, cap = 0.0, BUCKET_CAP_BYTES
    if current > 0:
        buckets.append((len(param_bytes_reverse) - 1, current))
    return buckets


def _stage(
    x: LayoutInputs, s: int, cm: CollectiveModel, overlap: Overlap
) -> tuple[Times, Times, Times]:
    """Forward and backward of one micro-batch on stage ``s``, and its exposed sync.

    Each data-parallel collective is split by ``overlap``: the hidden share stays on its lane,
    the exposed share is added to the compute it overlaps (the unit an all-gather feeds, the
    backward part whose gradients a reduce-scatter or bucket carries).
    """
    rows = np.flatnonzero(x.stage == s)
    fwd = x.forward_ms + x.tp_allreduce_ms
    bwd = (x.backward_ms + x.tp_allreduce_ms) if x.train else np.zeros_like(x.backward_ms)
    sharded = x.sharding in ("zero2", "fsdp")
    if sharded:
        # units in forward order and in backward order (the root unit holds the first and the
        # last layers: first in one, first in the other too), each with its parameter bytes
        f_units = list(dict.fromkeys(x.unit[rows].tolist()))
        b_units = list(dict.fromkeys(x.unit[rows[::-1]].tolist()))
        nbytes = {u: x.param_bytes[rows[x.unit[rows] == u]].sum() for u in f_units}
        f_parts = _groups(fwd, rows, x.unit)
        b_parts = _groups(bwd, rows[::-1], x.unit)
        split = {u: overlap.split("all_gather", cm.predict_ms("all_gather", nbytes[u], x.dp_size))
                 for u in f_units}  # fmt: skip
        if _probed(cm, "fsdp_forward"):  # the unit's API cost, its all-gather inside
            forward = sum(f + cm.predict_ms("fsdp_forward", nbytes[u], x.dp_size)
                          for f, u in zip(f_parts, f_units, strict=True))  # fmt: skip
        else:
            forward = _forward([f + split[u][1] for f, u in zip(f_parts, f_units, strict=True)],
                               [split[u][0] for u in f_units])  # fmt: skip
        api = "fsdp_backward" if x.sharding == "fsdp" else "zero2_backward"
        b_probed = _probed(cm, api)
        b_gather = None
        if b_probed:  # its all-gather (FSDP) and reduce-scatter inside
            b_parts = [b + cm.predict_ms(api, nbytes[u], x.dp_size)
                       for b, u in zip(b_parts, b_units, strict=True)]  # fmt: skip
        elif x.sharding == "fsdp":
            b_gather = [split[u][0] for u in b_units]
            b_parts = [b + split[u][1] for b, u in zip(b_parts, b_units, strict=True)]
    else:
        forward = fwd[rows].sum(axis=0)
        b_parts = [bwd[r] for r in rows[::-1]]
        b_gather = None
    if not x.train:
        return forward, 0.0, 0.0
    if sharded:
        lane = "reduce_scatter"
        syncs = [] if b_probed else [(k, cm.predict_ms(lane, nbytes[u], x.dp_size))
                                     for k, u in enumerate(b_units)]  # fmt: skip
    else:
        lane = "all_reduce"
        syncs = [(k, cm.predict_ms(lane, nb, x.dp_size))
                 for k, nb in ddp_buckets(x.param_bytes[rows[::-1]])]  # fmt: skip
    hidden_syncs = []
    for k, t in syncs:
        hidden, exposed = overlap.split(lane, t)
        b_parts[k] = b_parts[k] + exposed
        hidden_syncs.append((k, hidden))
    # The sync lane waits on the backward, never the reverse: one replay gives both.
    backward, sync_end = _backward(b_parts, b_gather, hidden_syncs)
    return forward, backward, np.maximum(sync_end - backward, 0.0)


def _probed(cm: CollectiveModel, cost: str) -> bool:
    """Whether ``cm`` holds the micro-benchmarked FSDP2 cost ``cost`` (fitted on its rows)."""
    return cm.source.get(cost, "none") != "none"


def compose(
    x: LayoutInputs, cm: CollectiveModel, overlap: Overlap | None = None
) -> LayoutIteration:
    """Compose the iteration of a layout (module docstring).

    Args:
        x: the per-layer inputs of one structure.
        cm: the collective model.
        overlap: the hidden share of each collective lane (default: all hidden).

    Returns:
        The :class:`LayoutIteration`.

    Raises:
        ValueError: inconsistent shapes or stages (from the replays).
    """
    overlap = overlap or Overlap.full()
    stages = int(x.stage.max()) + 1
    fwd, bwd, tails = [], [], []
    for s in range(stages):
        f, b, tail = _stage(x, s, cm, overlap)
        fwd.append(f)
        bwd.append(b)
        tails.append(tail)
    p2p = []
    call = cm.predict_ms("send", 0.0, 2)  # a call's fixed cost: the send's latency alpha
    for s in range(stages - 1):  # the exposed share of a transfer delays its sender
        transfer = np.maximum(cm.predict_ms("send", x.boundary_bytes[s], 2) - call, 0.0)
        hidden, exposed = overlap.split("send", transfer)
        p2p.append(hidden)
        fwd[s] = fwd[s] + exposed
        bwd[s + 1] = bwd[s + 1] + (exposed if x.train else 0.0)
    call = call if stages > 1 else 0.0
    pipe = replay_pipeline(fwd, bwd, x.micro_batches, x.schedule, p2p, call, backward=x.train)
    if not x.train:
        return LayoutIteration(pipe.makespan_ms, pipe.makespan_ms, pipe.bubble_fraction, 0.0, 0.0)
    ends, steps = [], []
    for s in range(stages):
        step = x.optimizer_ms[s]
        if x.sharding == "zero1":
            partition = x.param_bytes[x.stage == s].sum() / x.dp_size
            step = step + x.dp_size * cm.predict_ms("broadcast", partition, x.dp_size)
        steps.append(step)
        ends.append(pipe.stage_end_ms[s] + tails[s] + step)
    iteration = np.maximum.reduce(ends)
    slowest = np.argmax(np.stack(np.broadcast_arrays(*ends)), axis=0)
    pick = lambda v: np.choose(slowest, np.broadcast_arrays(*v))  # noqa: E731
    return LayoutIteration(iteration, pipe.makespan_ms, pipe.bubble_fraction,
                           pick(tails), pick(steps))  # fmt: skip
