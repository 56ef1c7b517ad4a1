"""Layout workloads of a GPU predictor: Megatron-LM's composition, collectives measured by Vidur.

A kernel-aware GPU predictor (``predictor_kind: kernel``) answers a tensor-, pipeline- or
data-parallel workload of a GPU by :mod:`scaledl.parallel.megatron`: one rank's layers on
Megatron-LM's split predicted by the GPU predictor, NCCL all-reduces fitted on Vidur's
measurements of the GPU's DGX system (:class:`~scaledl.parallel.measured_collectives.
MeasuredCollectives`), Megatron's FP32 Adam step, composed by :mod:`scaledl.parallel.compose`.
Its recipe is ``megatron:<system>`` (e.g. ``megatron:h100_dgx``). The iteration includes the
optimizer step, as Megatron's train step does; the predictor's plain data-parallel answers
(recipe ``predictor``) time forward and backward only, as NeuSight's single-GPU labels do, so
the ``recipe`` column says which of the two a row is. A planner's layout search composes every
candidate, plain data parallel included, with this recipe, so its candidates compare alike.

Refused, with an error naming the field and value (never a silent other answer):

* ``sharding`` other than ``none``: ZeRO / FSDP are not composed for GPUs (Megatron-LM's
  distributed optimizer is not modelled, and no GPU measurement of it is held);
* ``num_nodes`` above 1: Vidur measured the all-reduces within one DGX node;
* a GPU without measured collectives (:data:`~scaledl.parallel.megatron.VIDUR_SYSTEM`: the
  H100 SXM and the A100 SXM4 of DGX nodes); the error names the GPUs that have them.

Flagged by the domain guard (``in_domain`` False): every tensor-, pipeline- or sharded layout
(field ``layout``: no interval stratum covers layouts; the accuracy measured on NeuSight's 4-GPU
rows is in the README), and a world size above the largest group Vidur measured (field
``world_size``: the all-reduce of the nearest measured group is used).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from scaledl.parallel.compose import LayoutInputs, compose, stack_inputs
from scaledl.parallel.measured_collectives import MeasuredCollectives, fit_system_allreduce
from scaledl.parallel.megatron import VIDUR_SYSTEM, megatron_inputs, rank_layers
from scaledl.parallel.shard import base_workload
from scaledl.prediction.layouts import LayoutAnswer
from scaledl.registry.guard import Extrapolation
from scaledl.workloads.parallelism import is_data_parallel, layout_label
from scaledl.workloads.spec import Workload, WorkloadError

#: The recipe's name; a prediction's ``recipe`` is ``megatron:<system>``.
RECIPE_MEGATRON = "megatron"


def gpu_system(w: Workload, source: str = "") -> str:
    """The Vidur system whose collectives compose a GPU layout workload (module docstring).

    Args:
        w: the workload.
        source: where it came from, named in the error.

    Returns:
        The system (e.g. ``h100_dgx``).

    Raises:
        scaledl.workloads.spec.WorkloadError: ``sharding`` is not ``none``, ``num_nodes`` is
            above 1, or the GPU has no measured collectives (naming the field and value).
    """
    where = f"{source}: " if source else ""
    if w.sharding != "none":
        raise WorkloadError(
            f"{where}field 'sharding' (value {w.sharding!r}): a GPU predictor composes "
            "Megatron-LM's tensor, pipeline and data parallelism, not ZeRO / FSDP sharding; "
            "use sharding=none"
        )
    if w.num_nodes > 1:
        raise WorkloadError(
            f"{where}field 'num_nodes' (value {w.num_nodes}): a GPU layout is composed within "
            "one node (Vidur measured the all-reduces of one DGX node)"
        )
    gpu = w.device_name.split(":", 1)[-1]
    if gpu not in VIDUR_SYSTEM:
        raise WorkloadError(
            f"{where}field 'device_name' (value {w.device_name!r}): no measured collectives for "
            f"this GPU's node; layouts are composed on {sorted(VIDUR_SYSTEM)}"
        )
    return VIDUR_SYSTEM[gpu]


@lru_cache(maxsize=8)
def system_collectives(root: str, system: str) -> MeasuredCollectives:
    """The collective model of one Vidur system, fitted once per process.

    Args:
        root: Vidur's ``network`` folder (:func:`scaledl.layout.vidur_network_root`).
        system: the system (:func:`gpu_system`).

    Returns:
        The fitted :class:`~scaledl.parallel.measured_collectives.MeasuredCollectives`.

    Raises:
        FileNotFoundError: ``root`` holds no Vidur all-reduce file.
        ValueError: a malformed file, or no row of ``system`` (naming what is present).
    """
    from scaledl.external.vidur import load_vidur_allreduce

    vidur = load_vidur_allreduce(Path(root))
    return MeasuredCollectives(fit_system_allreduce(vidur, system), system)


def _largest_group(cm: MeasuredCollectives) -> int:
    """The largest one-node group of the system's measured all-reduces."""
    return max(world for (world, nodes), _ in cm.allreduce.params_ if nodes == 1)


