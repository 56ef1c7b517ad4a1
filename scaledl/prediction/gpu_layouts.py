"""Layout workloads of a GPU predictor: Megatron-LM's composition, collectives measured by Vidur.

A kernel-aware GPU predictor (``predictor_kind: kernel``) answers a tensor-, pipeline- or
data-parallel workload of several GPUs by :mod:`scaledl.parallel.megatron`: one rank's layers
on Megatron-LM's split predicted by the GPU predictor, NCCL all-reduces fitted on Vidur's
measurements of the GPU's DGX node (:class:`~scaledl.parallel.measured_collectives.
MeasuredCollectives`), Megatron's Adam step (FP32 states), composed by
:mod:`scaledl.parallel.compose`. Its recipe is ``megatron:<system>`` (e.g.
``megatron:h100_dgx``). A composed iteration includes the gradient all-reduce and the optimizer
step, as Megatron's train step does; one GPU is answered by the predictor itself (recipe
``predictor``: forward and backward, as NeuSight's single-GPU labels time them), so the
``recipe`` column says which of the two a row is, and a plan composes every candidate, one
GPU included (a data-parallel plan when the recipe composes all its candidates), so that its
candidates compare alike.

What the recipe does not compose (:func:`megatron_refusal`): ``sharding`` other than ``none``
(Megatron-LM's distributed optimizer is not modelled and no GPU measurement of ZeRO / FSDP is
held); ``num_nodes`` above 1 or more GPUs than one node holds (Vidur measured one DGX node of
:data:`~scaledl.parallel.megatron.GPUS_PER_NODE`); a GPU without measured collectives
(:data:`~scaledl.parallel.megatron.VIDUR_SYSTEM`: the H100 SXM and the A100 SXM4 of DGX
nodes). A tensor-, pipeline- or sharded layout it does not compose is an error naming the row,
the field and the value (:func:`gpu_system`, checked when the row is parsed); a plain
data-parallel workload of several GPUs it does not compose keeps the predictor's single-GPU
iteration and is flagged (:func:`uncomposed_reason`: the all-reduce and step are not added);
a planner's layout search leaves such candidates out and counts them in its notes. In
inference such a workload is not flagged: its replicas run apart, with nothing to add.

Flagged by the domain guard (``in_domain`` False): every tensor- or pipeline-parallel layout
(field ``layout``: no interval stratum covers layouts; the accuracy measured on NeuSight's
4-GPU rows is in the README), and a data- or tensor-parallel group of a size Vidur did not
measure (2, 4 and 8 GPUs; field ``dp_size`` / ``tp_size``: the nearest measured group's fit;
``dp_size`` only in training, where its gradient all-reduce runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from scaledl.external.vidur import load_vidur_allreduce
from scaledl.layout import vidur_network_root
from scaledl.models.guard import Extrapolation
from scaledl.parallel.compose import LayoutInputs, compose, stack_inputs
from scaledl.parallel.measured_collectives import MeasuredCollectives, fit_system_allreduce
from scaledl.parallel.megatron import GPUS_PER_NODE, VIDUR_SYSTEM, megatron_inputs, rank_layers
from scaledl.parallel.shard import base_workload
from scaledl.prediction.layout_answer import LayoutAnswer
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.parallelism import is_data_parallel, layout_label
from scaledl.workloads.spec import Workload

#: The recipe's name; a prediction's ``recipe`` is ``megatron:<system>``.
RECIPE_MEGATRON = "megatron"


def megatron_refusal(w: Workload) -> str | None:
    """Why Megatron-LM's recipe does not compose a GPU workload, or ``None`` (it does).

    Args:
        w: the workload.

    Returns:
        ``None``, or ``field 'name' (value v): why`` for the first field refused: ``sharding``
        other than ``none``, ``num_nodes`` above 1, ``world_size`` above one node's
        :data:`~scaledl.parallel.megatron.GPUS_PER_NODE`, a ``device_name`` without measured
        collectives.
    """
    if w.sharding != "none":
        return (f"field 'sharding' (value {w.sharding!r}): a GPU predictor composes Megatron-LM's "
                "tensor, pipeline and data parallelism, not ZeRO / FSDP sharding; use "
                "sharding=none")  # fmt: skip
    if w.num_nodes > 1:
        return (f"field 'num_nodes' (value {w.num_nodes}): a GPU layout is composed within one "
                "node (Vidur measured the all-reduces of one DGX node)")  # fmt: skip
    if w.world_size > GPUS_PER_NODE:
        return (f"field 'world_size' (value {w.world_size}): more GPUs than one DGX node holds "
                f"({GPUS_PER_NODE}); a GPU layout is composed within one node")  # fmt: skip
    if w.device_name.split(":", 1)[-1] not in VIDUR_SYSTEM:
        return (f"field 'device_name' (value {w.device_name!r}): no measured collectives for "
                f"this GPU's node; layouts are composed on {sorted(VIDUR_SYSTEM)}")  # fmt: skip
    return None


def gpu_system(w: Workload, where: str = "") -> str:
    """The Vidur system whose collectives compose a GPU workload (module docstring).

    Args:
        w: the workload.
        where: the row it came from (``file: row n``), named in the error.

    Returns:
        The system (e.g. ``h100_dgx``).

    Raises:
        scaledl.workloads.fields.WorkloadError: :func:`megatron_refusal` refuses it (naming the
            row, the field and the value).
    """
    why = megatron_refusal(w)
    if why is not None:
        raise WorkloadError(f"{where}: {why}" if where else why)
    return VIDUR_SYSTEM[w.device_name.split(":", 1)[-1]]


def composed_by_megatron(w: Workload) -> bool:
    """Whether a GPU predictor answers ``w`` by Megatron-LM's recipe (module docstring).

    Every tensor-, pipeline- or sharded layout is (those it cannot compose are errors); a
    plain data-parallel workload of several GPUs is when the recipe composes it (its gradient
    all-reduce and optimizer step included), else the predictor's own single-GPU iteration
    answers it, flagged (:func:`uncomposed_reason`); one GPU is always the predictor's own.
    """
    if not is_data_parallel(w):
        return True
    return w.world_size > 1 and megatron_refusal(w) is None


def uncomposed_reason(w: Workload) -> list[Extrapolation]:
    """The flag of a data-parallel GPU workload of several GPUs the recipe does not compose.

    None in inference: its replicas run apart (no gradient all-reduce, no optimizer step), so
    the single-GPU iteration is the answer.
    """
    if w.world_size == 1 or w.mode != "train" or composed_by_megatron(w):
        return []
    return [Extrapolation(
        "world_size", w.world_size,
        "the GPU predictor's single-GPU iteration: the gradient all-reduce and the optimizer "
        f"step are not added ({megatron_refusal(w)})",
        None,
    )]  # fmt: skip


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
    vidur = load_vidur_allreduce(Path(root))
    return MeasuredCollectives(fit_system_allreduce(vidur, system), system)


def _measured_groups(cm: MeasuredCollectives) -> list[int]:
    """The one-node group sizes of the system's measured all-reduces."""
    return sorted({world for (world, nodes), _ in cm.allreduce.params_ if nodes == 1})


