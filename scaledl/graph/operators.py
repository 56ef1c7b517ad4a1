"""Operators of a layer, described the same way whatever their source.

A layer is decomposed into the kernels it launches. Each operator is one row of
:data:`DESCRIPTOR_COLUMNS`, built from an ATen operator the meta-device tracer recorded
(:func:`aten_descriptors`, from :attr:`scaledl.graph.layer_graph.LayerGraph.operators`) or from a
torch.fx node of a measured trace (:func:`scaledl.external.neusight.node_descriptor`):

* ``op_class``: ``matmul`` (``mm``, ``addmm``, ``bmm``, ``Linear``, a patch embedding's
  convolution as im2col GEMM: dimensions ``batch``, ``m``, ``n``, ``k``), ``elementwise`` (add,
  multiply, activations, dropout, copies, fills: its ``elements``), ``reduction`` (softmax,
  layer norm, means: its ``row_len``), ``embedding`` (gathers; ``table_bytes`` is the table the
  backward scatters into);
* ``op_kind``: the finer kind within the class (:data:`OP_KINDS`), e.g. ``linear`` vs
  ``batched`` matmuls, ``add`` (whose backward is a pass-through) vs ``activation``;
* ``bytes_in``/``bytes_out``: bytes of the tensors read and written.

Shape-only operators (``view``, ``transpose``, ``expand``, ...) launch no kernel and are not
operators here. The time models of these operators are in :mod:`scaledl.models.operators`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

#: Operator classes, each with its own utilisation model.
OP_CLASSES = ("matmul", "elementwise", "reduction", "embedding")
#: Kinds within each class (one-hot features of that class's models).
OP_KINDS = {
    "matmul": ("linear", "batched"),
    "elementwise": ("add", "mul", "activation", "dropout", "copy", "select", "fill"),
    "reduction": ("softmax", "layer_norm", "reduce"),
    "embedding": ("embedding",),
}
DESCRIPTOR_COLUMNS = (
    "op_class",
    "op_kind",
    "batch",
    "m",
    "n",
    "k",
    "elements",
    "bytes_in",
    "bytes_out",
    "table_bytes",
    "row_len",
)
#: Descriptor columns that scale with the batch size (affinely, see :func:`at_batch`).
BATCH_SCALED = ("batch", "m", "elements", "bytes_in", "bytes_out")
_SHAPE_OPS = frozenset(
    {
        "view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "permute", "transpose",
        "t", "alias", "select", "slice", "unsqueeze", "squeeze", "split", "split_with_sizes",
        "unbind", "as_strided", "detach", "empty_like", "empty", "new_empty", "lift_fresh",
        "narrow", "unfold", "_to_copy_meta", "numel", "sym_size", "lift_fresh_copy",
    }
)  # fmt: skip
_ATEN_KINDS = {
    "add": "add", "sub": "add", "add_": "add", "sub_": "add", "rsub": "add",
    "mul": "mul", "div": "mul", "mul_": "mul", "div_": "mul",
    "gelu": "activation", "tanh": "activation", "pow": "activation", "exp": "activation",
    "silu": "activation", "sigmoid": "activation", "relu": "activation", "rsqrt": "activation",
    "sqrt": "activation", "neg": "activation", "erf": "activation", "log": "activation",
    "native_dropout": "dropout", "bernoulli_": "dropout",
    "clone": "copy", "copy_": "copy", "_to_copy": "copy", "cat": "copy", "contiguous": "copy",
    "gather": "copy", "index": "copy", "index_select": "copy", "stack": "copy",
    "where": "select", "masked_fill": "select", "masked_fill_": "select",
    "full": "fill", "ones": "fill", "zeros": "fill", "arange": "fill", "fill_": "fill",
    "zero_": "fill", "scalar_tensor": "fill", "full_like": "fill", "ones_like": "fill",
    "zeros_like": "fill", "triu": "fill", "tril": "fill",
    "_softmax": "softmax", "_log_softmax": "softmax", "softmax": "softmax",
    "native_layer_norm": "layer_norm", "layer_norm": "layer_norm",
    "mean": "reduce", "sum": "reduce", "var_mean": "reduce", "amax": "reduce",
    "max": "reduce", "argmax": "reduce",
}  # fmt: skip
_CLASS_OF_KIND = {kind: cls for cls, kinds in OP_KINDS.items() for kind in kinds}


def descriptor(
    op_class: str,
    op_kind: str,
    *,
    batch: float = 1,
    m: float = 0,
    n: float = 0,
    k: float = 0,
    elements: float = 0,
    bytes_in: float = 0,
    bytes_out: float = 0,
    table_bytes: float = 0,
    row_len: float = 0,
) -> dict[str, object]:
    """One operator descriptor row (see the module docstring for the fields).

    Raises:
        ValueError: an unknown class or kind.
    """
    if _CLASS_OF_KIND.get(op_kind) != op_class:
        raise ValueError(f"operator kind {op_kind!r} is not of class {op_class!r} ({OP_KINDS})")
    return {
        "op_class": op_class,
        "op_kind": op_kind,
        "batch": float(batch),
        "m": float(m),
        "n": float(n),
        "k": float(k),
        "elements": float(elements),
        "bytes_in": float(bytes_in),
        "bytes_out": float(bytes_out),
        "table_bytes": float(table_bytes),
        "row_len": float(row_len),
    }


def matmul_descriptor(
    a: tuple[int, ...], b: tuple[int, ...], itemsize: int, bias_numel: int = 0, kind: str = ""
) -> dict[str, object]:
    """Descriptor of ``a @ b`` with PyTorch's broadcasting of leading (batch) dimensions.

    Args:
        a: shape of the left operand (..., M, K).
        b: shape of the right operand (..., K, N).
        itemsize: bytes per element.
        bias_numel: elements of an added bias (``addmm``), read once.
        kind: ``linear`` or ``batched``; default: ``batched`` when ``b`` has batch dimensions.

    Returns:
        The descriptor (``batch`` = product of the broadcast batch dimensions).
    """
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    batch_shape = np.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2]))
    batch = math.prod(batch_shape) if batch_shape else 1
    m, kk, n = a2[-2], a2[-1], b2[-1]
    b_batch = math.prod(b2[:-2]) if len(b2) > 2 else 1
    kind = kind or ("batched" if b_batch > 1 else "linear")
    return descriptor(
        "matmul",
        kind,
        batch=batch,
        m=m,
        n=n,
        k=kk,
        elements=batch * m * n,
        bytes_in=itemsize * (math.prod(a) + math.prod(b) + bias_numel),
        bytes_out=itemsize * batch * m * n,
    )


def aten_descriptors(operators: pd.DataFrame) -> pd.DataFrame:
    """Operator descriptors of ATen operators recorded by the meta-device tracer.

    The CPU/meta decomposition of dropout (``empty_like``, ``bernoulli_``, ``div_``, ``mul``)
    is collapsed into one ``dropout`` operator, as CUDA runs one fused ``native_dropout``
    kernel; shape-only operators and operators with no floating or index output are dropped.

    Args:
        operators: rows of :attr:`scaledl.graph.layer_graph.LayerGraph.operators`.

    Returns:
        One row per operator: ``layer_index``, ``op_index`` and :data:`DESCRIPTOR_COLUMNS`.
    """
    rows = []
    dropout = _DropoutTail()
    for r in operators.itertuples(index=False):
        ins, outs = list(r.input_shapes), list(r.output_shapes)
        if r.op in _SHAPE_OPS or not outs or dropout.absorbs(r.op, ins, outs):
            continue
        desc = _aten_descriptor(r.op, ins, outs, list(r.input_itemsizes), list(r.output_itemsizes))
        if desc is None:
            continue
        if desc["op_kind"] == "dropout":
            dropout.start(outs[0])
        rows.append({"layer_index": int(r.layer_index), "op_index": int(r.op_index), **desc})
    columns = ["layer_index", "op_index", *DESCRIPTOR_COLUMNS]
    return pd.DataFrame(rows, columns=columns)


class _DropoutTail:
    """The CPU/meta tail of a dropout (``div_`` of the mask, then ``mul`` by it), to skip.

    After a dropout of output shape ``s``, a ``div_`` of shape ``s`` and then a ``mul`` of two
    ``s`` inputs belong to it; any other operator ends the tail.
    """

    def __init__(self) -> None:
        self.shape: list | None = None
        self.pending_mul = False

    def start(self, shape: list) -> None:
        """A dropout of output ``shape`` was recorded: its tail may follow."""
        self.shape, self.pending_mul = shape, False

    def absorbs(self, name: str, ins: list, outs: list) -> bool:
        """Whether operator ``name`` is part of the current dropout's tail (then skip it)."""
        if self.shape is None:
            return False
        # bernoulli_ (mask) -> div_ (mask / keep probability) -> mul (x * mask)
        if not self.pending_mul and name == "div_" and outs[0] == self.shape:
            self.pending_mul = True
            return True
        absorbed = self.pending_mul and name == "mul" and ins.count(self.shape) == 2
        self.shape, self.pending_mul = None, False
        return absorbed


