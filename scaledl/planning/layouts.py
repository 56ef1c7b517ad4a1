"""The planner's layout candidates: dp x tp x pp x micro-batches x schedule x sharding.

:func:`layout_grid` expands each (world size, nodes, batch) candidate of
:func:`~scaledl.planning.planner.candidate_grid` into every layout of :class:`LayoutSpace` that
the workload validation accepts (:func:`scaledl.workloads.parallelism.check_layout`: ``tp_size``
dividing the heads and feed-forward width, ``pp_size`` the blocks, ``micro_batches`` the batch
and needing a pipeline, sharding needing ``dp_size >= 2`` and training), with ``dp_size =
world_size / (tp_size * pp_size)``. A schedule only matters in a pipeline, so a layout
without one keeps the default schedule (no duplicate candidates); a pipeline of fewer
micro-batches than stages is planned with GPipe only, since PyTorch's ``Schedule1F1B``
refuses ``micro_batches < pp_size`` (``torch.distributed.pipelining``, torch 2.13), and the
plan names layouts this host's profiler can run.

:func:`predict_layout_candidates` predicts them with the layout composition and the recipe of
their device (:func:`scaledl.prediction.layouts.predict_layout_workloads`: on a CPU host the
layout calibration beside the predictor, else the ``current`` recipe; on a GPU predictor
Megatron-LM's recipe ``megatron:<system>``, :mod:`scaledl.prediction.gpu_layouts`; plain DDP
candidates included, so every candidate of a layout search comes from the same model) and
:func:`layout_memory` gives each one's memory per rank
(:func:`~scaledl.planning.memory.estimate_layout_memory`, the most loaded stage; on a GPU
predictor on Megatron's split, :func:`~scaledl.parallel.megatron.megatron_rank_parameters`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace

import numpy as np
import pandas as pd

from scaledl.models.features import architecture_graphs
from scaledl.parallel.megatron import megatron_rank_parameters, tied_word_embeddings
from scaledl.parallel.shard import rank_parameters
from scaledl.planning.memory import MemoryEstimate, estimate_layout_memory
from scaledl.prediction.layouts import predict_layout_workloads
from scaledl.registry.guard import check_domain
from scaledl.workloads.parallelism import (
    LAYOUT_DEFAULTS,
    LAYOUT_FIELDS,
    PIPELINE_SCHEDULES,
    SHARDINGS,
    check_layout,
    layout_label,
)
from scaledl.workloads.spec import Workload

#: Columns a layout search adds to the plan's table, after ``num_nodes``.
LAYOUT_COLUMNS = ("layout", *LAYOUT_FIELDS, "layout_recipe")


@dataclass(frozen=True)
class LayoutSpace:
    """The layouts a plan searches (each with every world size and batch of the plan).

    Attributes:
        tp_sizes: tensor-parallel sizes.
        pp_sizes: pipeline stages.
        micro_batches: micro-batches per iteration (> 1 only with a pipeline).
        schedules: pipeline schedules.
        shardings: data-parallel shardings.
    """

    tp_sizes: tuple[int, ...] = (1, 2, 4, 8)
    pp_sizes: tuple[int, ...] = (1, 2, 4)
    micro_batches: tuple[int, ...] = (1, 2, 4, 8)
    schedules: tuple[str, ...] = PIPELINE_SCHEDULES
    shardings: tuple[str, ...] = SHARDINGS

    def __post_init__(self) -> None:
        for name in ("tp_sizes", "pp_sizes", "micro_batches"):
            values = getattr(self, name)
            if not values or any(not isinstance(v, (int, np.integer)) or v < 1 for v in values):
                raise ValueError(f"layouts: field {name!r} (value {values!r}): positive integers")
        for name, allowed in (("schedules", PIPELINE_SCHEDULES), ("shardings", SHARDINGS)):
            values = getattr(self, name)
            bad = [s for s in values if s not in allowed]
            if bad or not values:
                raise ValueError(
                    f"layouts: field {name!r} (value {bad or 'empty'}): each one of {allowed}"
                )


def _refusal(spec: Workload, world: int, batch: int, layout: dict, memo: dict) -> str | None:
    """Why the workload validation refuses the layout, or ``None`` (it accepts it).

    Memoised: the rules read only the layout, the batch and whether ``dp_size >= 2``.
    """
    model_ranks = layout["tp_size"] * layout["pp_size"]
    if world % model_ranks:
        return (f"world_size={world} is not divisible by tp_size * pp_size = "
                f"{layout['tp_size']} * {layout['pp_size']}")  # fmt: skip
    dp = world // model_ranks
    key = (*layout.values(), batch, min(dp, 2))
    if key not in memo:
        view = SimpleNamespace(**{**spec.__dict__, **layout, "batch_size": batch, "dp_size": dp})
        try:
            check_layout(view)
            memo[key] = None
        except ValueError as exc:
            memo[key] = str(exc)
    return memo[key]


def _layouts(space: LayoutSpace) -> list[dict]:
    """The layouts of ``space`` worth a candidate (module docstring: schedules)."""
    layouts = []
    for tp, pp, m, sched, shard in itertools.product(space.tp_sizes, space.pp_sizes,
            space.micro_batches, space.schedules, space.shardings):  # fmt: skip
        if pp == 1 and sched != LAYOUT_DEFAULTS["pipeline_schedule"]:
            continue
        if pp > 1 and m < pp and sched != "gpipe":  # Schedule1F1B needs m >= pp
            continue
        layouts.append({"tp_size": int(tp), "pp_size": int(pp), "micro_batches": int(m),
                        "pipeline_schedule": sched, "sharding": shard})  # fmt: skip
    return layouts


def layout_refusals(grid: pd.DataFrame, space: LayoutSpace, spec: Workload) -> list[str]:
    """Why the layouts of ``space`` are refused, most frequent first (when none is valid).

    Returns:
        Distinct reasons (the workload validation's messages, naming field and value).
    """
    memo: dict[tuple, str | None] = {}
    reasons = [
        _refusal(spec, int(ws), int(b), lay, memo)
        for ws, b in grid[["world_size", "batch_size"]].itertuples(index=False)
        for lay in _layouts(space)
    ]
    return pd.Series([r for r in reasons if r], dtype=object).value_counts().index.tolist()


def layout_grid(grid: pd.DataFrame, space: LayoutSpace, spec: Workload) -> pd.DataFrame:
    """Every valid layout of every (world size, nodes, batch) candidate (module docstring).

    Args:
        grid: ``world_size``, ``num_nodes``, ``batch_size`` rows.
        space: the layouts searched.
        spec: the model (its architecture and mode decide what is valid).

    Returns:
        ``grid``'s columns and ``dp_size``, ``tp_size``, ``pp_size``, ``micro_batches``,
        ``pipeline_schedule``, ``sharding``; possibly empty.
    """
    layouts = _layouts(space)
    memo: dict[tuple, str | None] = {}
    rows = [
        (ws, n, b, ws // (lay["tp_size"] * lay["pp_size"]), *lay.values())
        for ws, n, b in grid[["world_size", "num_nodes", "batch_size"]].itertuples(index=False)
        for lay in layouts
        if _refusal(spec, int(ws), int(b), lay, memo) is None
    ]
    columns = ["world_size", "num_nodes", "batch_size", "dp_size", *layouts[0]] if layouts else []
    return pd.DataFrame(rows, columns=columns)


def layout_specs(spec: Workload, grid: pd.DataFrame) -> list[Workload]:
    """One workload per row of :func:`layout_grid` (copies of ``spec``, fields already checked)."""
    fields = ["world_size", "num_nodes", "batch_size", *LAYOUT_FIELDS]
    return [spec.model_copy(update=dict(zip(fields, row, strict=True)))
            for row in grid[fields].itertuples(index=False)]  # fmt: skip


def layout_memory(specs: list[Workload], megatron: bool = False) -> list[MemoryEstimate]:
    """Memory per rank of each candidate (the most loaded pipeline stage).

    Args:
        specs: the candidates (one architecture).
        megatron: the parameters a rank holds are Megatron-LM's
            (:func:`~scaledl.parallel.megatron.megatron_rank_parameters`: embeddings and
            output layer split too, the last stage's copy of the word embedding), as a GPU
            predictor composes them; else PyTorch's tensor parallelism's
            (:func:`~scaledl.parallel.shard.rank_parameters`).

    Returns:
        One estimate per candidate.
    """
    layers = architecture_graphs(specs[0])[0].layers if specs else None
    if megatron and specs:
        tied = tied_word_embeddings(specs[0])
        split = partial(megatron_rank_parameters, tied=tied)
    else:
        split = rank_parameters
    params: dict[tuple[int, int], tuple[list[float], float]] = {}
    memo: dict[tuple, MemoryEstimate] = {}
    out = []
    for w in specs:
        shape = (w.tp_size, w.pp_size)
        if shape not in params:
            params[shape] = split(layers, *shape)
        key = (w.batch_size, w.dp_size, w.world_size, *shape, w.micro_batches,
               w.pipeline_schedule, w.sharding)  # fmt: skip
        if key not in memo:
            memo[key] = estimate_layout_memory(w, *params[shape])
        out.append(memo[key])
    return out


@dataclass(frozen=True)
class LayoutCandidates:
    """Predictions of layout candidates, as :class:`~scaledl.prediction.predict.SpecPredictions`.

    Attributes:
        workloads: the candidates.
        iteration_s: shape (n,).
        used_generic: whether a layer type was predicted by the generic layer model, (n,).
        reasons: the domain guard's reasons (the layout's among them).
        recipes: the recipe that composed each (:mod:`scaledl.prediction.layouts`).
    """

    workloads: list[Workload]
    iteration_s: np.ndarray
    used_generic: np.ndarray
    reasons: list
    recipes: list[str]


def predict_layout_candidates(predictor, specs: list[Workload], arch: str) -> LayoutCandidates:
    """Iteration time and domain reasons of layout candidates of one architecture.

    Args:
        predictor: the loaded :class:`~scaledl.registry.Predictor`.
        specs: the candidates.
        arch: their architecture key.

    Returns:
        The :class:`LayoutCandidates`.

    Raises:
        scaledl.registry.bundle.BundleError: the device's layout calibration does not verify.
    """
    keys = [arch] * len(specs)
    pred = predict_layout_workloads(predictor, specs, keys)
    generic = [(str(i), t) for i, types in enumerate(pred.generic_types) for t in types]
    nodes = pd.DataFrame(generic, columns=["workload_id", "layer_type"]).assign(used_generic=True)
    ids = [str(i) for i in range(len(specs))]
    reasons = check_domain(specs, predictor.domain, nodes, ids=ids, arch_keys=keys)
    reasons = [r + extra for r, extra in zip(reasons, pred.reasons, strict=True)]
    used = np.array([bool(t) for t in pred.generic_types], dtype=bool)
    return LayoutCandidates(specs, pred.iteration_ms / 1000.0, used, reasons, pred.recipes)


def layout_labels(specs: list[Workload]) -> list[str]:
    """:func:`~scaledl.workloads.parallelism.layout_label` of each candidate."""
    return [layout_label(w) for w in specs]
