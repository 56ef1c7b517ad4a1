"""How many parameter tensors one rank's optimizer step updates, per pipeline stage.

``torch.optim.AdamW`` on a CPU steps tensor by tensor: its for-each kernels are used only when
every parameter lives on a device with for-each support (``torch.optim.optimizer.
_default_to_fused_or_foreach``; CPU is not one), so ``_single_tensor_adamw`` runs its
element-wise operations once per parameter tensor. On the small models of a CPU layout profile
that per-tensor cost, not the parameter count, sets the step (a pipeline stage with 48% more
parameters stepped no slower; the layer-wise optimizer model, whose operator feature was 0,
could only read parameters: ``docs/history/2026-12-code-notes.md``).

The layout path (:mod:`scaledl.parallel.training` for its samples, :mod:`scaledl.parallel.
predict` for its predictions) therefore gives the optimizer node the tensors the rank steps as
its operator count (``fwd_ops``): the work model's per-operator term
(:class:`~scaledl.models.layerwise.LayerTimeRegressor`) is then a cost per stepped tensor.
Which tensors a rank steps: its stage's (tensor parallelism shards a tensor, it does not remove
one); FSDP / ZeRO-2 step a local shard of every tensor, so all of them; ZeRO-1
(``ZeroRedundancyOptimizer``) partitions whole tensors over the ``dp`` ranks, balanced by
*elements*, not by count (``_partition_parameters``, torch 2.13: the tensors sorted by
``numel`` descending, each to the rank with the fewest elements so far, the first such rank on
a tie), and every rank waits for the slowest one's broadcast, so the count is the largest
rank's (:func:`zero1_largest_share`). A BERT of width 128 and 2 blocks has 42 tensors: the
two ranks of ZeRO-1 step 6 (the word and position embeddings and four 128 x 128 weights, half
the elements) and 36, not 21 each, and its ZeRO-1 iteration is measurably slower than DDP's.
The plain data-parallel predictor's graphs are not changed.
"""

from __future__ import annotations

import numpy as np

from scaledl.parallel.shard import block_ordinal, stage_of_layers
from scaledl.workloads.identity import architecture_key
from scaledl.workloads.spec import Workload

#: ``(architecture key, pp_size) -> element counts of each stage's parameter tensors``
#: (:func:`stage_tensor_sizes`).
_CACHE: dict[tuple[str, int], list[list[int]]] = {}
#: ``(architecture key, pp_size, dp_size) -> ZeRO-1's largest share per stage``.
_ZERO1: dict[tuple[str, int, int], np.ndarray] = {}


def stepped_tensors(w: Workload, arch_key: str | None = None) -> np.ndarray:
    """The parameter tensors one rank of each stage steps (module docstring).

    Args:
        w: the workload (any layout, plain DDP included).
        arch_key: ``architecture_key(w)``, when the caller knows it.

    Returns:
        Counts per stage, shape (``pp_size``,), float (under ZeRO-1 the largest rank's share
        of the stage's, :func:`zero1_largest_share`); zeros for inference (no step).

    Raises:
        ValueError: ``pp_size`` does not divide the blocks
            (:func:`~scaledl.parallel.shard.stage_of_layers`).
        scaledl.workloads.builders.WorkloadError: the model cannot be built.
    """
    if w.mode != "train":
        return np.zeros(w.pp_size)
    if w.sharding != "zero1":
        return stage_tensors(w, arch_key)
    key = (arch_key or architecture_key(w), w.pp_size, w.dp_size)
    if key not in _ZERO1:
        shares = [zero1_largest_share(sizes, w.dp_size) for sizes in stage_tensor_sizes(w, key[0])]
        _ZERO1[key] = np.array(shares, dtype=float)
    return _ZERO1[key].copy()


