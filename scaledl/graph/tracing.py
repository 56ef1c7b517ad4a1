"""Trace the calls of a model's layer units on the meta device: order, shapes, FLOPs, bytes.

The model is built on ``torch.device("meta")`` and run once on a meta batch, so tracing allocates
no memory and needs no hardware. Forward FLOPs per call come from PyTorch's own counter
(``torch.utils.flop_counter.FlopCounterMode``), read before and after each unit call by module
hooks. Backward FLOPs use the standard rule that the backward pass of a layer with weights costs
twice its forward (gradients with respect to inputs and to weights; Kaplan et al. 2020, "Scaling
Laws for Neural Language Models", the 6·N·D training-FLOPs rule) and once its forward for layers
without weights. The number of ATen operators each call dispatches is counted too: on small
layers, per-operator overhead, not FLOPs, sets the time. Each dispatched operator is also recorded
(:class:`OperatorCall`: ATen name, input and output tensor shapes and element sizes), so a layer
can be decomposed into its kernels (matmuls, element-wise, reductions) by
:mod:`scaledl.models.operators`. Operators are counted, recorded and memoised by
:class:`~scaledl.graph.dispatch.OperatorRecorder`: a repeated block's operators are answered
from the memo, which makes a trace about twice as fast and changes none of its figures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from scaledl.graph.dispatch import OperatorCall, OperatorRecorder, iter_tensors
from scaledl.graph.units import LayerUnit, find_units
from scaledl.workloads.builders import build_model, make_batch
from scaledl.workloads.spec import Workload


@dataclass(frozen=True)
class UnitCall:
    """One call of a layer unit during a forward pass.

    Attributes:
        unit: the unit called.
        call_index: how many times this unit was called before (0 for the first call).
        fwd_flops: forward FLOPs of the call.
        fwd_ops: ATen operators the forward call dispatches (kernel launches and framework
            overhead grow with it, whatever the FLOPs).
        bwd_flops: estimated backward FLOPs (0 for inference workloads).
        input_bytes: bytes of the floating-point (or index) tensors passed in.
        output_bytes: bytes of the tensors returned (activation size).
        input_shape: shape of the main input tensor, e.g. ``"2x64x128"``.
        output_shape: shape of the main output tensor.
        params: parameters first owned by this call (a parameter shared by several units or
            calls, such as tied embeddings, counts once, at its first use).
        operators: the ATen operators the forward call dispatched, in order.
    """

    unit: LayerUnit
    call_index: int
    fwd_flops: float
    fwd_ops: int
    bwd_flops: float
    input_bytes: int
    output_bytes: int
    input_shape: str
    output_shape: str
    params: int = 0
    operators: tuple[OperatorCall, ...] = ()


def main_tensor(values: Any) -> torch.Tensor | None:
    """The first tensor in nested args/kwargs/outputs, preferring floating-point ones."""
    tensors = list(iter_tensors(values))
    for t in tensors:
        if t.is_floating_point():
            return t
    return tensors[0] if tensors else None


def tensor_bytes(values: Any) -> int:
    """Total bytes of the tensors nested in ``values``."""
    return sum(t.numel() * t.element_size() for t in iter_tensors(values))


def shape_str(tensor: torch.Tensor | None) -> str:
    """``"2x64x128"`` for a tensor of that shape, ``""`` for ``None``."""
    return "x".join(str(d) for d in tensor.shape) if tensor is not None else ""


def trace_units(
    workload: Workload, model: torch.nn.Module | None = None
) -> tuple[list[UnitCall], torch.nn.Module]:
    """Run the workload's model once on meta tensors and record every unit call.

    Args:
        workload: the workload to trace.
        model: the workload's model on the meta device, to trace an architecture at several
            batch sizes with one build (``build_model(workload, device="meta")``; the batch
            size does not enter the model); built here when ``None``.

    Returns:
        The unit calls in execution order, and the meta model (for parameter bucketing).

    Raises:
        RuntimeError: a unit was never called (the model does not run as traced).
    """
    if model is None:
        model = build_model(workload, device="meta")
    units = find_units(model)
    batch = make_batch(workload, device="meta")
    counter = FlopCounterMode(display=False)
    ops = OperatorRecorder(counter)
    calls: list[UnitCall] = []
    starts: dict[int, list[float]] = {}
    counts: dict[int, int] = {}
    handles = []
    train = workload.mode == "train"

    def pre_hook(unit: LayerUnit):
        def hook(module, args, kwargs):
            starts.setdefault(id(module), []).append((ops.flops, ops.count))

        return hook

    def post_hook(unit: LayerUnit):
        def hook(module, args, kwargs, output):
            flops0, ops0 = starts[id(module)].pop()
            fwd = ops.flops - flops0
            k = counts.get(id(module), 0)
            counts[id(module)] = k + 1
            inp = main_tensor((args, kwargs))
            out = main_tensor(output)
            bwd = (2.0 if unit.params > 0 else 1.0) * fwd if train else 0.0
            calls.append(
                UnitCall(
                    unit=unit,
                    call_index=k,
                    fwd_flops=fwd,
                    fwd_ops=ops.count - ops0,
                    bwd_flops=bwd,
                    input_bytes=tensor_bytes((args, kwargs)),
                    output_bytes=tensor_bytes(output),
                    input_shape=shape_str(inp),
                    output_shape=shape_str(out),
                    operators=tuple(ops.records[ops0:]),
                )
            )

        return hook

    for unit in units:
        handles.append(unit.module.register_forward_pre_hook(pre_hook(unit), with_kwargs=True))
        handles.append(unit.module.register_forward_hook(post_hook(unit), with_kwargs=True))
    try:
        with counter, ops, torch.no_grad():
            model(**batch)
    finally:
        for h in handles:
            h.remove()
    # Units never nest (find_units), so the order of call ends is the execution order.
    return _assign_params(calls, model, workload), model


def _assign_params(calls: list[UnitCall], model: torch.nn.Module, workload: Workload):
    """Give each parameter to the first call that uses it.

    A parameter of a module never called as a module (its parent reads ``.weight`` itself, as
    DeBERTa's encoder reads ``rel_embeddings``) goes to the first call of the unit nearest to it
    in the module tree: the first unit under its deepest named ancestor.

    Raises:
        RuntimeError: a parameter has no unit under any named ancestor (a top-level
            parameter): the architecture is not supported; names the module.
    """
    owned: set[int] = set()
    extra: dict[int, int] = {}
    for c in calls:
        owned.update(id(p) for p in c.unit.module.parameters())
    for name, p in model.named_parameters():
        if id(p) in owned:
            continue
        index = _nearest_call(calls, name)
        if index is None:
            module = name.rpartition(".")[0]
            kind = type(model.get_submodule(module)).__name__
            raise RuntimeError(
                f"{workload.family}: unsupported architecture: parameter {name!r} of module "
                f"{module or '<model>'!r} ({kind}) is used outside every layer unit and no "
                "unit shares its parent module"
            )
        extra[index] = extra.get(index, 0) + p.numel()
        owned.add(id(p))
    seen: set[int] = set()
    result = []
    for i, c in enumerate(calls):
        fresh = [p for p in c.unit.module.parameters() if id(p) not in seen]
        seen.update(id(p) for p in fresh)
        params = sum(p.numel() for p in fresh) + extra.get(i, 0)
        result.append(dataclasses.replace(c, params=params))
    return result


def _nearest_call(calls: list[UnitCall], parameter: str) -> int | None:
    """Index of the first call of a unit under the parameter's deepest ancestor (not the root)."""
    parts = parameter.split(".")[:-2]  # the module's ancestors, deepest last
    while parts:
        prefix = ".".join(parts) + "."
        for i, c in enumerate(calls):
            if c.unit.name.startswith(prefix):
                return i
        parts.pop()
    return None
