"""Per-layer forward/backward timing with module hooks and autograd markers.

Forward time of a layer call is the interval between its forward pre-hook and forward hook.
Backward time uses two identity autograd functions (*markers*) inserted by the same hooks: one on
the call's output, whose backward fires when the gradient reaches the layer (backward start), and
one on the call's main input, whose backward fires when the layer has produced the gradient with
respect to that input (backward end). A layer whose input needs no gradient (the first embedding)
ends its backward when the whole backward pass ends. Markers copy the tensor they wrap (so in-place
updates of the layer's output stay legal); the copies happen outside the timed intervals.

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


class _Marker(torch.autograd.Function):
    """Identity whose backward records a time stamp into ``sink[key]``."""

    @staticmethod
    def forward(ctx, x, sink, key, clock):  # noqa: D102
        ctx.sink, ctx.key, ctx.clock = sink, key, clock
        return x.clone()

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        ctx.sink[ctx.key] = ctx.clock.mark()
        return grad, None, None, None


@dataclass
class _Call:
    name: str
    layer_type: str
    fwd_start: Any = None
    fwd_end: Any = None
    marks: dict[str, Any] = field(default_factory=dict)


class LayerInstrument:
    """Times every call of the given layer units during one step at a time.

    Args:
        units: the layer units (from :func:`scaledl.graph.units.find_units` on the same model).
        clock: the clock of the model's device.
        backward: insert backward markers (training); ``False`` for inference.
    """

    def __init__(self, units: list[LayerUnit], clock: Clock, backward: bool) -> None:
        self.units = units
        self.clock = clock
        self.backward = backward
        self.calls: list[_Call] = []
        self._handles: list[Any] = []
        self._open: dict[int, list[_Call]] = {}

    def __enter__(self) -> "LayerInstrument":
        for unit in self.units:
            m = unit.module
            self._handles.append(m.register_forward_pre_hook(self._pre(unit), with_kwargs=True))
            self._handles.append(m.register_forward_hook(self._post(unit), with_kwargs=True))
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def start_step(self) -> None:
        """Forget the previous step's calls."""
        self.calls = []
        self._open = {}

    def layer_times_ms(self, step_start: Any, backward_end: Any) -> list[dict[str, Any]]:
        """Per-call forward and backward milliseconds of the last step, in execution order.

        A call whose input needs no gradient (an embedding of token ids, a patch embedding of
        pixels) has no input marker: its backward ends at the next backward mark of any call,
        or at ``backward_end`` when none follows (it was the last backward; with DDP that
        interval also holds the wait for the last all-reduce buckets). Measured before this
        rule: T5's two embedding calls both ran to the end of the backward pass, so their
        intervals overlapped and the layer sum exceeded the iteration.

        Args:
            step_start: the mark taken when the step began (reference of all marks).
            backward_end: the mark taken when the whole backward pass returned.

        Returns:
            One dict per call: ``layer_index``, ``layer_name``, ``layer_type``, ``forward_ms``,
            ``backward_ms`` (0.0 without backward).
        """

        def at(mark: Any) -> float:
            return self.clock.elapsed_ms(step_start, mark)

        end_all = at(backward_end)
        marks = sorted(at(m) for c in self.calls for m in c.marks.values())
        rows = []
        for i, c in enumerate(self.calls):
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
                    "layer_index": i,
                    "layer_name": c.name,
                    "layer_type": c.layer_type,
                    "forward_ms": self.clock.elapsed_ms(c.fwd_start, c.fwd_end),
                    "backward_ms": bwd,
                }
            )
        return rows

    def _pre(self, unit: LayerUnit):
        def hook(module, args, kwargs):
            call = _Call(unit.name, unit.layer_type)
            self.calls.append(call)
            self._open.setdefault(id(module), []).append(call)
            if self.backward and torch.is_grad_enabled():
                args, kwargs = _wrap_input(args, kwargs, call.marks, self.clock)
            call.fwd_start = self.clock.mark()
            return args, kwargs

        return hook

    def _post(self, unit: LayerUnit):
        def hook(module, args, kwargs, output):
            call = self._open[id(module)].pop()
            call.fwd_end = self.clock.mark()
            if self.backward and torch.is_grad_enabled():
                return _wrap_output(output, call.marks, self.clock)
            return None

        return hook


def _mark(x: torch.Tensor, sink: dict, key: str, clock: Clock) -> torch.Tensor:
    return _Marker.apply(x, sink, key, clock)


def _wrap_input(args: tuple, kwargs: dict, sink: dict, clock: Clock):
    """Wrap the first floating tensor input needing a gradient (positional, then keyword)."""
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.is_floating_point() and a.requires_grad:
            args = (*args[:i], _mark(a, sink, "in", clock), *args[i + 1 :])
            return args, kwargs
    for k, a in kwargs.items():
        if isinstance(a, torch.Tensor) and a.is_floating_point() and a.requires_grad:
            return args, {**kwargs, k: _mark(a, sink, "in", clock)}
    return args, kwargs


def _wrap_output(output: Any, sink: dict, clock: Clock) -> Any:
    """Wrap the main output tensor, keeping the output's container type."""
    t = main_tensor(output)
    if t is None or not t.requires_grad:
        return None
    if isinstance(output, torch.Tensor):
        return _mark(output, sink, "out", clock)
    if isinstance(output, tuple) and output and output[0] is t:
        return (_mark(t, sink, "out", clock), *output[1:])
    if hasattr(output, "keys"):
        for key in output.keys():
            if output[key] is t:
                output[key] = _mark(t, sink, "out", clock)
                return output
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
