"""Record, count and memoise the ATen operators a meta-device forward pass dispatches.

On the meta device an operator computes no values: the shapes, strides and dtypes of its outputs
are a function of its own name, the shapes, strides and dtypes of its tensor arguments and its
other arguments. Most of a trace's time goes into PyTorch's Python meta kernels and
decompositions (about 0.4 ms an operator), and a transformer
repeats the same operators block after block, so :class:`OperatorRecorder` keeps, per
signature, the outputs' metadata, the operator's forward FLOPs (counted once by PyTorch's own
``torch.utils.flop_counter.FlopCounterMode``, which sits below it) and its record, and answers a
repeated signature with fresh meta tensors of that metadata without running the kernel again.

Only operators whose schema neither mutates an argument nor returns an alias of one (views,
in-place and ``out=`` variants are run every time), whose tensors are all on the meta device and
whose other arguments are plain values (numbers, strings, dtypes, devices...) are memoised, so a
hit returns exactly what the kernel would have: new tensors with the same metadata and no data.
Views (an aliasing schema, no mutation: ``view``, ``t``, ``transpose``, ``expand``... about 60%
of a transformer's operators) compute no FLOPs, so they run with Python dispatch off
(``torch._C._DisableTorchDispatch``), straight to their C++ meta kernels, bypassing the counter.
Together these about halve a trace's time. One run each on this project's 2-core CI host:
the 454 architectures of the quick preset and the reference dataset took 12.5 s against 23.2 s
unmemoised, with identical nodes, edges and operators. ``build_graph_set`` over the quick
preset's candidates took 24 s against 43 s. ``tests/graph/test_dispatch.py`` checks a
memoised trace of every family against an unmemoised one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

_PLAIN = (bool, int, float, str, torch.dtype, torch.device, torch.layout, torch.memory_format)


@dataclass(frozen=True)
class OperatorCall:
    """One ATen operator dispatched during a forward pass.

    Attributes:
        name: the operator, e.g. ``"addmm"``, ``"bmm"``, ``"_softmax"`` (overload packet name).
        input_shapes: shapes of the tensor arguments, in argument order.
        input_itemsizes: bytes per element of those tensors.
        output_shapes: shapes of the tensors returned.
        output_itemsizes: bytes per element of those tensors.
    """

    name: str
    input_shapes: tuple[tuple[int, ...], ...]
    input_itemsizes: tuple[int, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    output_itemsizes: tuple[int, ...]


class _NotMemoisable(Exception):
    """An argument or output the memo cannot key or rebuild."""


class OperatorRecorder(TorchDispatchMode):
    """Counts, records and memoises ATen operator calls (module docstring).

    Enter it inside a ``FlopCounterMode`` (``with counter, recorder:``) so that every operator
    reaches the recorder first and the counter counts the FLOPs of the ones actually run.

    Attributes:
        count: operators dispatched so far (memo hits included).
        flops: forward FLOPs of those operators, as ``FlopCounterMode`` counts them.
        records: one :class:`OperatorCall` per operator, in dispatch order.
        memo: signature -> (outputs' metadata, FLOPs, record), for this recorder's trace.
            (A memo shared by every trace of the quick preset's 287 architectures was not
            faster: they dispatch only about 1,750 distinct signatures, most within a trace.)
    """

    def __init__(self, counter: FlopCounterMode) -> None:
        super().__init__()
        self.counter = counter
        self.count = 0
        self.flops = 0.0
        self.records: list[OperatorCall] = []
        self.memo: dict = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.count += 1
        key = _signature(func, args, kwargs)
        hit = self.memo.get(key) if key is not None else None
        if hit is not None:
            spec, flops, record = hit
            self.flops += flops
            self.records.append(record)
            with torch._C._DisableTorchDispatch():
                return _rebuild(spec)
        if _kind(func) == "view":
            with torch._C._DisableTorchDispatch():
                out = func(*args, **kwargs)
            self.records.append(_record(func, args, kwargs, out))
            return out
        before = self.counter.get_total_flops()
        out = func(*args, **kwargs)
        flops = float(self.counter.get_total_flops() - before)
        record = _record(func, args, kwargs, out)
        self.flops += flops
        self.records.append(record)
        if key is not None:
            try:
                self.memo[key] = (_spec(out), flops, record)
            except _NotMemoisable:
                pass  # e.g. a CPU tensor returned: run it again next time
        return out


def _record(func, args, kwargs, out) -> OperatorCall:
    inputs = list(iter_tensors((args, kwargs)))
    outputs = list(iter_tensors(out))
    return OperatorCall(
        name=func.overloadpacket.__name__,
        input_shapes=tuple(tuple(t.shape) for t in inputs),
        input_itemsizes=tuple(t.element_size() for t in inputs),
        output_shapes=tuple(tuple(t.shape) for t in outputs),
        output_itemsizes=tuple(t.element_size() for t in outputs),
    )


_KINDS: dict[Any, str] = {}


def _kind(func) -> str:
    """How an operator treats its arguments, read off its schema once.

    Returns:
        ``functional`` (neither mutates nor aliases an argument), ``view`` (returns an alias,
        mutates nothing) or ``other``.
    """
    kind = _KINDS.get(func)
    if kind is None:
        schema = getattr(func, "_schema", None) if isinstance(func, torch._ops.OpOverload) else None
        if schema is None or schema.is_mutable:
            kind = "other"
        elif any(r.alias_info is not None for r in schema.returns):
            kind = "view"
        else:
            kind = "functional"
        _KINDS[func] = kind
    return kind


def _signature(func, args, kwargs) -> tuple | None:
    """The memo key of a call, or ``None`` when it is not memoised (module docstring)."""
    if _kind(func) != "functional":
        return None
    try:
        return (func, _key(args), _key(tuple(sorted(kwargs.items()))))
    except _NotMemoisable:
        return None


def _key(value: Any):
    if isinstance(value, torch.Tensor):
        if value.device.type != "meta":
            raise _NotMemoisable  # its values could decide the outputs
        return ("tensor", tuple(value.shape), value.stride(), value.dtype)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, *(_key(v) for v in value))
    if value is None:
        return None
    if isinstance(value, _PLAIN):
        return (type(value).__name__, value)  # True and 1 are different keys
    raise _NotMemoisable


def _spec(out: Any):
    if isinstance(out, torch.Tensor):
        if out.device.type != "meta":
            raise _NotMemoisable
        return ("tensor", tuple(out.shape), out.stride(), out.dtype)
    if isinstance(out, (tuple, list)):
        return (type(out), tuple(_spec(o) for o in out))
    if out is None:
        return ("none",)
    raise _NotMemoisable


def _rebuild(spec):
    if spec[0] == "tensor":
        _, shape, stride, dtype = spec
        return torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    if spec[0] == "none":
        return None
    kind, items = spec
    return kind(_rebuild(s) for s in items)


def iter_tensors(values: Any):
    """The tensors nested in args, kwargs, outputs or a model output (``to_tuple``), in order.

    Args:
        values: a tensor, or dicts, tuples and lists (and model outputs) of them.

    Yields:
        Each ``torch.Tensor`` found, depth first.
    """
    if isinstance(values, torch.Tensor):
        yield values
    elif isinstance(values, dict):
        for v in values.values():
            yield from iter_tensors(v)
    elif isinstance(values, (tuple, list)):
        for v in values:
            yield from iter_tensors(v)
    elif hasattr(values, "to_tuple"):
        yield from iter_tensors(values.to_tuple())
