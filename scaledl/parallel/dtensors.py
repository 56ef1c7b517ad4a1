"""The optimizer step's cost of DTensor parameters: how many a rank steps, what each costs.

PyTorch's parallel APIs turn parameters into DTensors: FSDP2 (``fully_shard``, the ``zero2`` and
``fsdp`` layouts) every parameter of the model, sharded over the data-parallel mesh; tensor
parallelism (``parallelize_module`` with the Megatron plan,
:func:`scaledl.profiling.layout_models.tensor_parallel_plan`) the weights and biases of the
planned linears. AdamW then runs every one of its element-wise operations on each such
parameter through DTensor's dispatch (sharding propagation, local-tensor unwrapping), a cost
per parameter *tensor* that the plain step of the same elements does not pay. On a CPU,
``torch.optim`` steps tensor by tensor (its for-each kernels are for CUDA-like devices only), so
the cost grows with the number of DTensor parameters, not with their size. Measured on the
committed layout profile (``datasets/layouts-cpu/validated``, 2-core CPU VM, 2026-12-03): the
layer-wise optimizer model, fitted on plain-tensor steps, predicted 3.3 ms for the FSDP / ZeRO-2
steps that took 8.0 / 8.5 ms, and 4.1 ms for tensor-parallel steps that took 7.4 ms, while the
plain data-parallel and pipeline steps were within 10% (5.1 vs 5.4 ms, 3.4 vs 3.1 ms).

So the composition adds ``dtensor_step_ms`` per DTensor parameter tensor a rank steps
(:func:`dtensor_parameter_tensors`), one constant fitted on the training layouts' measured
optimizer steps (:func:`fit_dtensor_step_ms`): a host's figure, like the collectives'.
"""

from __future__ import annotations

import numpy as np

from scaledl.parallel.shard import block_ordinal, stage_of_layers
from scaledl.workloads.identity import architecture_key
from scaledl.workloads.spec import Workload

#: Shardings under which FSDP2 makes every parameter a DTensor.
FULLY_SHARDED = ("zero2", "fsdp")
#: ``(architecture key, layer names) -> (every, planned)`` (:func:`_tensors_per_layer`).
_COUNTS: dict[tuple[str, tuple[str, ...]], tuple[np.ndarray, np.ndarray]] = {}


def dtensor_parameter_tensors(w: Workload) -> np.ndarray:
    """The DTensor parameter tensors one rank of each pipeline stage steps (module docstring).

    Args:
        w: the layout workload.

    Returns:
        Counts per stage, shape (``pp_size``,), float: every parameter tensor of the stage's
        layers under ``zero2`` / ``fsdp``, else those of the tensor-parallel plan's linears
        when ``tp_size > 1``, else 0; 0 for inference (no step).

    Raises:
        ValueError: ``pp_size`` does not divide the blocks
            (:func:`~scaledl.parallel.shard.stage_of_layers`).
        scaledl.workloads.builders.WorkloadError: the model cannot be built.
    """
    if w.mode != "train" or (w.tp_size == 1 and w.sharding not in FULLY_SHARDED):
        return np.zeros(w.pp_size)
    from scaledl.models.features import architecture_graphs

    layers = architecture_graphs(w)[0].layers
    stage = stage_of_layers(block_ordinal(layers["block"]), w.pp_size)
    names = tuple(layers["layer_name"].astype(str))
    key = (architecture_key(w), names)
    if key not in _COUNTS:
        _COUNTS[key] = _tensors_per_layer(w, names)
    every, planned = _COUNTS[key]
    per_layer = every if w.sharding in FULLY_SHARDED else planned
    return np.array([per_layer[stage == s].sum() for s in range(w.pp_size)], dtype=float)


def _tensors_per_layer(w: Workload, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Per layer: its module's parameter tensors, and those the tensor-parallel plan shards.

    Counted on the model built on the meta device (no memory), each parameter once, at the
    first layer that holds it (a tied head weight is the embedding's: one DTensor, stepped
    once). A repeated call (``name#k``) holds no parameters of its own; a layer without a
    module of its name (a functional layer of the graph) holds none either.
    """
    from scaledl.profiling.layout_models import MODEL_PARALLEL_FAMILIES, tensor_parallel_plan
    from scaledl.workloads.builders import build_model

    model = build_model(w, device="meta")
    plan = tensor_parallel_plan(model, w.family) if w.family in MODEL_PARALLEL_FAMILIES else {}
    modules = dict(model.named_modules())
    every, planned = np.zeros(len(names)), np.zeros(len(names))
    seen: set[int] = set()
    for i, name in enumerate(names):
        if "#" in name or name not in modules:
            continue
        own = [p for p in modules[name].parameters() if id(p) not in seen]
        seen.update(id(p) for p in own)
        every[i] = len(own)
        planned[i] = sum(
            sum(1 for _ in modules[p].parameters())
            for p in plan
            if p == name or p.startswith(f"{name}.")
        )
    return every, planned


def fit_dtensor_step_ms(excess_ms: np.ndarray, tensors: np.ndarray) -> float:
    """The optimizer's cost per DTensor parameter tensor, ms (module docstring).

    Least squares through the origin of the measured steps' excess over the plain-tensor
    prediction on their DTensor counts, ``sum(n e) / sum(n^2)``, at least 0 (a parameter never
    makes a step faster).

    Args:
        excess_ms: measured minus predicted optimizer step per sample, ms, shape (k,).
        tensors: DTensor parameter tensors of each sample's rank, shape (k,).

    Returns:
        ms per DTensor parameter tensor; 0 without a sample that steps DTensors.

    Raises:
        ValueError: the shapes differ, or a value is not finite.
    """
    e, n = np.asarray(excess_ms, dtype=float), np.asarray(tensors, dtype=float)
    if e.shape != n.shape:
        raise ValueError(f"DTensor step fit: {e.shape} excesses for {n.shape} counts")
    if not (np.isfinite(e).all() and np.isfinite(n).all()):
        raise ValueError("DTensor step fit: a non-finite excess or count")
    denominator = float(np.sum(n * n))
    return max(float(np.sum(n * e)) / denominator, 0.0) if denominator > 0 else 0.0