def megatron_reasons(w: Workload, recipe: str, largest_group: int) -> list[Extrapolation]:
    """The domain guard's reasons for one workload composed by ``recipe`` (module docstring)."""
    reasons = []
    if not is_data_parallel(w):
        reasons.append(Extrapolation(
            "layout", layout_label(w),
            f"composed by the {recipe} recipe (Megatron-LM's split of the GPU predictor's "
            "layers, Vidur's measured NCCL all-reduces), no interval stratum covers layouts",
            None,
        ))  # fmt: skip
    if w.world_size > largest_group:
        reasons.append(Extrapolation(
            "world_size", w.world_size,
            f"above the largest group of the measured all-reduces ({largest_group} GPUs): "
            "the nearest group's times are used",
            None,
        ))  # fmt: skip
    return reasons


def predict_gpu_layout_workloads(
    predictor, workloads: Sequence[Workload], arch_keys: Sequence[str]
) -> LayoutAnswer:
    """Compose every workload by Megatron-LM's recipe (module docstring).

    One rank's layers are predicted once per (model, micro-batch, tensor-parallel size):
    candidates that differ only in data-parallel size, stages or schedule share them; the
    candidates of one structure (architecture, GPU node, mode, ``tp``, ``pp``, micro-batches,
    schedule) are composed in one call, one column each
    (:func:`~scaledl.parallel.compose.stack_inputs`).

    Args:
        predictor: the loaded kernel-aware :class:`~scaledl.registry.Predictor`.
        workloads: the workloads (any layout without sharding, plain data parallel included).
        arch_keys: their architecture keys (candidates of one architecture and layout
            structure are composed together, one column each).

    Returns:
        The :class:`~scaledl.prediction.layouts.LayoutAnswer` (``recipes``:
        ``megatron:<system>``).

    Raises:
        scaledl.workloads.spec.WorkloadError: a workload :func:`gpu_system` refuses.
        FileNotFoundError: Vidur's measurements are not found
            (:func:`scaledl.layout.vidur_network_root`; set ``$SCALEDL_EXTERNAL_DIR``).
    """
    from scaledl.layout import vidur_network_root

    n = len(workloads)
    systems = [gpu_system(w, f"{predictor.path}: workload {i + 1}")
               for i, w in enumerate(workloads)]  # fmt: skip
    root = str(vidur_network_root())
    generic: list[tuple[str, ...]] = [()] * n
    recipes = [f"{RECIPE_MEGATRON}:{s}" for s in systems]
    reasons: list[list[Extrapolation]] = []
    memo: dict[tuple, object] = {}
    structures: dict[tuple, list[tuple[int, LayoutInputs]]] = {}
    for i, (w, system) in enumerate(zip(workloads, systems, strict=True)):
        cm = system_collectives(root, system)
        base = base_workload(w, w.batch_size // w.micro_batches)
        key = (tuple(sorted(base.__dict__.items())), w.tp_size)
        if key not in memo:
            memo[key] = rank_layers(predictor.method, w)
        layers = memo[key]
        inputs, _ = megatron_inputs(layers, w, cm)
        structure = (arch_keys[i], system, w.mode, w.tp_size, w.pp_size, w.micro_batches,
                     w.pipeline_schedule)  # fmt: skip
        structures.setdefault(structure, []).append((i, inputs))
        used = layers["used_generic"].to_numpy(dtype=bool)
        generic[i] = tuple(sorted(set(layers.loc[used, "layer_type"].astype(str))))
        reasons.append(megatron_reasons(w, recipes[i], _largest_group(cm)))
    iteration_ms = np.empty(n)
    for (_, system, *_), members in structures.items():
        rows = [i for i, _ in members]
        composed = compose(stack_inputs([x for _, x in members]), system_collectives(root, system))
        iteration_ms[rows] = np.broadcast_to(composed.iteration_ms, (len(rows),))
    return LayoutAnswer(iteration_ms, generic, recipes, reasons)
