"""Per-layer forward/backward timing with module hooks and gradient hooks, a few layers a step.

Forward time of a layer call is the interval between its forward pre-hook and forward hook.
Backward time uses two gradient hooks (``Tensor.register_hook``) registered by the same hooks:
one on the call's main output, which fires when the gradient reaches the layer (backward start),
and one on the call's main input, which fires when the gradient with respect to that input is
complete (backward end). Gradient hooks copy nothing and leave the autograd graph as it is (the
earlier identity-function markers cloned every wrapped tensor). A call whose input needs no
gradient (an embedding of token ids, a patch embedding of pixels) ends its backward at the next
gradient hook of any timed call, or when the whole backward pass ends when none follows (it was
the last; with DDP that interval also holds the wait for the last all-reduce buckets).

**Fewer layers per step.** Each hook costs microseconds of Python, which is several percent of a
CPU iteration of small layers (measured: 5-17% with every call timed and its tensors cloned). So
an instrumented *round* of ``stride`` iterations times each call once: iteration ``j`` of a round
times the calls whose index ``c`` has ``c % stride == j``. Calls without an input gradient and the
two calls before each of them are timed in every iteration (their rows are kept in their own
phase only), so the "next gradient hook" that ends such a call's backward is never far away. The
first instrumented iteration times every call once to learn which calls those are.

Gradient all-reduce is timed per DDP bucket by a communication hook wrapping DDP's default
``allreduce_hook`` (``torch.distributed.algorithms.ddp_comm_hooks.default_hooks``): the interval
from the hook call to the completion callback of its future, with the bucket's bytes.
"""

import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from scaledl.graph.tracing import main_tensor
from scaledl.graph.units import LayerUnit
from scaledl.profiling.timers import Clock


@dataclass
class _Call:
    index: int
    unit: int
    name: str
    layer_type: str
    timed: bool
    fwd_start: Any = None
    fwd_end: Any = None
    grad_input: bool = False
    marks: dict[str, Any] = field(default_factory=dict)


