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

The search is bounded before anything is built: :func:`layout_count` counts the layouts of a
space arithmetically, and the planner refuses a search of more than
:data:`MAX_LAYOUT_COMBINATIONS` combinations (world sizes x nodes x batches x layouts) or of
more than :data:`MAX_LAYOUT_CANDIDATES` valid ones, which :func:`search_layouts` counts without
keeping them. A search with nothing valid says why: every refused combination is counted by
the rule that refused it (:meth:`LayoutSearch.why_none`).

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
import re
from collections import Counter
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace

import numpy as np
import pandas as pd

from scaledl.graph.features import architecture_graphs
from scaledl.models.guard import check_domain
from scaledl.parallel.megatron import megatron_rank_parameters, tied_word_embeddings
from scaledl.parallel.shard import rank_parameters
from scaledl.planning.memory import MemoryEstimate, estimate_layout_memory
from scaledl.prediction.layouts import predict_layout_workloads
from scaledl.workloads.parallelism import (
    LAYOUT_DEFAULTS,
    LAYOUT_FIELDS,
    PIPELINE_SCHEDULES,
    SHARDING_ALIASES,
    SHARDINGS,
    check_layout,
    layout_label,
    normalise_sharding,
)
from scaledl.workloads.spec import Workload

#: Columns a layout search adds to the plan's table, after ``num_nodes``.
LAYOUT_COLUMNS = ("layout", *LAYOUT_FIELDS, "layout_recipe")
#: Most combinations (world sizes x nodes x batches x :func:`layout_count`) one layout search
#: examines: 2 to 4 s of validation at the 230,000 to 500,000 a second measured on a 2-core
#: host (1-64 and 1-512 world sizes x 4 batches x 448 layouts).
MAX_LAYOUT_COMBINATIONS = 1_000_000
#: Most valid layout candidates one plan predicts: about 19 s warm at the layout benchmark's
#: rate (11,808 candidates in 2.2 s, ``benchmarks/bench_plan_layouts.py``).
MAX_LAYOUT_CANDIDATES = 100_000
#: Why a 1F1B pipeline of fewer micro-batches than stages is no candidate (module docstring).
_SHORT_1F1B = (
    "pipeline_schedule='1f1b' needs micro_batches >= pp_size (torch's Schedule1F1B); "
    "micro_batches={m}, pp_size={pp}: use gpipe or more micro-batches"
)


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
        """Check the values; take a sharding's alias as the workload does; drop repeats.

        Raises:
            ValueError: an empty field or a bad value (naming the field and the value).
        """
        for name in ("tp_sizes", "pp_sizes", "micro_batches"):
            values = tuple(getattr(self, name))
            bad = [v for v in values if isinstance(v, (bool, np.bool_))
                   or not isinstance(v, (int, np.integer)) or v < 1]  # fmt: skip
            if not values or bad:
                raise ValueError(f"layouts: field {name!r} (value {values!r}): positive integers")
            object.__setattr__(self, name, tuple(dict.fromkeys(int(v) for v in values)))
        object.__setattr__(self, "shardings", tuple(normalise_sharding(s) for s in self.shardings))
        for name, allowed in (("schedules", PIPELINE_SCHEDULES), ("shardings", SHARDINGS)):
            values = tuple(getattr(self, name))
            bad = [s for s in values if not isinstance(s, str) or s not in allowed]
            if bad or not values:
                aliases = f" (aliases {SHARDING_ALIASES})" if name == "shardings" else ""
                raise ValueError(f"layouts: field {name!r} (value {bad or 'empty'}): each one "
                                 f"of {allowed}{aliases}")  # fmt: skip
            object.__setattr__(self, name, tuple(dict.fromkeys(values)))


def layout_count(space: LayoutSpace) -> int:
    """How many layouts :func:`_layouts` yields for ``space``, counted without building them.

    A layout without a pipeline keeps the default schedule only; each pipeline takes every
    schedule (a 1F1B one of fewer micro-batches than stages counted too, as refused).
    """
    flat = int(1 in space.pp_sizes) * int(LAYOUT_DEFAULTS["pipeline_schedule"] in space.schedules)
    pipes = sum(1 for pp in space.pp_sizes if pp > 1) * len(space.schedules)
    return len(space.tp_sizes) * len(space.shardings) * len(space.micro_batches) * (flat + pipes)


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


