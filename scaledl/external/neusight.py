"""Importer for NeuSight's measured GPU traces and whole-model latencies.

Source: sitar-lab/NeuSight (https://github.com/sitar-lab/NeuSight, ASPLOS 2025, MIT licence, see
``external/neusight/LICENSE``), copied to ``external/neusight/``:

* ``label/<GPU>/<model>-<train|inf>-<seq_len>-<batch>[-dp4|-tp4|-pp4_1|-fusion].json``: whole-model
  times in ms measured with CUDA events on Hugging Face models in FP32: ``e2e_latency``,
  ``fw_latency``, ``bwall_latency`` (``loss.backward()``, no optimizer step) and ``num_layer``.
* ``label/<GPU>/<model>-<mode>-<seq_len>-<batch>.csv``: the torch.fx trace of the same model, one
  row per node (``op``, ``target``, ``meta`` holding the ``nn_module_stack``, ``input_shapes``,
  ``output_shape``, ``dtype``, ``fw_latency``/``bw_latency`` in ms, graph edges ``_input_nodes`` and
  ``users``, node ``Name``). Only the first transformer block is traced; ``num_layer`` says how many
  the model has.
* ``model_configs/<model>.json`` (Hugging Face configs) and ``device_configs/<GPU>.json``.

Layer units follow :mod:`scaledl.graph.units`: walking a node's module stack from the outermost
module, the first module whose ``"<attribute> <class>"`` matches
:data:`~scaledl.graph.units.LAYER_TYPE_PATTERNS` is its unit (BERT: ``embeddings``, the whole
``attention`` (self-attention + output projection + its LayerNorm), ``intermediate`` and
``output`` (both feed-forward), ``pooler``, ``cls`` head; GPT-2: ``wte``, ``wpe``, ``ln_1``,
``attn``, ``ln_2``, ``mlp``, ``ln_f``, ``lm_head``). A leaf ``Linear`` that matches nothing is a
head. Other model types (OPT, BART, T5...) follow the same rules; an encoder-decoder model
has two block stacks, each traced block standing for its own stack's blocks
(:func:`block_repeats`). Nodes inside no unit ("glue": residual adds at block level, GPT-2's
embedding sum and dropout, view/size bookkeeping) are merged into the preceding unit of the same
block (or of the top level); glue before any unit forms an ``other`` unit called
``<root>.prologue`` (input and mask preparation).

FLOP conventions (per node, summed per unit): ``2*M*N*K`` for ``Linear`` modules and ``addmm``,
``mm``, ``bmm``, ``matmul`` calls (batched over leading dimensions); one FLOP per output element
for every other floating-point op (elementwise, softmax, norms, dropout); zero for embedding
lookups, shape bookkeeping (``size``, ``view``, ``permute``, ``getitem``...) and tensor creation.
Backward FLOPs (``train`` only, 0 for ``infer``): twice the forward FLOPs for matmuls (the gradients
of both operands), equal to the forward FLOPs otherwise.

``params`` per unit: ``Linear`` ``in*out + out`` (no bias for modules named ``lm_head``, as in
Hugging Face LM heads), GPT-2 ``Conv1D`` from its traced weight and bias shapes, ``LayerNorm``
``2*dim``, ``Embedding`` rows from the config (``vocab_size``, ``max_position_embeddings``,
``type_vocab_size`` by name) times the width. Tied weights count in every unit using them.
``input_bytes`` are the outputs of nodes outside the unit consumed by it, ``output_bytes`` the
outputs of its nodes consumed outside it (from the fx graph edges and the traced dtypes).

Operators (:func:`trace_operators`): every node that launches a kernel becomes an operator
descriptor (:func:`node_descriptor`, classes of :mod:`scaledl.graph.operators`) with its
forward and backward time; host-only nodes (``size``, ``view``, ``getitem``, ``to``, Python
scalars) do not. NeuSight times each node alone with CUDA events, so a host-only node shows
the ~7 us event floor though in the real forward it overlaps the queued kernels: they are 0.3-22 %
(median 2.4 %) of a trace's forward time, and the unit sums ``forward_kernel_ms`` /
``backward_kernel_ms`` leave them out.

Consistency (measured on the 57 imported workloads): the kernel-node sums scaled by
``block_repeat`` over the JSON ``e2e_latency`` have median 1.00 (train 0.98, inference 1.00),
range 0.82-1.51, 0.82-1.16 without the A100-PCIe-40GB; the train backward ratio lies in
0.84-1.14. The outliers are the A100-PCIe-40GB inference traces of BERT and GPT2-Large
(1.17-1.51): the same models' traces on the other GPUs agree with their labels, so the trace and
the label of that machine were measured under different conditions rather than mis-aggregated
here. Per GPU the ratio is consistent (L4 0.85-0.96, A100 80GB PCIe 0.82-0.98), a bias a
per-device calibration on labels can learn. Ratios are kept in :attr:`NeusightData.consistency`.
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scaledl.graph.operators import descriptor, matmul_descriptor
from scaledl.graph.units import LAYER_TYPE_PATTERNS
from scaledl.io.safe import UnsafeInputError, check_regular_file, read_json
from scaledl.layout import neusight_root
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.hf import read_hf_config

_NAME_RE = re.compile(
    r"^(?P<model>[A-Za-z0-9_.]+)-(?P<mode>train|inf)-(?P<seq_len>\d+)-(?P<batch>\d+)"
    r"(?:-(?P<suffix>(?P<strategy>dp|tp|pp)(?P<degree>\d+)(?:_(?P<micro>\d+))?|fusion))?$"
)
_MODES = {"train": "train", "inf": "infer"}
_CSV_COLUMNS = (
    "op",
    "target",
    "meta",
    "input_shapes",
    "output_shape",
    "dtype",
    "fw_latency",
    "bw_latency",
    "Name",
    "_input_nodes",
    "users",
)
_JSON_KEYS = ("num_layer", "e2e_latency", "fw_latency", "bwall_latency")
_DEVICE_KEYS = {
    "Dev_Mem": "memory_gb",
    "Mem_Bw": "mem_bandwidth_gbps",
    "Num_Sm": "num_sms",
    "Core_Per_SM": "cores_per_sm",
    "Freq": "clock_mhz",
    "SingleFLOPs": "peak_fp32_gflops",
    "L2Cache": "l2_mb",
}
_DTYPE_BYTES = {
    "torch.float64": 8,
    "torch.float32": 4,
    "torch.float16": 2,
    "torch.bfloat16": 2,
    "torch.int64": 8,
    "torch.int32": 4,
    "torch.int16": 2,
    "torch.int8": 1,
    "torch.uint8": 1,
    "torch.bool": 1,
}
_STACK_RE = re.compile(r"\('([^']*)', <class '([^']*)'>\)")
_EDGE_RE = re.compile(r"([A-Za-z_]\w*): None")
_FN_RE = re.compile(
    r"<(?:built-in (?:function|method)|function) (\w+)|<class '(?:[\w.]*\.)?(\w+)'>"
)
_BLOCK_RE = re.compile(r"\.\d+$")
_MATMUL = {"matmul", "mm", "bmm", "addmm", "baddbmm"}
_NO_FLOP = {
    "size",
    "view",
    "reshape",
    "permute",
    "transpose",
    "contiguous",
    "expand",
    "unsqueeze",
    "squeeze",
    "split",
    "chunk",
    "getitem",
    "getattr",
    "to",
    "type",
    "dim",
    "full",
    "ones",
    "zeros",
    "arange",
    "finfo",
    "Embedding",
    "embedding",
}
_PARAM_LEAVES = {"Linear", "Conv1D", "Embedding", "LayerNorm"}

#: Layer types a NeuSight layer row can have.
NEUSIGHT_LAYER_TYPES = ("embedding", "attention", "feed-forward", "norm", "head", "pooler", "other")


_FUSION = "'-fusion' label (torch.compile inference): not imported"


class NeusightFormatError(ValueError):
    """A NeuSight file is malformed; the message names the file (and column or key)."""


@dataclass
class NeusightData:
    """Tables imported from the NeuSight data.

    Attributes:
        workloads: one row per single-GPU (gpu, model, mode, seq_len, batch) with a trace and a
            label: ``workload_id``, ``gpu``, ``model``, ``family``, ``mode`` ('train'|'infer'),
            ``seq_len``, ``batch_size``, ``hidden_size``, ``num_layers``, ``num_heads``,
            ``intermediate_size``, ``vocab_size``, device columns (``peak_fp32_gflops``,
            ``mem_bandwidth_gbps``, ``num_sms``, ``l2_mb``, ``memory_gb``, ``clock_mhz``,
            ``cores_per_sm``), labels ``iteration_ms`` (``e2e_latency``), ``forward_ms_total``,
            ``backward_ms_total``, and the ``trace_file``.
        layers: one row per (workload, layer unit): ``workload_id``, ``layer_index``,
            ``layer_name``, ``layer_type``, ``block_repeat``, ``forward_ms``, ``backward_ms``
            (all nodes), ``forward_kernel_ms``, ``backward_kernel_ms`` (kernel nodes only),
            ``fwd_flops``, ``bwd_flops``, ``params``, ``input_bytes``, ``output_bytes``,
            ``num_nodes`` (fx nodes merged).
        consistency: per workload, the kernel-node sums scaled by ``block_repeat`` against the JSON
            labels: ``forward_ratio`` (trace / ``fw_latency``), ``backward_ratio`` (train only),
            ``total_ratio`` (trace fw+bw / ``e2e_latency``).
        devices: one row per ``device_configs/*.json`` (``gpu`` plus the device columns).
        parallel: labels of multi-GPU runs (``-dp4``, ``-tp4``, ``-pp4_1``): ``gpu``, ``model``,
            ``mode``, ``seq_len``, ``global_batch_size``, ``strategy`` ('dp'|'tp'|'pp'),
            ``degree``, ``microbatches`` (pp only, else 1), ``iteration_ms``, ``file``.
        operators: one row per kernel-launching trace node (:func:`trace_operators`) with
            ``workload_id`` and the trace ``file``.
        skipped: one row per label not imported: ``file`` and ``reason`` (a single-GPU label
            without its CSV trace; a ``-fusion`` label).
    """

    workloads: pd.DataFrame
    layers: pd.DataFrame
    consistency: pd.DataFrame
    devices: pd.DataFrame
    parallel: pd.DataFrame
    operators: pd.DataFrame
    skipped: pd.DataFrame


def workload_id(gpu: str, model: str, mode: str, seq_len: int, batch_size: int) -> str:
    """Stable identifier of a NeuSight workload.

    Args:
        gpu: device directory name, e.g. ``"NVIDIA_H100_80GB_HBM3"``.
        model: model name, e.g. ``"gpt2_large"``.
        mode: ``"train"`` or ``"infer"``.
        seq_len: sequence length.
        batch_size: batch size.

    Returns:
        16 hex digits of the SHA-1 of the keys.
    """
    key = f"neusight|{gpu}|{model}|{mode}|{int(seq_len)}|{int(batch_size)}"
    return hashlib.sha1(key.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- small readers
def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object through :func:`scaledl.io.safe.read_json` (regular file, finite numbers).

    Raises:
        NeusightFormatError: unreadable, not a regular file, not JSON, a non-finite number
            (naming its key) or not an object; the message names the file.
    """
    try:
        data = read_json(path)
    except UnsafeInputError as exc:
        raise NeusightFormatError(str(exc)) from exc
    except OSError as exc:
        raise NeusightFormatError(f"{path}: cannot read JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise NeusightFormatError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _number(path: Path, key: str, value: Any, positive: bool) -> float:
    """A finite number ``>= 0`` (``> 0`` when ``positive``) of a JSON key, as a float.

    Raises:
        NeusightFormatError: not a number, not finite or out of range (naming file, key, value).
    """
    bound = "> 0" if positive else ">= 0"
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    try:
        number = float(value) if is_number else math.nan
    except OverflowError:  # an integer of hundreds of digits
        number = math.inf
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise NeusightFormatError(
            f"{path}: key {key!r} (value {repr(value)[:40]}) must be a finite number {bound}"
        )
    return number


def _read_label(path: Path) -> dict[str, float]:
    data = _read_json(path)
    return {key: _number(path, key, data.get(key), key == "e2e_latency") for key in _JSON_KEYS}


def read_device_configs(root: Path | str | None = None) -> pd.DataFrame:
    """Read ``device_configs/*.json``.

    Args:
        root: the NeuSight data folder (default :func:`scaledl.layout.neusight_root`).

    Returns:
        One row per GPU: ``gpu`` (file stem), ``device_name`` and the device columns.

    Raises:
        NeusightFormatError: a file that is not a regular JSON file, lacks a key or has a value
            that is not a finite number > 0.
    """
    root = Path(root) if root is not None else neusight_root()
    rows = []
    for path in sorted((Path(root) / "device_configs").glob("*.json")):
        data = _read_json(path)
        row: dict[str, Any] = {"gpu": path.stem, "device_name": data.get("Device", path.stem)}
        for key, col in _DEVICE_KEYS.items():
            row[col] = _number(path, key, data.get(key), positive=True)
        rows.append(row)
    return pd.DataFrame(rows)


def read_model_config(path: Path) -> dict[str, int]:
    """Architecture numbers of a Hugging Face config of any model type ``family: hf`` reads.

    The config is read by :func:`scaledl.workloads.hf.read_hf_config` (transformers'
    ``AutoConfig.for_model``: BERT, GPT-2, OPT, T5, BART, Llama...), so every field name
    transformers maps (``n_embd``, ``d_model``, ``ffn_dim``, ``d_ff``...) is understood.

    Args:
        path: the config JSON.

    Returns:
        ``hidden_size``, ``num_layers`` (encoder layers for encoder-decoder models),
        ``decoder_num_layers`` (0 without a decoder stack), ``num_heads``,
        ``intermediate_size`` (``4*hidden`` when the config has none), ``vocab_size``,
        ``max_positions`` (rows of a learned position table, 0 without one) and
        ``type_vocab_size`` (0 when absent).

    Raises:
        NeusightFormatError: the config is unreadable, of a ``model_type`` transformers does not
            know, or lacks a field (the message names the file, the field and its value).
    """
    try:
        check_regular_file(path)
        info = read_hf_config(str(path))
    except (WorkloadError, UnsafeInputError) as exc:
        raise NeusightFormatError(f"{path}: {exc}") from exc
    fields = info.workload_fields()
    for name in ("hidden_size", "num_layers", "num_heads", "vocab_size"):
        if name not in fields:
            raise NeusightFormatError(
                f"{path}: field {name!r} (value None): the {info.model_type} config defines no "
                f"{name}"
            )
    hidden = int(fields["hidden_size"])
    rows = next(
        (info.field(n)[1] for n in ("max_position_embeddings", "n_positions")
         if isinstance(info.field(n)[1], int)),
        0,
    )  # fmt: skip
    return {
        "hidden_size": hidden,
        "num_layers": int(fields["num_layers"]),
        "decoder_num_layers": int(fields.get("decoder_num_layers", 0)),
        "num_heads": int(fields["num_heads"]),
        "intermediate_size": int(fields.get("intermediate_size", 4 * hidden)),
        "vocab_size": int(fields["vocab_size"]),
        "max_positions": int(rows),
        "type_vocab_size": int(getattr(info.config, "type_vocab_size", 0) or 0),
    }


# --------------------------------------------------------------------------- trace parsing
def _literal(path: Path, column: str, row: int, text: Any) -> Any:
    try:
        return ast.literal_eval(str(text))
    except (ValueError, SyntaxError) as exc:
        raise NeusightFormatError(
            f"{path}: column {column!r}, row {row + 1}: cannot parse {str(text)[:60]!r}"
        ) from exc


def _numel(shape: Any) -> int:
    return int(np.prod([int(d) for d in shape])) if shape else 1


def _short_target(op: str, target: str) -> str:
    if op == "call_function":
        m = _FN_RE.search(target)
        return (m.group(1) or m.group(2)) if m else target
    return target.rsplit(".", 1)[-1] if op != "call_method" else target


def _matmul_flops(name: str, shapes: list[list[int]]) -> float:
    if name == "addmm" and len(shapes) >= 3:
        a, b = shapes[1], shapes[2]
    elif name == "baddbmm" and len(shapes) >= 3:
        a, b = shapes[1], shapes[2]
    else:
        a, b = shapes[0], shapes[1]
    if len(a) < 1 or len(b) < 1:
        return 0.0
    a2 = [1, *a] if len(a) == 1 else list(a)
    b2 = [*b, 1] if len(b) == 1 else list(b)
    batch = np.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2]))
    m, k, n = a2[-2], a2[-1], b2[-1]
    return 2.0 * _numel(batch) * m * k * n


def _classify(attr: str, cls: str) -> str | None:
    text = f"{attr} {cls}"
    for layer_type, pattern in LAYER_TYPE_PATTERNS:
        if pattern.search(text):
            return layer_type
    return None


@dataclass
class _Node:
    name: str
    op: str
    fn: str
    stack: list[tuple[str, str]]
    input_shapes: list[list[int]]
    output_shape: tuple[int, ...]
    dtype_bytes: int
    fw: float
    bw: float
    inputs: list[str]
    users: list[str]


def read_trace(path: Path | str) -> list[_Node]:
    """Parse one NeuSight fx trace CSV.

    Args:
        path: the CSV.

    Returns:
        Its nodes in execution order.

    Raises:
        NeusightFormatError: not a regular file, a missing column, a latency that is not a
            finite number >= 0, or a cell that cannot be parsed (the message names the file,
            column and data row, counted from 1 after the header).
    """
    path = Path(path)
    try:
        raw = pd.read_csv(check_regular_file(path), encoding="utf-8")
    except UnsafeInputError as exc:
        raise NeusightFormatError(str(exc)) from exc
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise NeusightFormatError(f"{path}: cannot read CSV ({exc})") from exc
    missing = [c for c in _CSV_COLUMNS if c not in raw.columns]
    if missing:
        raise NeusightFormatError(f"{path}: missing column(s) {missing}")
    for col in ("fw_latency", "bw_latency"):
        values = pd.to_numeric(raw[col], errors="coerce")
        bad = ~(np.isfinite(values) & (values >= 0))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise NeusightFormatError(
                f"{path}: column {col!r}, row {row + 1}: expected a finite latency >= 0, "
                f"got {raw[col].iloc[row]!r}"
            )
        raw[col] = values
    nodes = []
    raw = raw.rename(columns={"_input_nodes": "input_nodes"})
    for i, r in enumerate(raw.itertuples(index=False)):
        meta = str(r.meta)
        stack = [(p, c.rsplit(".", 1)[-1]) for p, c in _STACK_RE.findall(meta)]
        if not stack and "nn_module_stack" in meta:
            raise NeusightFormatError(
                f"{path}: column 'meta', row {i + 1}: unreadable module stack"
            )
        shapes = _literal(path, "input_shapes", i, r.input_shapes)
        out_shape = _literal(path, "output_shape", i, r.output_shape)
        if not isinstance(shapes, list) or not isinstance(out_shape, tuple | list):
            raise NeusightFormatError(
                f"{path}: row {i + 1}: columns 'input_shapes'/'output_shape' are not lists"
            )
        dtype = r.dtype if isinstance(r.dtype, str) else ""
        nodes.append(
            _Node(
                name=str(r.Name),
                op=str(r.op),
                fn=_short_target(str(r.op), str(r.target)),
                stack=stack,
                input_shapes=[list(s) if isinstance(s, list | tuple) else [] for s in shapes],
                output_shape=tuple(int(d) for d in out_shape),
                dtype_bytes=_DTYPE_BYTES.get(dtype, 0),
                fw=float(r.fw_latency),
                bw=float(r.bw_latency),
                inputs=_EDGE_RE.findall(str(r.input_nodes)),
                users=_EDGE_RE.findall(str(r.users)),
            )
        )
    return nodes


def _unit_of(stack: list[tuple[str, str]]) -> tuple[str, str, str] | None:
    """Return ``(unit name, layer type, block name)`` of a module stack, ``None`` for glue."""
    block = ""
    for depth, (path, cls) in enumerate(stack):
        if not block and _BLOCK_RE.search(path):
            block = path
        layer_type = _classify(path.rsplit(".", 1)[-1], cls)
        if layer_type is None and depth == len(stack) - 1 and _param_leaf(cls):
            layer_type = "head" if cls == "Linear" else "other"
        if layer_type is not None:
            return path, layer_type, block
    return None


def _param_leaf(cls: str) -> bool:
    return cls in _PARAM_LEAVES or _is_embedding(cls)


def _block_of(stack: list[tuple[str, str]]) -> str:
    return next((p for p, _ in stack if _BLOCK_RE.search(p)), "")


def _node_flops(node: _Node) -> tuple[float, float]:
    """Forward FLOPs and the backward multiplier of a node."""
    if node.op in ("placeholder", "output", "get_attr") or node.dtype_bytes == 0:
        return 0.0, 0.0
    leaf_cls = node.stack[-1][1] if node.stack else ""
    if node.op == "call_module" and leaf_cls == "Linear" and node.input_shapes:
        k = node.input_shapes[0][-1]
        return 2.0 * _numel(node.input_shapes[0]) / k * k * node.output_shape[-1], 2.0
    if node.fn in _MATMUL and len(node.input_shapes) >= 2:
        return _matmul_flops(node.fn, node.input_shapes), 2.0
    if node.fn in _NO_FLOP or (
        node.op == "call_module" and (leaf_cls in _NO_FLOP or _is_embedding(leaf_cls))
    ):
        return 0.0, 0.0
    if node.dtype_bytes and node.output_shape and not node.fn.startswith("int"):
        return float(_numel(node.output_shape)), 1.0
    return 0.0, 0.0


def _module_params(path: str, cls: str, nodes: list[_Node], cfg: dict[str, int]) -> int:
    """Parameters of one leaf module from the trace shapes (and the config for embeddings)."""
    attr = path.rsplit(".", 1)[-1]
    call = next((n for n in nodes if n.op == "call_module"), None)
    if cls == "Linear" and call is not None and call.input_shapes:
        k, n = call.input_shapes[0][-1], call.output_shape[-1]
        return k * n + (0 if attr == "lm_head" else n)
    if cls == "LayerNorm" and call is not None:
        return 2 * call.output_shape[-1]
    if _is_embedding(cls) and call is not None:
        return _embedding_rows(attr, cfg) * call.output_shape[-1]
    if cls == "Conv1D":
        return sum(
            _numel(n.output_shape)
            for n in nodes
            if n.op == "get_attr" and n.name.endswith(("_weight", "_bias"))
        )
    return 0


_FX_KINDS = {
    "add": "add", "sub": "add", "iadd": "add", "rsub": "add",
    "mul": "mul", "truediv": "mul", "div": "mul", "floordiv": "mul", "imul": "mul",
    "gelu": "activation", "tanh": "activation", "pow": "activation", "exp": "activation",
    "relu": "activation", "sigmoid": "activation", "silu": "activation", "rsqrt": "activation",
    "sqrt": "activation", "neg": "activation", "erf": "activation",
    "Tanh": "activation", "GELUActivation": "activation", "NewGELUActivation": "activation",
    "ReLU": "activation", "GELU": "activation",
    "where": "select", "masked_fill": "select", "masked_fill_": "select",
    "contiguous": "copy", "clone": "copy", "cat": "copy",
    "full": "fill", "ones": "fill", "zeros": "fill", "arange": "fill", "ones_like": "fill",
    "zeros_like": "fill", "full_like": "fill", "triu": "fill", "tril": "fill",
    "softmax": "softmax", "log_softmax": "softmax", "layer_norm": "layer_norm",
    "LayerNorm": "layer_norm", "mean": "reduce", "sum": "reduce",
    "dropout": "dropout", "Dropout": "dropout",
}  # fmt: skip
#: fx node targets that launch no kernel (shape bookkeeping, Python scalars, dtype queries).
_FX_HOST_ONLY = _NO_FLOP - {"full", "ones", "zeros", "arange", "Embedding", "embedding"}


def _is_embedding(cls: str) -> bool:
    """``nn.Embedding`` or a subclass named like one (OPT's, BART's learned positions)."""
    return cls.endswith("Embedding")


def _embedding_rows(attr: str, cfg: dict[str, int]) -> int:
    name = attr.lower()
    if "position" in name or name == "wpe":
        return cfg["max_positions"]
    if "token_type" in name:
        return cfg["type_vocab_size"]
    return cfg["vocab_size"]


def node_descriptor(node: _Node, train: bool, cfg: dict[str, int]) -> dict[str, Any] | None:
    """The operator descriptor of one fx node, or ``None`` when it launches no kernel.

    Mapping (to :mod:`scaledl.models.operators` classes): ``Linear`` modules and
    ``addmm``/``mm``/``bmm``/``matmul`` calls are matmuls; ``Embedding`` modules embeddings
    (table rows from the config, as for ``params``); ``LayerNorm``/``softmax``/``mean``
    reductions; ``Dropout`` an element-wise dropout in training and nothing in inference (an
    identity); other floating-point calls element-wise operators of the kind in ``_FX_KINDS``
    (unknown ones as ``mul``). Host-only nodes (``size``, ``view``, ``getitem``, ``to``, Python
    scalars...) launch no kernel: NeuSight times each of them at the CUDA-event floor (about
    7 us) though in the model they overlap the queued kernels.

    Args:
        node: a parsed trace node.
        train: whether the trace is of a training run (dropout active).
        cfg: the model config (:func:`read_model_config`).

    Returns:
        A descriptor dict (:data:`scaledl.models.operators.DESCRIPTOR_COLUMNS`) or ``None``.
    """
    if node.op in ("placeholder", "output", "get_attr") or node.dtype_bytes == 0:
        return None
    out_numel = _numel(node.output_shape)
    if out_numel <= 1:
        return None
    item = node.dtype_bytes
    leaf_path, leaf_cls = node.stack[-1] if node.stack else ("", "")
    name = leaf_cls if node.op == "call_module" else node.fn
    shapes = [s for s in node.input_shapes if _numel(s) > 1]
    in_bytes = sum(_numel(s) for s in shapes) * item
    out_bytes = out_numel * item
    if node.op == "call_module" and leaf_cls == "Linear" and node.input_shapes:
        k, n = node.input_shapes[0][-1], node.output_shape[-1]
        bias = 0 if leaf_path.rsplit(".", 1)[-1] == "lm_head" else n
        rows = _numel(node.input_shapes[0]) // k  # Linear flattens its leading dimensions
        return matmul_descriptor((rows, k), (k, n), item, bias, kind="linear")
    if name in _MATMUL and len(node.input_shapes) >= 2:
        if name in ("addmm", "baddbmm") and len(node.input_shapes) >= 3:
            bias, a, b = node.input_shapes[0], node.input_shapes[1], node.input_shapes[2]
            return matmul_descriptor(tuple(a), tuple(b), item, bias_numel=_numel(bias))
        return matmul_descriptor(tuple(node.input_shapes[0]), tuple(node.input_shapes[1]), item)
    functional = node.op == "call_function" and node.fn == "embedding"
    if functional or (node.op == "call_module" and _is_embedding(leaf_cls)):
        rows = _embedding_rows(leaf_path.rsplit(".", 1)[-1], cfg)
        if functional and len(node.input_shapes) >= 2 and len(node.input_shapes[1]) == 2:
            rows = node.input_shapes[1][0]  # F.embedding(ids, weight): the table's rows
        dim = node.output_shape[-1]
        return descriptor(
            "embedding",
            "embedding",
            elements=out_numel,
            bytes_in=_numel(node.input_shapes[0]) * 8 if node.input_shapes else 0,
            bytes_out=out_bytes,
            table_bytes=rows * dim * item,
            row_len=dim,
        )
    if name in _FX_HOST_ONLY or name in ("to", "type", "getitem"):
        return None
    kind = _FX_KINDS.get(name, "mul")
    if kind == "dropout":
        if not train:
            return None
        in_bytes = out_bytes  # reads x; writes y and the mask (bytes_out counts y)
    op_class = {"softmax": "reduction", "layer_norm": "reduction", "reduce": "reduction"}.get(
        kind, "elementwise"
    )
    row_len = node.input_shapes[0][-1] if op_class == "reduction" and node.input_shapes else 0
    return descriptor(
        op_class,
        kind,
        elements=out_numel,
        bytes_in=in_bytes,
        bytes_out=out_bytes,
        row_len=row_len,
    )


def trace_operators(nodes: list[_Node], cfg: dict[str, int], train: bool) -> pd.DataFrame:
    """The kernel-launching nodes of a trace as operator descriptors with their times.

    Args:
        nodes: output of :func:`read_trace`.
        cfg: output of :func:`read_model_config`.
        train: whether the trace has a backward pass.

    Returns:
        One row per operator, in execution order: ``layer_name`` (its unit,
        :func:`group_units`), ``in_block`` (the unit lies in the traced transformer block),
        ``node_name``, ``row`` (data row of the CSV, from 1), the descriptor columns,
        ``forward_ms`` and ``backward_ms`` (0 for inference).
    """
    row_of = {n.name: i + 1 for i, n in enumerate(nodes)}
    rows = []
    for unit_name, unit in group_units(nodes).items():
        for node in unit["nodes"]:
            desc = node_descriptor(node, train, cfg)
            if desc is None:
                continue
            rows.append(
                {
                    "layer_name": unit_name,
                    "in_block": bool(unit["block"]),
                    "node_name": node.name,
                    "row": row_of[node.name],
                    **desc,
                    "forward_ms": node.fw,
                    "backward_ms": node.bw if train else 0.0,
                }
            )
    return pd.DataFrame(rows)


def group_units(nodes: list[_Node]) -> dict[str, dict[str, Any]]:
    """Group trace nodes into layer units (see the module docstring for the rules).

    Args:
        nodes: output of :func:`read_trace`.

    Returns:
        ``{unit name: {"layer_type", "block", "nodes"}}`` in execution order.
    """
    units: dict[str, dict[str, Any]] = {}
    last_in_block: dict[str, str] = {}
    for node in nodes:
        if node.op in ("placeholder", "output"):
            continue
        found = _unit_of(node.stack)
        if found is not None:
            name, layer_type, block = found
        else:
            block = _block_of(node.stack)
            if block in last_in_block:
                name = last_in_block[block]
            else:
                root = node.stack[0][0] if node.stack else "model"
                name = f"{block or root}.prologue"
                layer_type = "other"
        if name not in units:
            units[name] = {"layer_type": layer_type, "block": block, "nodes": []}
        units[name]["nodes"].append(node)
        last_in_block[block] = name
    return units


def block_repeats(blocks: set[str], num_layers: int, cfg: dict[str, int]) -> dict[str, float]:
    """How many blocks of the full model each traced block stands for.

    Blocks are grouped by their stack (the path without the block index: ``transformer.h``,
    ``encoder.block``, ``model.decoder.layers``). A single stack has ``num_layers`` blocks (the
    label's ``num_layer``); with two, the stack whose path names a ``decoder`` has the config's
    ``decoder_num_layers`` and the other ``num_layers`` (an encoder-decoder model: NeuSight's
    ``num_layer`` counts the encoder's blocks). Each traced block of a stack stands for
    ``blocks of the stack / traced blocks of the stack``.

    Args:
        blocks: the traced blocks' module paths (``model.decoder.layers.0``).
        num_layers: the label's ``num_layer``.
        cfg: :func:`read_model_config` (``decoder_num_layers``).

    Returns:
        Block path -> repeat.

    Raises:
        NeusightFormatError: more than two stacks, or two without a decoder.
    """
    stacks: dict[str, list[str]] = {}
    for block in sorted(blocks):
        stacks.setdefault(_BLOCK_RE.sub("", block), []).append(block)
    if len(stacks) > 2 or (len(stacks) == 2 and not any("decoder" in p for p in stacks)):
        raise NeusightFormatError(
            f"traced blocks {sorted(blocks)}: expected one stack of blocks, or an encoder and a "
            "decoder stack"
        )
    out = {}
    for prefix, members in stacks.items():
        decoder = len(stacks) == 2 and "decoder" in prefix
        total = cfg["decoder_num_layers"] if decoder else num_layers
        out.update({b: total / len(members) for b in members})
    return out


def trace_layers(
    nodes: list[_Node], cfg: dict[str, int], num_layers: int, train: bool
) -> pd.DataFrame:
    """Aggregate trace nodes into layer units (see the module docstring for the rules).

    Args:
        nodes: output of :func:`read_trace`.
        cfg: output of :func:`read_model_config`.
        num_layers: transformer blocks of the full model (``num_layer`` of the label).
        train: whether the trace has a backward pass (backward FLOPs are 0 otherwise).

    Returns:
        One row per unit in execution order (columns of :attr:`NeusightData.layers` without
        ``workload_id``).
    """
    units = group_units(nodes)
    by_name = {n.name: n for n in nodes}
    repeats = block_repeats({u["block"] for u in units.values() if u["block"]}, num_layers, cfg)
    rows = []
    for index, (name, unit) in enumerate(units.items()):
        members: list[_Node] = unit["nodes"]
        kernels = [n for n in members if node_descriptor(n, train, cfg) is not None]
        fwd = bwd = 0.0
        for node in members:
            flops, mult = _node_flops(node)
            fwd += flops
            bwd += flops * mult if train else 0.0
        leaves: dict[str, tuple[str, list[_Node]]] = {}
        for node in members:
            if node.stack and _param_leaf(node.stack[-1][1]):
                path, cls = node.stack[-1]
                leaves.setdefault(path, (cls, []))[1].append(node)
        params = sum(_module_params(p, c, ns, cfg) for p, (c, ns) in leaves.items())
        inside = {n.name for n in members}
        producers = {i for n in members for i in n.inputs if i not in inside}
        in_bytes = sum(
            _numel(by_name[i].output_shape) * by_name[i].dtype_bytes
            for i in producers
            if i in by_name and by_name[i].op != "get_attr"
        )
        out_bytes = sum(
            _numel(n.output_shape) * n.dtype_bytes
            for n in members
            if any(u not in inside for u in n.users)
        )
        rows.append(
            {
                "layer_index": index,
                "layer_name": name,
                "layer_type": unit["layer_type"],
                "block_repeat": repeats[unit["block"]] if unit["block"] else 1.0,
                "forward_ms": sum(n.fw for n in members),
                "backward_ms": sum(n.bw for n in members) if train else 0.0,
                "forward_kernel_ms": sum(n.fw for n in kernels),
                "backward_kernel_ms": sum(n.bw for n in kernels) if train else 0.0,
                "fwd_flops": fwd,
                "bwd_flops": bwd,
                "params": int(params),
                "input_bytes": int(in_bytes),
                "output_bytes": int(out_bytes),
                "num_nodes": len(members),
            }
        )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- loader
def _consistency(
    wid: str, csv: Path, mode: str, unit_rows: pd.DataFrame, label: dict[str, float]
) -> dict[str, Any]:
    """One row of :attr:`NeusightData.consistency`: the trace's kernel sums vs the label."""
    fw = float((unit_rows["forward_kernel_ms"] * unit_rows["block_repeat"]).sum())
    bw = float((unit_rows["backward_kernel_ms"] * unit_rows["block_repeat"]).sum())
    return {
        "workload_id": wid,
        "file": str(csv),
        "mode": mode,
        "trace_forward_ms": fw,
        "trace_backward_ms": bw,
        "forward_ratio": fw / label["fw_latency"] if label["fw_latency"] else math.nan,
        "backward_ratio": bw / label["bwall_latency"] if label["bwall_latency"] else math.nan,
        "total_ratio": (fw + bw) / label["e2e_latency"],
    }


def _parallel_row(path: Path, m: re.Match, label: dict[str, float]) -> dict[str, Any]:
    """One row of :attr:`NeusightData.parallel`: a multi-GPU label (not a workload)."""
    return {
        "gpu": path.parent.name,
        "model": m["model"],
        "mode": _MODES[m["mode"]],
        "seq_len": int(m["seq_len"]),
        "global_batch_size": int(m["batch"]),
        "strategy": m["strategy"],
        "degree": int(m["degree"]),
        "microbatches": int(m["micro"] or 1),
        "iteration_ms": label["e2e_latency"],
        "file": str(path),
    }


def _model_config(root: Path, model: str, label_path: Path) -> dict[str, int]:
    """``model_configs/<model>.json`` of a label (:func:`read_model_config`)."""
    cfg_path = root / "model_configs" / f"{model}.json"
    if not cfg_path.exists():
        raise NeusightFormatError(f"{label_path}: no model config {cfg_path}")
    return read_model_config(cfg_path)


def _traced_workload(
    path: Path, m: re.Match, label: dict[str, float], cfg: dict[str, int], dev: pd.Series
) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """A single-GPU label with its trace: workload, layer, operator and consistency rows.

    Raises:
        NeusightFormatError: the label's ``num_layer`` disagrees with the model config.
    """
    gpu, model, mode = path.parent.name, m["model"], _MODES[m["mode"]]
    seq_len, batch = int(m["seq_len"]), int(m["batch"])
    num_layers = int(label["num_layer"])
    if num_layers != cfg["num_layers"]:
        raise NeusightFormatError(
            f"{path}: key 'num_layer' = {num_layers} but {model}.json has {cfg['num_layers']}"
        )
    wid = workload_id(gpu, model, mode, seq_len, batch)
    csv = path.with_suffix(".csv")
    nodes = read_trace(csv)
    unit_rows = trace_layers(nodes, cfg, num_layers, train=mode == "train")
    unit_rows.insert(0, "workload_id", wid)
    op_rows = trace_operators(nodes, cfg, train=mode == "train")
    op_rows.insert(0, "workload_id", wid)
    op_rows.insert(1, "file", str(csv))
    workload = {
        "workload_id": wid,
        "gpu": gpu,
        "model": model,
        "family": model,
        "mode": mode,
        "seq_len": seq_len,
        "batch_size": batch,
        "hidden_size": cfg["hidden_size"],
        "num_layers": num_layers,
        "num_heads": cfg["num_heads"],
        "intermediate_size": cfg["intermediate_size"],
        "vocab_size": cfg["vocab_size"],
        **{col: float(dev[col]) for col in _DEVICE_KEYS.values()},
        "iteration_ms": label["e2e_latency"],
        "forward_ms_total": label["fw_latency"],
        "backward_ms_total": label["bwall_latency"],
        "trace_file": str(csv),
    }
    return workload, unit_rows, op_rows, _consistency(wid, csv, mode, unit_rows, label)


def load_neusight(root: Path | str | None = None) -> NeusightData:
    """Import the NeuSight labels and traces.

    Single-GPU ``train``/``inf`` entries having both a CSV trace and a JSON label become workloads
    and layer rows; ``-dp4/-tp4/-pp4_1`` labels go to :attr:`NeusightData.parallel`; ``-fusion``
    labels (fused-kernel inference) and single-GPU labels without their trace are not imported,
    each listed with its reason in :attr:`NeusightData.skipped`.

    Args:
        root: the NeuSight data folder (with ``label/``, ``model_configs/``, ``device_configs/``;
            default :func:`scaledl.layout.neusight_root`).

    Returns:
        The :class:`NeusightData` tables.

    Raises:
        FileNotFoundError: ``root/label`` does not exist.
        NeusightFormatError: a malformed file (named in the message), an unknown GPU or model,
            or a label whose ``num_layer`` disagrees with the model config.
    """
    root = Path(root) if root is not None else neusight_root()
    label_dir = root / "label"
    if not label_dir.is_dir():
        raise FileNotFoundError(f"no label folder under {root}")
    devices = read_device_configs(root)
    device_by_gpu = devices.set_index("gpu")
    configs: dict[str, dict[str, int]] = {}
    workloads, layers, consistency, parallel, operators, skipped = [], [], [], [], [], []
    for path in sorted(label_dir.glob("*/*.json")):
        gpu = path.parent.name
        m = _NAME_RE.match(path.stem)
        if m is None:
            raise NeusightFormatError(f"{path}: file name does not match <model>-<mode>-<seq>-<b>")
        if gpu not in device_by_gpu.index:
            raise NeusightFormatError(f"{path}: no device_configs/{gpu}.json")
        if m["suffix"] == "fusion":
            skipped.append({"file": str(path), "reason": _FUSION})
            continue
        label = _read_label(path)
        if m["strategy"]:
            parallel.append(_parallel_row(path, m, label))
            continue
        if not path.with_suffix(".csv").exists():
            skipped.append({"file": str(path), "reason": "no trace (its .csv is missing)"})
            continue
        if m["model"] not in configs:
            configs[m["model"]] = _model_config(root, m["model"], path)
        workload, unit_rows, op_rows, check = _traced_workload(
            path, m, label, configs[m["model"]], device_by_gpu.loc[gpu]
        )
        workloads.append(workload)
        layers.append(unit_rows)
        operators.append(op_rows)
        consistency.append(check)
    if not workloads:
        raise NeusightFormatError(f"{label_dir}: no <model>-<mode>-<seq>-<batch> CSV/JSON pair")
    return NeusightData(
        workloads=pd.DataFrame(workloads),
        layers=pd.concat(layers, ignore_index=True),
        consistency=pd.DataFrame(consistency),
        devices=devices,
        parallel=pd.DataFrame(parallel),
        operators=pd.concat(operators, ignore_index=True),
        skipped=pd.DataFrame(skipped, columns=["file", "reason"]),
    )