def megatron_reasons(w: Workload, recipe: str, measured_groups: list[int]) -> list[Extrapolation]:
    """The domain guard's reasons for one workload composed by ``recipe`` (module docstring)."""
    reasons = []
    if not is_data_parallel(w):
        reasons.append(Extrapolation(
            "layout", layout_label(w),
            f"composed by the {recipe} recipe (Megatron-LM's split of the GPU predictor's "
            "layers, Vidur's measured NCCL all-reduces), no interval stratum covers layouts",
            None,
        ))  # fmt: skip
    fields = ("dp_size", "tp_size") if w.mode == "train" else ("tp_size",)  # no dp all-reduce
    for field in fields:
        size = getattr(w, field)
        if size > 1 and size not in measured_groups:
            reasons.append(Extrapolation(
                field, size,
                f"no all-reduce over {size} GPUs was measured (Vidur: {measured_groups} GPUs): "
                "the nearest measured group's fit is used",
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
        predictor: the loaded kernel-aware :class:`~scaledl.Predictor`.
        workloads: the workloads (any layout without sharding, plain data parallel included).
        arch_keys: their architecture keys (candidates of one architecture and layout
            structure are composed together, one column each).

    Returns:
        The :class:`~scaledl.prediction.layout_answer.LayoutAnswer` (``recipes``:
        ``megatron:<system>``).

    Raises:
        scaledl.workloads.fields.WorkloadError: a workload :func:`gpu_system` refuses.
        FileNotFoundError: Vidur's measurements are not found
            (:func:`scaledl.layout.vidur_network_root`; set ``$SCALEDL_EXTERNAL_DIR``).
    """
    n = len(workloads)
    systems = [gpu_system(w) for w in workloads]
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
        reasons.append(megatron_reasons(w, recipes[i], _measured_groups(cm)))
    iteration_ms = np.empty(n)
    for (_, system, *_), members in structures.items():
        rows = [i for i, _ in members]
        composed = compose(stack_inputs([x for _, x in members]), system_collectives(root, system))
        iteration_ms[rows] = np.broadcast_to(composed.iteration_ms, (len(rows),))
    return LayoutAnswer(iteration_ms, generic, recipes, reasons)