def _layouts(space: LayoutSpace) -> list[tuple[dict, str | None]]:
    """The layouts of ``space`` worth a candidate, each with why it is refused or ``None``.

    Refused here: a 1F1B pipeline of fewer micro-batches than stages (module docstring); the
    workload validation's rules are :func:`_refusal`'s.
    """
    layouts = []
    for tp, pp, m, sched, shard in itertools.product(space.tp_sizes, space.pp_sizes,
            space.micro_batches, space.schedules, space.shardings):  # fmt: skip
        if pp == 1 and sched != LAYOUT_DEFAULTS["pipeline_schedule"]:
            continue
        why = _SHORT_1F1B.format(m=m, pp=pp) if pp > 1 and m < pp and sched != "gpipe" else None
        layouts.append(({"tp_size": int(tp), "pp_size": int(pp), "micro_batches": int(m),
                         "pipeline_schedule": sched, "sharding": shard}, why))  # fmt: skip
    return layouts


def _rule(reason: str) -> str:
    """The rule a refusal's message states: its numbers and quoted values left out."""
    return re.sub(r"'[^']*'", "'.'", re.sub(r"\d+", "N", reason))


@dataclass(frozen=True)
class LayoutSearch:
    """What :func:`search_layouts` found.

    Attributes:
        candidates: the valid candidates, :func:`layout_grid`'s columns (empty when there are
            more than the search's ``max_candidates``: then only counted).
        combinations: combinations examined (grid rows x layouts of the space).
        valid: how many are valid.
        refused: per rule, ``(count, an example message)``, most frequent first.
    """

    candidates: pd.DataFrame
    combinations: int
    valid: int
    refused: dict[str, tuple[int, str]]

    def why_none(self, shown: int = 5) -> str:
        """Why the combinations are refused: counts per rule, each with an example.

        Args:
            shown: rules listed (the most frequent); the rest are counted.

        Returns:
            e.g. ``"12 as world_size=3 is not divisible by ...; 4 as micro_batches=2 ..."``.
        """
        parts = [f"{n:,} as {example}" for n, example in list(self.refused.values())[:shown]]
        rest = len(self.refused) - shown
        return "; ".join(parts) + (f"; and {rest} more rule(s)" if rest > 0 else "")


def search_layouts(
    grid: pd.DataFrame,
    space: LayoutSpace,
    spec: Workload,
    max_candidates: int = MAX_LAYOUT_CANDIDATES,
) -> LayoutSearch:
    """Every valid layout of every (world size, nodes, batch) candidate (module docstring).

    Args:
        grid: ``world_size``, ``num_nodes``, ``batch_size`` rows.
        space: the layouts searched.
        spec: the model (its architecture and mode decide what is valid).
        max_candidates: most valid candidates kept; past it they are only counted (the caller
            refuses the search, naming the count).

    Returns:
        The :class:`LayoutSearch`; its candidates have ``grid``'s columns and ``dp_size``,
        ``tp_size``, ``pp_size``, ``micro_batches``, ``pipeline_schedule``, ``sharding``.
    """
    layouts = _layouts(space)
    memo: dict[tuple, str | None] = {}
    refused: Counter = Counter()  # by refusal message, grouped by rule below
    rows, valid = [], 0
    for ws, n, b in grid[["world_size", "num_nodes", "batch_size"]].itertuples(index=False):
        for lay, why in layouts:
            why = why or _refusal(spec, int(ws), int(b), lay, memo)
            if why is not None:
                refused[why] += 1
                continue
            valid += 1
            if valid <= max_candidates:
                rows.append((ws, n, b, ws // (lay["tp_size"] * lay["pp_size"]), *lay.values()))
    if valid > max_candidates:
        rows = []
    rules: Counter = Counter()
    examples: dict[str, str] = {}
    for why, n in refused.items():
        rules[_rule(why)] += n
        examples.setdefault(_rule(why), why)
    columns = ["world_size", "num_nodes", "batch_size", "dp_size", *LAYOUT_DEFAULTS]
    return LayoutSearch(
        candidates=pd.DataFrame(rows, columns=columns),
        combinations=len(grid) * len(layouts),
        valid=valid,
        refused={rule: (n, examples[rule]) for rule, n in rules.most_common()},
    )


def layout_grid(grid: pd.DataFrame, space: LayoutSpace, spec: Workload) -> pd.DataFrame:
    """The valid candidates of :func:`search_layouts` (at most its ``max_candidates``).

    Returns:
        ``grid``'s columns and ``dp_size``, ``tp_size``, ``pp_size``, ``micro_batches``,
        ``pipeline_schedule``, ``sharding``; possibly empty.
    """
    return search_layouts(grid, space, spec).candidates


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
        predictor: the loaded :class:`~scaledl.Predictor`.
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