def _aten_descriptor(
    name: str, ins: list, outs: list, in_sizes: list, out_sizes: list
) -> dict[str, object] | None:
    """The descriptor of one ATen operator (``None``: no floating or index output to time).

    Args:
        name: the ATen operator name.
        ins: input shapes.
        outs: output shapes (non-empty).
        in_sizes: input item sizes in bytes.
        out_sizes: output item sizes in bytes.

    Returns:
        A :func:`descriptor` row, or ``None`` for an operator that is not timed.
    """
    item = out_sizes[0] if out_sizes else 4
    numel_in = sum(math.prod(s) * z for s, z in zip(ins, in_sizes, strict=True))
    numel_out = sum(math.prod(s) * z for s, z in zip(outs, out_sizes, strict=True))
    if name in ("mm", "addmm", "bmm", "baddbmm"):
        bias = math.prod(ins[0]) if name in ("addmm", "baddbmm") else 0
        a, b = (ins[1], ins[2]) if name in ("addmm", "baddbmm") else (ins[0], ins[1])
        desc = matmul_descriptor(a, b, item, bias_numel=bias)
        desc["bytes_in"] = float(numel_in)
        return desc
    if name in ("convolution", "_convolution") and len(ins) >= 2 and len(ins[1]) > 2:
        # a patch embedding's convolution is a GEMM: output pixels x output channels,
        # reduced over input channels x kernel window (im2col)
        out_channels = outs[0][1]
        return descriptor(
            "matmul",
            "linear",
            m=math.prod(outs[0]) // out_channels,
            n=out_channels,
            k=math.prod(ins[1][1:]),
            elements=math.prod(outs[0]),
            bytes_in=numel_in,
            bytes_out=numel_out,
        )
    if name == "embedding":
        weight, index = ins[0], ins[1]
        return descriptor(
            "embedding",
            "embedding",
            elements=math.prod(outs[0]),
            bytes_in=math.prod(index) * in_sizes[1],
            bytes_out=numel_out,
            table_bytes=math.prod(weight) * in_sizes[0],
            row_len=weight[-1],
        )
    kind = _ATEN_KINDS.get(name, "mul" if numel_out else None)
    if kind is None:
        return None
    if kind == "dropout":
        numel_in = math.prod(outs[0]) * item  # reads x, writes y and the mask
    cls = _CLASS_OF_KIND[kind]
    row_len = ins[0][-1] if cls == "reduction" and ins and ins[0] else 0
    return descriptor(
        cls,
        kind,
        elements=math.prod(outs[0]),
        bytes_in=numel_in,
        bytes_out=numel_out,
        row_len=row_len,
    )