def zero1_largest_share(numels: list[int], ranks: int) -> int:
    """The most tensors one rank steps under ``ZeroRedundancyOptimizer``'s partition.

    The rule of ``ZeroRedundancyOptimizer._partition_parameters`` (torch 2.13, one parameter
    group): tensors sorted by element count, largest first (a stable sort), each assigned to
    the rank holding the fewest elements so far (the lowest rank on a tie).

    Args:
        numels: element count of each parameter tensor, in the model's parameter order.
        ranks: data-parallel ranks (>= 1).

    Returns:
        The largest number of tensors any rank receives (0 without tensors).

    Raises:
        ValueError: ``ranks`` below 1.
    """
    if ranks < 1:
        raise ValueError(f"field 'dp_size' value {ranks!r}: need >= 1")
    sizes, counts = [0] * ranks, [0] * ranks
    for n in sorted(numels, reverse=True):
        rank = sizes.index(min(sizes))
        sizes[rank] += n
        counts[rank] += 1
    return max(counts)


def stage_tensors(w: Workload, arch_key: str | None = None) -> np.ndarray:
    """Every parameter tensor of each pipeline stage's layers, shape (``pp_size``,).

    The lengths of :func:`stage_tensor_sizes` (same arguments, cache and errors), as floats.
    """
    return np.array([len(sizes) for sizes in stage_tensor_sizes(w, arch_key)], dtype=float)


def stage_tensor_sizes(w: Workload, arch_key: str | None = None) -> list[list[int]]:
    """The element count of every parameter tensor of each pipeline stage, in model order.

    Counted once per architecture and stage count (cached): a planner composes thousands of
    layouts of one model.

    Args:
        w: the workload.
        arch_key: ``architecture_key(w)``, when the caller knows it.

    Returns:
        One list per stage (``pp_size`` lists, copies: the cache is not exposed).

    Raises:
        ValueError: ``pp_size`` does not divide the blocks.
        scaledl.workloads.builders.WorkloadError: the model cannot be built.
    """
    key = (arch_key or architecture_key(w), w.pp_size)
    if key not in _CACHE:
        # graph.features loads torch (model builders); only tracing a model needs it.
        from scaledl.graph.features import architecture_graphs

        layers = architecture_graphs(w)[0].layers
        held = _per_layer(w, tuple(layers["layer_name"].astype(str)))
        stage = stage_of_layers(block_ordinal(layers["block"]), w.pp_size)
        per_stage = []
        for s in range(w.pp_size):
            tensors: dict[int, int] = {}  # a tensor held by several of the stage's layers: once
            for i in np.flatnonzero(stage == s):
                tensors.update(held[i])
            per_stage.append(list(tensors.values()))
        _CACHE[key] = per_stage
    return [list(sizes) for sizes in _CACHE[key]]


def _per_layer(w: Workload, names: tuple[str, ...]) -> list[dict[int, int]]:
    """The parameter tensors each layer's module holds, ``{id: element count}``, on the meta device.

    The rule of the tracer's parameter assignment (``scaledl.graph.tracing._assign_params``),
    simplified to module names: it records parameter counts, not tensors, and its traces are
    cached on disk by schema, so the count is taken here until that schema next changes. A
    repeated call (``name#k``) and a layer without a module of its name hold none. A tensor
    shared by two layers (a head tied to the embedding) is held by both: one stage steps it
    once, and a pipeline whose first and last stages hold it steps it on each (as
    ``torch.distributed.pipelining`` stages do, each with its own copy). Parameters of no
    layer module (rare: a bare ``nn.Parameter`` on the model) are held by the first layer, so
    one stage's count is the model's.
    """
    # builders loads torch and transformers' model classes; only building a model needs them.
    from scaledl.workloads.builders import build_model

    model = build_model(w, device="meta")
    modules = dict(model.named_modules())
    held: list[dict[int, int]] = [{} for _ in names]
    for i, name in enumerate(names):
        if "#" in name or name not in modules:
            continue
        held[i] = {id(p): p.numel() for p in modules[name].parameters()}
    if len(names):
        seen = {t for layer in held for t in layer}
        held[0].update({id(p): p.numel() for p in model.parameters() if id(p) not in seen})
    return held
