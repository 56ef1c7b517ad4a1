"""How many parameter tensors one rank's optimizer step updates, per pipeline stage.

``torch.optim.AdamW`` on a CPU steps tensor by tensor: its for-each kernels are used only when
every parameter lives on a device with for-each support (``torch.optim.optimizer.
_default_to_fused_or_foreach``; CPU is not one), so ``_single_tensor_adamw`` runs its
element-wise operations once per parameter tensor. On the small models of a CPU layout profile
that per-tensor cost, not the parameter count, sets the step: on the profile of 2026-12-03
15:22 UTC (``datasets/layouts-cpu/history/1522``) a pipeline stage's step (half the tensors)
took 2.9-3.2 ms and the full model's under DDP 4.7-5.7 ms, while the Llama stage with 48% more
parameters than the BERT stage stepped no slower. The layer-wise optimizer model, whose
operator feature was 0, could only read parameters; its gradient-boosted correction then
predicted the full model's DDP step from the largest stage it had seen (2.7-2.9 ms against
4.5-5.8 ms measured with DDP held out).

The layout path (:mod:`scaledl.parallel.training` for its samples, :mod:`scaledl.parallel.
predict` for its predictions) therefore gives the optimizer node the tensors the rank steps as
its operator count (``fwd_ops``): the work model's per-operator term
(:class:`~scaledl.models.layerwise.LayerTimeRegressor`) is then a cost per stepped tensor.
Which tensors a rank steps: its stage's (tensor parallelism shards a tensor, it does not remove
one); ZeRO-1 (``ZeroRedundancyOptimizer``) partitions the tensors over the ``dp`` ranks, so
``1/dp`` of them; FSDP / ZeRO-2 step a local shard of every tensor, so all of them. The plain
data-parallel predictor's graphs are not changed.
"""

from __future__ import annotations

import numpy as np

from scaledl.parallel.shard import block_ordinal, stage_of_layers
from scaledl.workloads.identity import architecture_key
from scaledl.workloads.spec import Workload

#: ``(architecture key, pp_size) -> parameter tensors per stage`` (:func:`stage_tensors`).
_CACHE: dict[tuple[str, int], np.ndarray] = {}


def stepped_tensors(w: Workload, arch_key: str | None = None) -> np.ndarray:
    """The parameter tensors one rank of each stage steps (module docstring).

    Args:
        w: the workload (any layout, plain DDP included).
        arch_key: ``architecture_key(w)``, when the caller knows it.

    Returns:
        Counts per stage, shape (``pp_size``,), float (``1/dp`` of the stage's under ZeRO-1);
        zeros for inference (no step).

    Raises:
        ValueError: ``pp_size`` does not divide the blocks
            (:func:`~scaledl.parallel.shard.stage_of_layers`).
        scaledl.workloads.builders.WorkloadError: the model cannot be built.
    """
    if w.mode != "train":
        return np.zeros(w.pp_size)
    share = 1.0 / w.dp_size if w.sharding == "zero1" else 1.0
    return stage_tensors(w, arch_key) * share


def stage_tensors(w: Workload, arch_key: str | None = None) -> np.ndarray:
    """Every parameter tensor of each pipeline stage's layers, shape (``pp_size``,).

    Counted once per architecture and stage count (cached): a planner composes thousands of
    layouts of one model.

    Args:
        w: the workload.
        arch_key: ``architecture_key(w)``, when the caller knows it.

    Returns:
        Counts per stage, shape (``pp_size``,), float (a copy: the cache is not exposed).

    Raises:
        ValueError: ``pp_size`` does not divide the blocks.
        scaledl.workloads.builders.WorkloadError: the model cannot be built.
    """
    key = (arch_key or architecture_key(w), w.pp_size)
    if key not in _CACHE:
        from scaledl.models.features import architecture_graphs

        layers = architecture_graphs(w)[0].layers
        counts = _per_layer(w, tuple(layers["layer_name"].astype(str)))
        stage = stage_of_layers(block_ordinal(layers["block"]), w.pp_size)
        _CACHE[key] = np.array([counts[stage == s].sum() for s in range(w.pp_size)])
    return _CACHE[key].copy()


def _per_layer(w: Workload, names: tuple[str, ...]) -> np.ndarray:
    """Parameter tensors of each layer's module, counted on the model built on the meta device.

    The rule of the tracer's parameter assignment (``scaledl.graph.tracing._assign_params``),
    simplified to module names: it records parameter counts, not tensors, and its traces are
    cached on disk by schema, so the count is taken here until that schema next changes.
    Each parameter is counted once, at the first layer that holds it (a head tied to the
    embedding steps one tensor); a repeated call (``name#k``) and a layer without a module of
    its name hold none. Parameters of no layer module (rare: a bare ``nn.Parameter`` on the
    model) are counted on the first layer, so the total is the model's.
    """
    from scaledl.workloads.builders import build_model

    model = build_model(w, device="meta")
    modules = dict(model.named_modules())
    counts = np.zeros(len(names))
    seen: set[int] = set()
    for i, name in enumerate(names):
        if "#" in name or name not in modules:
            continue
        own = [p for p in modules[name].parameters() if id(p) not in seen]
        seen.update(id(p) for p in own)
        counts[i] = len(own)
    if len(names):
        counts[0] += sum(1 for p in model.parameters() if id(p) not in seen)
    return counts