def at_batch(
    desc_a: pd.DataFrame, desc_b: pd.DataFrame, batch_size: np.ndarray, base_batch: int = 2
) -> pd.DataFrame:
    """Descriptors at any batch size from those at two consecutive batch sizes.

    Every :data:`BATCH_SCALED` column of a transformer's operators is affine in the batch size
    (tokens, batch x heads, bytes), so ``d(b) = d(a) + (d(a+1) - d(a)) (b - a)`` is exact for
    the operators launched at both. The base is batch 2, not 1: at batch 1 PyTorch turns some
    copies into views (``expand`` + ``reshape`` of a size-1 batch), so the operator lists at 1
    and 2 differ; from batch 2 on they do not, and batch 1 keeps at most a few small copies too
    many.

    Args:
        desc_a: descriptors at batch size ``base_batch``.
        desc_b: descriptors at ``base_batch + 1``, row for row the same operators.
        batch_size: the batch sizes wanted, shape (n_workloads,).
        base_batch: the batch size of ``desc_a``.

    Returns:
        ``len(batch_size)`` copies of the descriptors stacked (workload-major), with a
        ``copy`` column (0..n_workloads-1).

    Raises:
        ValueError: the two descriptor lists are not the same operators.
    """
    if (
        len(desc_a) != len(desc_b)
        or not (desc_a["op_kind"].to_numpy() == desc_b["op_kind"].to_numpy()).all()
    ):
        raise ValueError(
            f"operator descriptors at batch {base_batch} and {base_batch + 1} differ: "
            "not batch-affine"
        )
    batch_size = np.asarray(batch_size, dtype=np.float64)
    n, w = len(desc_a), len(batch_size)
    out = desc_a.loc[np.tile(np.arange(n), w)].reset_index(drop=True)
    scale = np.repeat(batch_size - float(base_batch), n)
    for col in BATCH_SCALED:
        base = np.tile(desc_a[col].to_numpy(np.float64), w)
        slope = np.tile(desc_b[col].to_numpy(np.float64) - desc_a[col].to_numpy(np.float64), w)
        out[col] = base + slope * scale
    out["copy"] = np.repeat(np.arange(w), n)
    return out
