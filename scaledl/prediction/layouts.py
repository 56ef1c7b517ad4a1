"""Layout workloads from a predictor: its device's layout calibration, else the current recipe.

A tensor-parallel, pipeline or sharded workload (and, in a planner's layout search, every
candidate; on a GPU predictor also data parallelism of several GPUs) is composed by
:mod:`scaledl.parallel`. Which layer-wise models, collectives and
correction compose it is the **recipe**, chosen per device:

* ``calibrated:<candidate>@<version>``: the layout calibration saved beside the predictor for
  the workload's device (:mod:`scaledl.registry.layouts`, fitted by ``scaledl fit-layouts`` on
  that host's layout profiles, :mod:`scaledl.parallel.calibration`);
* ``current``: without one, the registered predictor's own layer-wise and all-reduce models,
  every collective hidden behind compute (:func:`scaledl.parallel.predict.predict_layouts`);
* ``megatron:<system>``: on a kernel-aware GPU predictor, Megatron-LM's composition with the
  NCCL all-reduces Vidur measured on the GPU's node (:mod:`scaledl.prediction.gpu_layouts`).

Every answer names its recipe (:data:`RECIPE_PREDICTOR` for the rows the predictor's own
method answers), and :func:`recipe_lines` says it in words, so the fallback is never silent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from scaledl.models.guard import Extrapolation
from scaledl.parallel.predict import layout_reasons, predict_layouts
from scaledl.prediction.gpu_layouts import predict_gpu_layout_workloads
from scaledl.prediction.layout_answer import LayoutAnswer
from scaledl.workloads.spec import Workload

#: The recipe of the rows the predictor's own method answers (plain data parallel).
RECIPE_PREDICTOR = "predictor"
#: The recipe without a layout calibration.
RECIPE_CURRENT = "current"


def predict_layout_workloads(
    predictor, workloads: Sequence[Workload], arch_keys: Sequence[str]
) -> LayoutAnswer:
    """Compose every workload with its device's recipe (module docstring).

    Args:
        predictor: the loaded :class:`~scaledl.Predictor`; a kernel-aware GPU
            predictor composes by Megatron-LM's recipe
            (:func:`scaledl.prediction.gpu_layouts.predict_gpu_layout_workloads`).
        workloads: the workloads (any layout, plain DDP included).
        arch_keys: their architecture keys.

    Returns:
        The :class:`LayoutAnswer`.

    Raises:
        scaledl.registry.bundle.BundleError: a layout calibration of a device does not verify.
        scaledl.workloads.fields.WorkloadError: a GPU layout the Megatron-LM recipe refuses
            (sharding, several nodes, a GPU without measured collectives).
    """
    if predictor.predicts_any_device:  # a GPU predictor: Megatron-LM's composition
        return predict_gpu_layout_workloads(predictor, workloads, arch_keys)
    n = len(workloads)
    iteration_ms = np.empty(n)
    generic: list[tuple[str, ...]] = [()] * n
    recipes = [RECIPE_CURRENT] * n
    reasons: list[list[Extrapolation]] = [[] for _ in range(n)]
    by_device: dict[str, list[int]] = {}
    for i, w in enumerate(workloads):
        by_device.setdefault(w.device_name, []).append(i)
    for device, rows in by_device.items():
        ws, keys = [workloads[i] for i in rows], [arch_keys[i] for i in rows]
        calibration = predictor.layout_calibration(device)
        if calibration is None:
            composed = predict_layouts(predictor.method, ws, arch_keys=keys)
            times, label, fitted = composed.iteration_ms, RECIPE_CURRENT, None
        else:
            composed, times = calibration.predict(ws, keys)
            label, fitted = calibration.label, calibration.fitted_on(ws)
        iteration_ms[rows] = times
        why_each = layout_reasons(ws, label, fitted)
        for i, types, why in zip(rows, composed.generic_types, why_each, strict=True):
            generic[i], recipes[i], reasons[i] = types, label, why
    return LayoutAnswer(iteration_ms, generic, recipes, reasons)


def recipe_lines(counts: Mapping[str, int], what: str = "row(s)") -> list[str]:
    """What composed the layout rows of a prediction, in words (nothing without layout rows).

    Args:
        counts: rows per recipe (the ``recipe`` column's value counts).
        what: what the rows are, in the text (``row(s)``, ``candidate(s)``).

    Returns:
        One line per layout recipe used.
    """
    lines = []
    for recipe, n in sorted(counts.items()):
        if recipe == RECIPE_PREDICTOR:
            continue
        if recipe == RECIPE_CURRENT:
            lines.append(
                f"layout recipe: current for {n} {what} (the predictor's layer-wise models, "
                "collectives hidden; no layout calibration for their device beside this "
                "predictor): not fit to rank layouts, nor to compare with one-device rows, "
                "since its ranking of measured layouts held out was near chance "
                "(docs/history/layout-variants.md); `scaledl fit-layouts --profiles DIR` fits "
                "a calibration "
                "(e.g. on datasets/layouts-cpu/validated)"
            )
        elif recipe.startswith("megatron:"):
            lines.append(
                f"layout recipe: {recipe} for {n} {what} (Megatron-LM's split of the GPU "
                "predictor's layers, NCCL all-reduces measured by Vidur on that node, a training "
                "row's gradient all-reduce and Adam step included; scaledl/parallel/megatron.py)"
            )
        else:
            lines.append(
                f"layout recipe: {recipe} for {n} {what} (the layout calibration of their "
                "device, fitted on its layout profiles)"
            )
    return lines
