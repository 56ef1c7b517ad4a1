"""Find a model's layer units by structure and give each a layer type.

A *layer unit* is the module ScaleDL times and predicts as one node of the layer graph: an
embedding, an attention block, a feed-forward block, a norm, a head... Units are found by a
depth-first walk of the module tree that stops at the first module whose class name or attribute
name matches a layer-type pattern, so no attribute path is hard-coded (``ViTModel.encoder.layer``
was renamed ``layers`` in transformers 5; T5's ``shared`` embedding is called through
``encoder.embed_tokens``). A module reached twice (tied or shared) is one unit; each *call* of a
unit becomes its own graph node, in execution order.

Patterns are tried in the order of :data:`LAYER_TYPE_PATTERNS`; a leaf module with parameters that
matches none becomes ``"other"``. Parameter-free leaves (dropout, activations) are not units: their
time is inside their parent unit or, at the top level, negligible.

A name only proposes a type; what the module computes decides the embedding types. A module
named like an embedding is an ``embedding`` (a table lookup) only if it holds an ``nn.Embedding``
or a raw parameter table; one holding a convolution is a ``patch-embed``; one whose parameters
all belong to ``nn.Linear`` (and norm) modules is a ``projection``, a matrix product on hidden
states (ALBERT's ``embedding_hidden_mapping_in``, ELECTRA's ``embeddings_project``): its time
follows its FLOPs, not a table's size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

# (layer_type, regex over "<attribute name> <class name>"), first match wins.
LAYER_TYPE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("patch-embed", re.compile(r"patch.?embed", re.I)),
    ("rotary-embedding", re.compile(r"rotary", re.I)),
    ("embedding", re.compile(r"embed", re.I)),
    ("norm", re.compile(r"norm", re.I)),
    ("cross-attention", re.compile(r"cross.?att|encdecatt|encoder_attn", re.I)),
    ("attention", re.compile(r"att(n|ention)", re.I)),
    (
        "feed-forward",
        re.compile(
            r"mlp|feed.?forward|ffn|layerff|densereludense|intermediate|\bfc\d\b"
            r"|\boutput\b \w*Output$",
            re.I,
        ),
    ),
    ("pooler", re.compile(r"pool", re.I)),
    ("head", re.compile(r"head|classifier|predictions|lm_head|\bcls\b", re.I)),
)

#: Every layer type a graph node can have (vocabulary of the one-hot node feature).
LAYER_TYPES: tuple[str, ...] = (
    "embedding",
    "patch-embed",
    "rotary-embedding",
    "attention",
    "cross-attention",
    "feed-forward",
    "norm",
    "pooler",
    "head",
    "other",
    "allreduce",
    "optimizer",
    "projection",
)


@dataclass(frozen=True)
class LayerUnit:
    """A module timed as one layer.

    Attributes:
        name: qualified module name (first registration when shared).
        layer_type: one of :data:`LAYER_TYPES`.
        module: the module itself.
        params: number of parameters owned by the unit.
        block: qualified name of the repeated block (transformer layer) it lives in, or ``""``.
    """

    name: str
    layer_type: str
    module: torch.nn.Module
    params: int
    block: str


def classify(attr_name: str, module: torch.nn.Module) -> str | None:
    """The layer type of a module, or ``None`` to descend into its children.

    Args:
        attr_name: the module's attribute name in its parent (last part of its qualified name).
        module: the module.

    Returns:
        A layer type, ``"other"`` for an unmatched leaf with parameters, or ``None``.
    """
    text = f"{attr_name} {type(module).__name__}"
    for layer_type, pattern in LAYER_TYPE_PATTERNS:
        if pattern.search(text):
            if layer_type == "embedding" and _has_conv(module):
                return "patch-embed"
            if layer_type == "embedding" and _is_projection(module):
                return "projection"
            return layer_type
    has_children = any(True for _ in module.children())
    if not has_children:
        if isinstance(module, torch.nn.Linear):
            return "head"
        if any(True for _ in module.parameters(recurse=False)):
            return "other"
    return None


def find_units(model: torch.nn.Module) -> list[LayerUnit]:
    """The layer units of a model, in registration order.

    Args:
        model: any ``torch.nn.Module`` (real or on the meta device).

    Returns:
        Units that do not overlap; together they own every parameter of the model.

    Raises:
        ValueError: the model has no unit (nothing to time).
    """
    blocks = _block_names(model)
    units: list[LayerUnit] = []
    seen: set[int] = set()

    def visit(name: str, module: torch.nn.Module) -> None:
        if id(module) in seen:
            return
        seen.add(id(module))
        layer_type = classify(name.rsplit(".", 1)[-1], module) if name else None
        if layer_type is not None:
            block = next((b for b in blocks if name.startswith(b + ".")), "")
            params = sum(p.numel() for p in module.parameters())
            units.append(LayerUnit(name, layer_type, module, params, block))
            seen.update(id(m) for m in module.modules())
            return
        for child_name, child in module.named_children():
            visit(f"{name}.{child_name}" if name else child_name, child)

    visit("", model)
    if not units:
        raise ValueError(f"no layer unit found in {type(model).__name__}")
    return units


def _has_conv(module: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in module.modules())


def _is_projection(module: torch.nn.Module) -> bool:
    """Whether a module computes only linear maps of its input (and norms): no table lookup.

    True when it holds an ``nn.Linear``, no ``nn.Embedding``/``nn.EmbeddingBag`` and every
    parameter belongs to an ``nn.Linear`` or a norm module (class name containing ``Norm``).
    """
    modules = list(module.modules())
    if not any(isinstance(m, torch.nn.Linear) for m in modules):
        return False
    if any(isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) for m in modules):
        return False
    for m in modules:
        if any(True for _ in m.parameters(recurse=False)) and not (
            isinstance(m, torch.nn.Linear) or "Norm" in type(m).__name__
        ):
            return False
    return True


def _block_names(model: torch.nn.Module) -> list[str]:
    """Qualified names of repeated blocks: children of a ``ModuleList`` of same-class modules."""
    names = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > 0:
            classes = {type(m) for m in module}
            if len(classes) == 1:
                names.extend(f"{name}.{i}" for i in range(len(module)))
    # Longest first, so a nested list (T5 block.layer) does not shadow its block.
    return sorted(names, key=len)