class LayerInstrument:
    """Times the calls of the given layer units, ``1 / stride`` of them per iteration.

    Usage: inside ``with``, call :meth:`start_step` before each iteration and
    :meth:`layer_times_ms` after it. The first iteration times every call (the calibration
    iteration: its rows are complete); afterwards iteration ``i`` is phase ``i % stride`` of a
    round and returns the rows of the calls of that phase. Only the modules with a call timed in
    the current phase carry hooks (a hooked module takes PyTorch's slower call path even when
    its hook does nothing).

    Args:
        units: the layer units (from :func:`scaledl.graph.units.find_units` on the same model).
        clock: the clock of the model's device.
        backward: register backward hooks (training); ``False`` for inference.
        stride: iterations per round (1: every call timed in every iteration).

    Raises:
        ValueError: ``stride < 1``.
    """

    def __init__(
        self, units: list[LayerUnit], clock: Clock, backward: bool, stride: int = 1
    ) -> None:
        if stride < 1:
            raise ValueError(f"layer instrument: field 'stride' must be >= 1, got {stride}")
        self.units = units
        self.clock = clock
        self.backward = backward
        self.stride = stride
        self.calls: list[_Call] = []
        self.phase: int | None = None
        self._always: set[int] = set()
        self._unit_calls: dict[int, list[int]] = {}
        self._handles: list[Any] = []
        self._open: dict[int, list[_Call]] = {}
        self._seen: dict[int, int] = {}
        self._active = False

    def __enter__(self) -> "LayerInstrument":
        self._active = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self._remove_hooks()
        self._active = False

    def _remove_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def start_step(self) -> None:
        """Forget the previous iteration's calls, move to the next phase and hook its modules.

        Raises:
            RuntimeError: outside the ``with`` block.
        """
        if not self._active:
            raise RuntimeError("LayerInstrument.start_step() outside its 'with' block")
        if self.phase is None and self.calls:
            self._learn_calls()
            self.phase = 0
        elif self.phase is not None:
            self.phase = (self.phase + 1) % self.stride
        self.calls, self._open, self._seen = [], {}, {}
        self._remove_hooks()
        for i, unit in enumerate(self.units):
            if self.phase is None or any(self._timed(c) for c in self._unit_calls.get(i, ())):
                m = unit.module
                self._handles.append(m.register_forward_pre_hook(self._pre(i), with_kwargs=True))
                self._handles.append(m.register_forward_hook(self._post(i), with_kwargs=True))

    def _learn_calls(self) -> None:
        """From the calibration iteration: each unit's call indices, the always-timed calls."""
        for c in self.calls:
            self._unit_calls.setdefault(c.unit, []).append(c.index)
        no_grad_input = [c.index for c in self.calls if self.backward and not c.grad_input]
        self._always = {i - k for i in no_grad_input for k in (0, 1, 2) if i - k >= 0}

    def _timed(self, index: int) -> bool:
        if self.phase is None or self.stride == 1:
            return True
        return index % self.stride == self.phase or index in self._always

    def _kept(self, index: int) -> bool:
        return self.phase is None or index % self.stride == self.phase

    def layer_times_ms(
        self, step_start: Any, backward_end: Any, bounds: tuple[Any, ...] = ()
    ) -> list[dict[str, Any]]:
        """Per-call forward and backward milliseconds of the last iteration's phase.

        Args:
            step_start: the mark taken when the iteration began (reference of all marks).
            backward_end: the mark taken when the whole backward pass returned.
            bounds: further marks that end the backward of a call without an input gradient
                when they come before the next gradient hook: the ends of a pipeline stage's
                per-micro-batch backward passes (another micro-batch's forward, or the wait
                for its gradient, may run before the next gradient hook fires).

        Returns:
            One dict per call of this phase (every call in the calibration iteration), in
            execution order: ``layer_index``, ``layer_name``, ``layer_type``, ``forward_ms``,
            ``backward_ms`` (0.0 without backward).
        """

        def at(mark: Any) -> float:
            return self.clock.elapsed_ms(step_start, mark)

        end_all = at(backward_end)
        marks = sorted(
            [at(m) for c in self.calls for m in c.marks.values()] + [at(b) for b in bounds]
        )
        rows = []
        for c in sorted(self.calls, key=lambda call: call.index):
            if not self._kept(c.index):
                continue
            bwd = 0.0
            if self.backward and "out" in c.marks:
                start = at(c.marks["out"])
                if "in" in c.marks:
                    end = at(c.marks["in"])
                else:
                    end = next((m for m in marks if m > start), end_all)
                bwd = max(end - start, 0.0)
            rows.append(
                {
                    "layer_index": c.index,
                    "layer_name": c.name,
                    "layer_type": c.layer_type,
                    "forward_ms": self.clock.elapsed_ms(c.fwd_start, c.fwd_end),
                    "backward_ms": bwd,
                }
            )
        return rows

    def _pre(self, unit_index: int):
        unit = self.units[unit_index]

        def hook(module, args, kwargs):
            k = self._seen.get(unit_index, 0)
            self._seen[unit_index] = k + 1
            if self.phase is None:
                index = len(self.calls)
            else:
                index = self._unit_calls[unit_index][k]
            call = _Call(index, unit_index, unit.name, unit.layer_type, self._timed(index))
            self._open.setdefault(unit_index, []).append(call)
            if not call.timed:
                return None
            self.calls.append(call)
            if self.backward and torch.is_grad_enabled():
                x = _grad_input(args, kwargs)
                if x is not None:
                    call.grad_input = True
                    x.register_hook(_stamp(call.marks, "in", self.clock))
            call.fwd_start = self.clock.mark()
            return None

        return hook

    def _post(self, unit_index: int):
        def hook(module, args, kwargs, output):
            call = self._open[unit_index].pop()
            if not call.timed:
                return None
            call.fwd_end = self.clock.mark()
            if self.backward and torch.is_grad_enabled():
                t = main_tensor(output)
                if t is not None and t.requires_grad:
                    t.register_hook(_stamp(call.marks, "out", self.clock))
            return None

        return hook


def _stamp(sink: dict, key: str, clock: Clock):
    """A gradient hook that records a time stamp into ``sink[key]`` and leaves the gradient."""

    def hook(grad: torch.Tensor) -> None:
        sink[key] = clock.mark()

    return hook


def _grad_input(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The first floating tensor input needing a gradient (positional, then keyword)."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor) and a.is_floating_point() and a.requires_grad:
            return a
    return None


@dataclass
class AllReduceRecorder:
    """A DDP communication hook that times each gradient bucket's all-reduce.

    Register with ``ddp_model.register_comm_hook(recorder, AllReduceRecorder.hook)``. Timing is
    recorded only while :attr:`enabled` is true; the all-reduce itself always runs (DDP's
    default ``allreduce_hook``: divide by the world size, then all-reduce).
    """

    enabled: bool = False
    records: list[dict[str, Any]] = field(default_factory=list)

    @staticmethod
    def hook(
        state: "AllReduceRecorder", bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        """DDP comm hook: all-reduce ``bucket`` and record its time and bytes when enabled.

        (DDP checks the ``bucket`` annotation is ``dist.GradBucket`` itself, which is why this
        module does not use ``from __future__ import annotations``.)
        """
        if not state.enabled:
            return default_hooks.allreduce_hook(None, bucket)
        buffer = bucket.buffer()
        nbytes = buffer.numel() * buffer.element_size()
        index = bucket.index()
        start = time.perf_counter()
        fut = default_hooks.allreduce_hook(None, bucket)

        def done(f: torch.futures.Future) -> torch.Tensor:
            state.records.append(
                {
                    "bucket_index": index,
                    "allreduce_bytes": nbytes,
                    "allreduce_ms": (time.perf_counter() - start) * 1000.0,
                }
            )
            return f.value()

        return fut.then(done)
