"""The resource planner: which world size, nodes and batch size train a model cheapest in time.

:func:`plan` predicts every candidate configuration of a model (world sizes x node counts x
per-rank batch sizes) with a trained :class:`~scaledl.Predictor`, drops those that do
not fit in device memory (:mod:`scaledl.planning.memory`), and returns a :class:`Plan`: one row
per candidate with the time to train (``epochs`` x the predicted epoch time, with its
calibrated interval), device-hours, cost and whether the prediction lies in the training
domain; the Pareto front of time versus cost; and the cheapest configuration that meets a
deadline.

Decisions:

* The deadline is met when the *upper* bound of the time to train's interval is within it
  (with ``coverage=None``, the point prediction): a plan should hold with the stated
  probability, not on average. The interval of one epoch scales to ``epochs`` epochs as is,
  since a model's error is the same in every epoch.
* Cost is ``world_size x time to train x price per device-hour`` (point prediction; the table
  also gives the cost at the interval's upper bound).
* Out-of-domain candidates stay in the table, flagged with their reasons, and take part in the
  front and the pick; ``strict=True`` keeps only in-domain ones eligible (an error when none
  is).
* The Pareto front (minimise time and cost; Kung, Luccio and Preparata, J. ACM 1975: a sort
  by time and a sweep keeping the running minimum cost) is taken over the eligible
  candidates: those that fit in memory (and, strict, lie in domain).
* A CPU's memory is the host's, shared by the ranks on one node: its default per-rank memory
  is the host RAM divided by the ranks per node.
* Every search is bounded before it is built: the candidates (the product of the distinct
  world sizes, node counts and batch sizes, counted arithmetically) at most
  :data:`MAX_PLAN_CANDIDATES`; a layout search's combinations and valid candidates at most
  :data:`~scaledl.planning.layouts.MAX_LAYOUT_COMBINATIONS` and
  :data:`~scaledl.planning.layouts.MAX_LAYOUT_CANDIDATES`. Past a limit the plan is refused
  with the count and what to narrow; every plan says what it searched (:class:`Searched`).
"""

from __future__ import annotations

import itertools
import math
import numbers
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scaledl.devices import UnknownDeviceError, device_spec
from scaledl.graph.features import architecture_key
from scaledl.models.domain import range_features
from scaledl.models.guard import guard_columns
from scaledl.planning.layouts import (
    LAYOUT_COLUMNS,
    MAX_LAYOUT_CANDIDATES,
    MAX_LAYOUT_COMBINATIONS,
    LayoutSpace,
    layout_count,
    layout_labels,
    layout_memory,
    layout_specs,
    predict_layout_candidates,
    search_layouts,
)
from scaledl.planning.memory import estimate_memory, fits_memory
from scaledl.planning.pareto import ParetoFront, tie_ranks
from scaledl.prediction.gpu_layouts import megatron_refusal
from scaledl.prediction.layouts import recipe_lines
from scaledl.prediction.predict import epoch_columns, predict_specs
from scaledl.prediction.predictor import Predictor, load_predictor
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.parallelism import LAYOUT_FIELDS, is_data_parallel, layout_label
from scaledl.workloads.spec import Workload

#: Fields :func:`plan` chooses; a model that sets them is an error.
PLANNED_FIELDS = ("world_size", "num_nodes", "batch_size", "dataset_size")
#: Candidates predicted at a time (graphs, GNN batch and guard of one chunk in memory).
PLAN_CHUNK = 16_384
#: Most candidates one plan predicts (world sizes x nodes x batch sizes): the 262,144 of
#: ``benchmarks/bench_scale.py``, planned in 32 s with a 1.2 GB peak on a 2-core host.
MAX_PLAN_CANDIDATES = 262_144
#: Why a model with layout fields is refused (the planner chooses the layout).
_LAYOUT_CHOSEN = (
    "the planner chooses the layout; search it with layouts=LayoutSpace(...) (CLI: --layouts, "
    "narrowed by --layout-set, e.g. tp_sizes=2)"
)
#: Columns of :attr:`Plan.table`.
PLAN_COLUMNS = (
    "world_size",
    "num_nodes",
    "batch_size",
    "global_batch_size",
    "steps_per_epoch",
    "memory_per_rank_gb",
    "fits_memory",
    "iteration_s",
    "epoch_s",
    "time_to_train_h",
    "time_to_train_h_low",
    "time_to_train_h_high",
    "device_hours",
    "cost",
    "cost_high",
    "in_domain",
    "extrapolation",
    "eligible",
    "pareto",
    "meets_deadline",
    "chosen",
)


class PlanError(ValueError):
    """A plan cannot be made from these inputs (the message names the argument and value)."""


@dataclass(frozen=True)
class Searched:
    """What a plan searched.

    Attributes:
        combinations: combinations examined (world sizes x nodes x batch sizes, times the
            layouts of the space in a layout search), before validity.
        candidates: candidates predicted.
        limit: the most candidates the search may predict.
        seconds: wall time of the whole plan, s.
    """

    combinations: int
    candidates: int
    limit: int
    seconds: float

    def text(self) -> str:
        """One line, e.g. ``searched 448 combinations: 118 candidates predicted in 1.2 s``."""
        return (
            f"searched {self.combinations:,} combinations: {self.candidates:,} candidates "
            f"predicted in {self.seconds:.3g} s (limit {self.limit:,} candidates)"
        )


@dataclass(frozen=True)
class Plan:
    """The planner's result.

    Attributes:
        table: one row per candidate, columns :data:`PLAN_COLUMNS`, sorted by time to train.
        model: the model planned for (workload fields without those the planner chooses).
        dataset_size: samples per epoch.
        epochs: epochs to train.
        price_per_device_hour: price of one device for one hour.
        deadline_h: the deadline, hours (``None``: none).
        coverage: coverage of the intervals (``None``: no interval).
        device_memory_gb: memory per rank the fit was checked against, GB.
        notes: what the plan could not do, and why.
        searched: what the plan searched (``None``: not recorded).
    """

    table: pd.DataFrame
    model: dict[str, Any]
    dataset_size: int
    epochs: float
    price_per_device_hour: float
    deadline_h: float | None
    coverage: float | None
    device_memory_gb: float
    notes: list[str] = field(default_factory=list)
    searched: Searched | None = None

    @property
    def pareto(self) -> pd.DataFrame:
        """The Pareto front of time to train vs cost (by increasing time)."""
        return self.table[self.table["pareto"]]

    @property
    def choice(self) -> pd.Series | None:
        """The cheapest eligible candidate that meets the deadline (``None``: none does)."""
        chosen = self.table[self.table["chosen"]]
        return None if chosen.empty else chosen.iloc[0]

    @property
    def best_per_world_size(self) -> pd.DataFrame:
        """The fastest eligible candidate of each world size (a layout search's answer)."""
        eligible = self.table[self.table["eligible"]]
        if eligible.empty:
            return eligible
        best = eligible.sort_values(["time_to_train_h", "cost"]).groupby("world_size").head(1)
        return best.sort_values("world_size")

    def to_text(self, all_rows: bool = False) -> str:
        """A readable table: the Pareto front and the choice (or every candidate), and notes.

        With no candidate eligible (the front is empty), every candidate is listed, with the
        memory per rank it needs. A layout search adds the fastest layout per world size and
        the recipe that composed the candidates (:func:`~scaledl.prediction.layouts.recipe_lines`).

        Args:
            all_rows: list every candidate, not only the front.

        Returns:
            Text lines.
        """
        t = self.table if all_rows else self.table[self.table["pareto"] | self.table["chosen"]]
        if t.empty:  # no eligible candidate, no front: list every one, with what it needs
            t = self.table
        n = len(self.table)
        head = (
            f"{n} candidates, {int(self.table['fits_memory'].sum())} fit in "
            f"{self.device_memory_gb:.3g} GB per rank, {int(self.table['pareto'].sum())} on the "
            f"Pareto front of time vs cost; {self.epochs:g} epochs of {self.dataset_size} "
            f"samples at {self.price_per_device_hour:g} per device-hour"
            + (f"; intervals at {self.coverage:.0%}" if self.coverage is not None else "")
        )
        lines = [head, _shown(t).to_string(index=False)]
        if "layout" in self.table and not self.best_per_world_size.empty:
            lines += ["fastest layout per world size:",
                      _shown(self.best_per_world_size).to_string(index=False)]  # fmt: skip
        if self.deadline_h is not None:
            lines.append(_choice_line(self.choice, self.deadline_h))
        if "layout_recipe" in self.table:
            counts = self.table["layout_recipe"].value_counts().to_dict()
            lines += recipe_lines(counts, "candidate(s)")
        lines += [f"note: {note}" for note in self.notes]
        if self.searched is not None:
            lines.append(self.searched.text())
        return "\n".join(lines)

    def plot(self, path: Path | str) -> Path:
        """Write a PNG of time to train vs cost with the Pareto front and the choice.

        Returns:
            The path.
        """
        # A local import: matplotlib costs every plan that draws nothing.
        from scaledl.planning.figure import plan_figure

        return plan_figure(
            Path(path),
            table=self.table,
            pareto=self.pareto,
            choice=self.choice,
            deadline_h=self.deadline_h,
            epochs=self.epochs,
            dataset_size=self.dataset_size,
            price_per_device_hour=self.price_per_device_hour,
        )


def _time_text(point: float, low: float, high: float) -> str:
    if np.isnan(low):
        return f"{point:.3g} h"
    return f"{point:.3g} h [{low:.3g}, {high:.3g}]"


def _shown(t: pd.DataFrame) -> pd.DataFrame:
    """The displayed columns of plan rows."""
    shown = {"ranks": t["world_size"].astype(str) + " on " + t["num_nodes"].astype(str)}
    if "layout" in t:
        shown["layout"] = t["layout"]
    shown.update(
        {
            "batch/rank": t["batch_size"],
            "mem/rank GB": t["memory_per_rank_gb"].map("{:.2f}".format),
            "fits": t["fits_memory"].map({True: "yes", False: "NO"}),
            "time to train": [
                _time_text(a, lo, hi)
                for a, lo, hi in zip(
                    t["time_to_train_h"],
                    t["time_to_train_h_low"],
                    t["time_to_train_h_high"],
                    strict=True,
                )  # fmt: skip
            ],
            "device-h": t["device_hours"].map("{:.3g}".format),
            "cost": t["cost"].map("{:.4g}".format),
            "in domain": t["in_domain"].map({True: "yes", False: "no"}),
            "": np.where(t["chosen"], "<- chosen", np.where(t["pareto"], "front", "")),
        }
    )
    return pd.DataFrame(shown)


def _choice_line(choice: pd.Series | None, deadline_h: float) -> str:
    """The deadline's answer in words."""
    if choice is None:
        return f"no eligible candidate meets the deadline of {deadline_h:g} h"
    layout = f" ({choice['layout']})" if "layout" in choice else ""
    when = _time_text(
        choice["time_to_train_h"], choice["time_to_train_h_low"], choice["time_to_train_h_high"]
    )
    return (
        f"cheapest meeting {deadline_h:g} h: {choice['world_size']} ranks on "
        f"{choice['num_nodes']} node(s){layout}, batch {choice['batch_size']} per rank: {when}"
        f", cost {choice['cost']:.4g}"
        + ("" if choice["in_domain"] else f" (OUT OF DOMAIN: {choice['extrapolation']})")
    )


def candidate_grid(
    world_sizes: list[int],
    batch_sizes: list[int],
    nodes: list[int] = (1,),
    devices_per_node: int | None = None,
    max_candidates: int = MAX_PLAN_CANDIDATES,
) -> pd.DataFrame:
    """The candidate configurations: every (world size, nodes, batch size) that can run.

    A candidate needs ``nodes <= world_size``, nodes dividing the world size (equal ranks per
    node) and, when ``devices_per_node`` is given, at most that many ranks per node.

    Args:
        world_sizes: candidate world sizes.
        batch_sizes: candidate per-rank batch sizes.
        nodes: candidate node counts.
        devices_per_node: devices one node has (``None``: no limit).
        max_candidates: most combinations (the product of the distinct values' counts,
            checked before the grid is built).

    Returns:
        Columns ``world_size``, ``num_nodes``, ``batch_size``.

    Raises:
        PlanError: a value is not a positive integer, more than ``max_candidates``
            combinations (naming the count), or no combination can run.
    """
    for name, values in (
        ("world_sizes", world_sizes),
        ("batch_sizes", batch_sizes),
        ("nodes", nodes),
    ):
        bad = [v for v in values if isinstance(v, (bool, np.bool_))
               or not isinstance(v, (int, np.integer)) or v < 1]  # fmt: skip
        if not len(values) or bad:
            raise PlanError(f"argument {name!r} (value {list(values)!r:.200}): positive integers "
                            "needed")  # fmt: skip
    axes = _axis_sizes(world_sizes, nodes, batch_sizes)
    combinations = math.prod(axes)
    if combinations > max_candidates:
        raise PlanError(
            f"{combinations:,} candidates ({_axes_text(axes)}), over the limit of "
            f"{max_candidates:,} per plan; narrow the world sizes, nodes or batch sizes "
            "(CLI: --world-sizes, --nodes, --batch-sizes)"
        )
    rows = [
        (ws, n, b)
        for ws, n, b in itertools.product(
            sorted(set(world_sizes)), sorted(set(nodes)), sorted(set(batch_sizes))
        )
        if n <= ws and ws % n == 0 and (devices_per_node is None or ws // n <= devices_per_node)
    ]
    if not rows:
        raise PlanError(
            f"no candidate: no node count in {list(nodes)} divides a world size in "
            f"{list(world_sizes)} with at most {devices_per_node} ranks per node"
        )
    return pd.DataFrame(rows, columns=["world_size", "num_nodes", "batch_size"])


def _axis_sizes(world_sizes, nodes, batch_sizes) -> tuple[int, int, int]:
    """Distinct world sizes, node counts and batch sizes."""
    return len(set(world_sizes)), len(set(nodes)), len(set(batch_sizes))


def _axes_text(axes: tuple[int, ...], layouts: int | None = None) -> str:
    """``"64 world sizes x 1 node count x 4 batch sizes"`` (``x N layouts`` when given)."""
    names = ("world size(s)", "node count(s)", "batch size(s)")
    parts = [f"{n:,} {name}" for n, name in zip(axes, names, strict=True)]
    if layouts is not None:
        parts.append(f"{layouts:,} layout(s) of the space")
    return " x ".join(parts)


def _check_layout_search(world_sizes, nodes, batch_sizes, layouts: LayoutSpace) -> int:
    """Refuse a layout search of too many combinations, before any is built.

    Returns:
        The number of layouts of the space (:func:`~scaledl.planning.layouts.layout_count`).

    Raises:
        PlanError: more than :data:`~scaledl.planning.layouts.MAX_LAYOUT_COMBINATIONS`
            combinations, or a space without a layout (naming why).
    """
    count = layout_count(layouts)
    if count == 0:
        raise PlanError(
            f"argument 'layouts': the space has no layout: pp_sizes {list(layouts.pp_sizes)} "
            f"has no pipeline and schedules {list(layouts.schedules)} lack '1f1b', the schedule "
            "a layout without a pipeline keeps; add a pp size > 1 or the schedule 1f1b"
        )
    axes = _axis_sizes(world_sizes, nodes, batch_sizes)
    combinations = math.prod(axes) * count
    if combinations > MAX_LAYOUT_COMBINATIONS:
        raise PlanError(
            f"argument 'layouts': {combinations:,} combinations ({_axes_text(axes, count)}), "
            f"over the limit of {MAX_LAYOUT_COMBINATIONS:,} per layout search; narrow the "
            "world sizes or batch sizes, or the space (CLI: --world-sizes, --batch-sizes, "
            "--layout-set tp_sizes=... pp_sizes=... micro_batches=... shardings=...)"
        )
    return count


def pareto_mask(time: np.ndarray, cost: np.ndarray, eligible: np.ndarray | None = None):
    """The non-dominated candidates when minimising time and cost.

    A candidate is dominated when another has time and cost no larger and one of them smaller;
    of exact duplicates one is kept. Sort by (time, cost), sweep keeping the lowest cost seen
    (Kung, Luccio and Preparata 1975).

    Args:
        time: shape (n,).
        cost: shape (n,).
        eligible: shape (n,) bool; ineligible candidates are never on the front.

    Returns:
        Bool array, shape (n,).
    """
    time, cost = np.asarray(time, dtype=float), np.asarray(cost, dtype=float)
    ok = np.ones(len(time), bool) if eligible is None else np.asarray(eligible, bool)
    front = ParetoFront()
    front.add(time, cost, ok, 0)
    return front.mask(len(time))


def _default_memory_gb(device_name: str, ranks_per_node: np.ndarray) -> np.ndarray:
    try:
        spec = device_spec(device_name)
    except UnknownDeviceError as exc:
        raise PlanError(f"{exc}; give the memory per rank (device_memory_gb)") from None
    if spec.kind == "cpu":  # host RAM shared by the ranks of a node
        return spec.memory_gb / ranks_per_node
    return np.full(len(ranks_per_node), spec.memory_gb)


@dataclass(frozen=True)
class _Settings:
    """What every chunk of a plan shares (the arguments of :func:`plan` after checking)."""

    epochs: float
    price: float
    dataset_size: int
    coverage: float | None
    headroom: float
    strict: bool
    layouts: LayoutSpace | None


def plan(
    predictor: Any,
    model: dict[str, Any] | Workload,
    dataset_size: int,
    epochs: float,
    world_sizes: list[int],
    batch_sizes: list[int],
    price_per_device_hour: float,
    nodes: list[int] = (1,),
    device_memory_gb: float | None = None,
    deadline_h: float | None = None,
    coverage: float | None = 0.9,
    devices_per_node: int | None = None,
    memory_headroom: float = 0.1,
    strict: bool = False,
    layouts: LayoutSpace | None = None,
) -> Plan:
    """Plan the training of a model: predict every candidate configuration, pick the cheapest.

    Args:
        predictor: a :class:`~scaledl.Predictor`, or a bundle / name directory.
        model: the workload fields of the model (``family``, architecture, ``seq_len``,
            ``precision``, ``device_name``, ...), without those the planner chooses
            (:data:`PLANNED_FIELDS`); a :class:`~scaledl.workloads.spec.Workload` gives its
            fields (its world size, nodes, batch and dataset size are replaced).
        dataset_size: samples per epoch.
        epochs: epochs to train.
        world_sizes: candidate world sizes.
        batch_sizes: candidate per-rank batch sizes (per data-parallel replica with layouts).
        price_per_device_hour: price of one device-hour (any currency).
        nodes: candidate node counts.
        device_memory_gb: memory per rank, GB; default the device table's memory of the
            model's device (a CPU's host RAM divided by the ranks per node).
        deadline_h: time-to-train deadline, hours (``None``: no pick).
        coverage: coverage of the intervals (``None``: point predictions only).
        devices_per_node: devices per node (``None``: no limit).
        memory_headroom: share of the memory kept free for what the estimate leaves out.
        strict: only in-domain candidates are eligible (module docstring).
        layouts: search these parallel layouts too (:mod:`scaledl.planning.layouts`; every
            candidate is then predicted by the layout composition); ``None``: data parallel
            only, predicted by the predictor's own method or, on a GPU predictor whose
            Megatron-LM recipe composes every candidate, by that recipe (one GPU included, so
            the world sizes carry the same optimizer step; the notes name the recipe).

    Returns:
        The :class:`Plan`.

    Raises:
        PlanError: bad arguments (named), a search past its limits (module docstring; naming
            the count), no candidate (naming why, with counts), or (strict) no in-domain
            candidate.
        scaledl.workloads.fields.WorkloadError: the model is not a valid workload (row numbers
            count the candidates from 1).
        scaledl.models.intervals.CalibrationError: ``coverage`` without a calibrated bundle.
    """
    started = time.perf_counter()
    if not isinstance(predictor, Predictor):
        predictor = load_predictor(predictor)
    base = _model_fields(model)
    _check_numbers(dataset_size=dataset_size, epochs=epochs, deadline_h=deadline_h,
                   price_per_device_hour=price_per_device_hour,
                   device_memory_gb=device_memory_gb)  # fmt: skip
    grid = candidate_grid(world_sizes, batch_sizes, nodes, devices_per_node)
    combinations = len(grid)
    if layouts is not None:
        combinations *= _check_layout_search(world_sizes, nodes, batch_sizes, layouts)
    spec, grid, left_out = _first_spec(predictor, base, grid, dataset_size, layouts)
    if coverage is not None:
        predictor.check_coverage(coverage)
    settings = _Settings(float(epochs), float(price_per_device_hour), int(dataset_size),
                         coverage, memory_headroom, strict, layouts)  # fmt: skip
    memory_gb = _memory_per_rank(grid, spec, device_memory_gb)
    table, estimates, front = _predict_grid(predictor, spec, grid, memory_gb, settings)
    table, notes = _decide(table, front, settings, deadline_h)
    if left_out:
        counts = ", ".join(f"{n} by {field}" for field, n in sorted(left_out.items()))
        notes.append(
            f"{sum(left_out.values())} candidate(s) left out ({counts}): a GPU predictor "
            "composes Megatron-LM's tensor, pipeline and data parallelism without sharding, "
            "within one 8-GPU node (scaledl/prediction/gpu_layouts.py)"
        )
    if layouts is None and "layout_recipe" in table:  # a data-parallel plan composed on GPUs
        notes += recipe_lines(table["layout_recipe"].value_counts().to_dict(), "candidate(s)")
    if not table["fits_memory"].any():
        notes.insert(0, _memory_note(estimates, grid["batch_size"].tolist(), memory_gb,
                                     memory_headroom))  # fmt: skip
    order = np.lexsort((tie_ranks(table["cost"]), tie_ranks(table["time_to_train_h"])))
    table = table.iloc[order].reset_index(drop=True)  # ties: grid order (pareto.tie_ranks)
    columns = list(PLAN_COLUMNS)
    columns[2:2] = LAYOUT_COLUMNS if layouts is not None else ()
    limit = MAX_PLAN_CANDIDATES if layouts is None else MAX_LAYOUT_CANDIDATES
    searched = Searched(combinations, len(table), limit, time.perf_counter() - started)
    return Plan(table[columns], base, int(dataset_size), float(epochs),
                float(price_per_device_hour), deadline_h, coverage, float(np.min(memory_gb)),
                notes, searched)  # fmt: skip


def _first_spec(predictor, base: dict, grid: pd.DataFrame, dataset_size: int, layouts):
    """The parsed first candidate and the grid (expanded into layouts when asked).

    Candidates differ from the first only in world size, nodes and batch (and layout), which
    the grid keeps valid: one parse checks them all. A GPU predictor's layout search leaves
    out what its Megatron-LM recipe does not compose (:func:`_megatron_candidates`).

    Returns:
        ``(spec, grid, left_out)``: the first candidate, the grid, the candidates left out per
        field (``{field: count}``, empty but on a GPU predictor).

    Raises:
        PlanError: no valid layout (naming each rule that refused combinations, with its
            count), more than :data:`~scaledl.planning.layouts.MAX_LAYOUT_CANDIDATES` valid
            ones (or, on a GPU predictor, none it composes).
        scaledl.workloads.fields.WorkloadError: the model is not a valid workload.
    """
    sizes = {k: int(grid[k].iloc[0]) for k in ("world_size", "num_nodes", "batch_size")}
    first = {**base, "dataset_size": int(dataset_size), **sizes}
    spec = predictor.parse_workloads([first], source="plan candidate")[0]
    left_out: dict[str, int] = {}
    if layouts is not None:
        search = search_layouts(grid, layouts, spec, MAX_LAYOUT_CANDIDATES)
        if search.valid == 0:
            raise PlanError(
                f"argument 'layouts': no valid layout among the {search.combinations:,} "
                f"combinations of the world sizes, nodes, batches and layouts given; refused: "
                f"{search.why_none()}"
            )
        if search.valid > MAX_LAYOUT_CANDIDATES:
            raise PlanError(
                f"argument 'layouts': {search.valid:,} valid layout candidates (of "
                f"{search.combinations:,} combinations), over the limit of "
                f"{MAX_LAYOUT_CANDIDATES:,} per plan; narrow the world sizes or batch sizes, "
                "or the space (CLI: --world-sizes, --batch-sizes, --layout-set)"
            )
        grid = search.candidates
        if predictor.predicts_any_device:
            grid, left_out = _megatron_candidates(grid, spec)
    return spec, grid, left_out


def _megatron_candidates(grid: pd.DataFrame, spec) -> tuple[pd.DataFrame, dict[str, int]]:
    """The layout candidates a GPU predictor's Megatron-LM recipe composes, and those left out.

    Sharded candidates, several nodes and more GPUs than one node holds are left out
    (:func:`~scaledl.prediction.gpu_layouts.megatron_refusal`), counted per field for the
    plan's notes.

    Raises:
        PlanError: no candidate is left (naming why, e.g. the GPU has no measured collectives).
    """
    keys = ["sharding", "num_nodes", "world_size"]
    reasons = {}
    for row in grid[keys].drop_duplicates().itertuples(index=False):
        reasons[tuple(row)] = megatron_refusal(
            spec.model_copy(update=dict(zip(keys, row, strict=True)))
        )
    why = [reasons[tuple(row)] for row in grid[keys].itertuples(index=False)]
    keep = np.array([w is None for w in why])
    if not keep.any():
        counts = pd.Series(why, dtype=object).value_counts()
        listed = "; ".join(f"{n:,} as {reason}" for reason, n in counts.head(5).items())
        more = f"; and {len(counts) - 5} more reason(s)" if len(counts) > 5 else ""
        raise PlanError(f"no candidate a GPU predictor composes: of {len(why):,} candidates, "
                        f"{listed}{more}")  # fmt: skip
    fields = pd.Series([w.split("'")[1] for w in why if w], dtype=object)
    return grid[keep].reset_index(drop=True), fields.value_counts().to_dict()


def _memory_per_rank(grid: pd.DataFrame, spec: Workload, device_memory_gb) -> np.ndarray:
    """Memory per rank of each candidate, GB: given, or the device table's."""
    if device_memory_gb is not None:
        return np.full(len(grid), float(device_memory_gb))
    ranks_per_node = (grid["world_size"] // grid["num_nodes"]).to_numpy()
    return _default_memory_gb(spec.device_name, ranks_per_node)


def _predict_grid(predictor, spec: Workload, grid: pd.DataFrame, memory_gb, settings: _Settings):
    """Predict every candidate, :data:`PLAN_CHUNK` at a time.

    Returns:
        ``(table, memory estimates, Pareto front over the eligible candidates)``.
    """
    arch = architecture_key(spec)
    parameters = None
    front = ParetoFront()
    parts, estimates = [], []
    memo: dict[tuple[int, bool], Any] = {}
    # decided once for the whole grid, so every chunk's candidates compare alike
    composed = (
        settings.layouts is None and predictor.predicts_any_device and _all_composed(spec, grid)
    )
    for start in range(0, len(grid), PLAN_CHUNK):
        part = grid.iloc[start : start + PLAN_CHUNK].reset_index(drop=True)
        if settings.layouts is not None:
            specs = layout_specs(spec, part)
            shared = predict_layout_candidates(predictor, specs, arch)
            estimates += layout_memory(specs, megatron=predictor.predicts_any_device)
        else:
            specs = [
                spec.model_copy(
                    update={
                        "world_size": int(ws),
                        "dp_size": int(ws),
                        "num_nodes": int(n),
                        "batch_size": int(b),
                    }
                )  # fmt: skip
                for ws, n, b in part.itertuples(index=False)
            ]
            if composed:
                # one GPU composed too (its optimizer step), so the world sizes compare alike
                shared = predict_layout_candidates(predictor, specs, arch)
            else:
                shared = predict_specs(predictor, specs, [arch] * len(specs))
            if parameters is None:
                parameters = float(range_features([spec])["parameters"].iloc[0])
            for w in specs:
                key = (w.batch_size, w.world_size > 1)
                if key not in memo:
                    memo[key] = estimate_memory(w, parameters)
                estimates.append(memo[key])
        chunk = _chunk_table(predictor, part, shared, estimates[start:],
                             memory_gb[start : start + len(part)], settings)  # fmt: skip
        if settings.layouts is not None:
            chunk.insert(2, "layout", layout_labels(specs))
        if settings.layouts is not None or composed:
            chunk["layout_recipe"] = shared.recipes
        ok = chunk["fits_memory"].to_numpy()
        if settings.strict:
            ok = ok & chunk["in_domain"].to_numpy()
        front.add(chunk["time_to_train_h"].to_numpy(), chunk["cost"].to_numpy(), ok, start)
        parts.append(chunk)
    return pd.concat(parts, ignore_index=True), estimates, front


def _all_composed(spec: Workload, grid: pd.DataFrame) -> bool:
    """Whether Megatron-LM's recipe composes every data-parallel candidate of a GPU plan.

    Then every one, one GPU included, is composed
    (:func:`~scaledl.planning.layouts.predict_layout_candidates`), so the candidates of a
    data-parallel plan carry the same optimizer step and compare alike, and the plan's notes
    name the recipe; else each takes :func:`~scaledl.prediction.predict.predict_specs`' answer
    (one GPU the predictor's own, several composed or flagged).

    Args:
        spec: the model's workload (device, precision, mode).
        grid: the candidates (``world_size``, ``num_nodes``), the whole plan's.
    """
    pairs = grid[["world_size", "num_nodes"]].drop_duplicates().itertuples(index=False)
    return all(
        megatron_refusal(spec.model_copy(update={"world_size": int(ws), "dp_size": int(ws),
                                                 "num_nodes": int(n)})) is None
        for ws, n in pairs
    )  # fmt: skip


def _decide(table: pd.DataFrame, front: ParetoFront, settings: _Settings, deadline_h):
    """Eligibility, the front, the deadline and the pick, with the notes they raise.

    Raises:
        PlanError: strict and no candidate that fits lies in the training domain.
    """
    notes = []
    eligible = table["fits_memory"].to_numpy()
    if settings.strict:
        fits = int(eligible.sum())
        eligible = eligible & table["in_domain"].to_numpy()
        if not eligible.any():
            outside = table.loc[table["fits_memory"], "extrapolation"]
            first = outside.iloc[0] if len(outside) else table["extrapolation"].iloc[0]
            raise PlanError(
                f"strict: no candidate that fits in memory lies in the predictor's training "
                f"domain: of {len(table):,} candidates {len(table) - fits:,} do not fit in "
                f"memory and {fits:,} that fit lie outside the domain (first reasons: {first})"
            )
    table["eligible"] = eligible
    table["pareto"] = front.mask(len(table))
    bound = "time_to_train_h" if settings.coverage is None else "time_to_train_h_high"
    table["meets_deadline"] = table[bound] <= deadline_h if deadline_h is not None else False
    table["chosen"] = False
    feasible = table[eligible & table["meets_deadline"].to_numpy()]
    if deadline_h is not None and feasible.empty and eligible.any():
        fastest = table.loc[eligible, bound].min()
        notes.append(
            f"no eligible candidate meets {deadline_h:g} h: the fastest needs {fastest:.3g} h"
            + (" (upper bound of its interval)" if settings.coverage is not None else "")
        )
    if deadline_h is not None and eligible.any():
        notes += _implausible_deadline(deadline_h, table.loc[eligible, bound].max())
    if not feasible.empty:
        keys = (tie_ranks(feasible["time_to_train_h"]), feasible["world_size"].to_numpy(),
                tie_ranks(feasible["cost"]))  # fmt: skip
        best = feasible.index[np.lexsort(keys)[0]]
        table.loc[best, "chosen"] = True
    if not table["in_domain"].all():
        notes.append(
            f"{int((~table['in_domain']).sum())} of {len(table)} candidates lie outside the "
            "predictor's training domain (column extrapolation): their predictions are "
            "extrapolations"
        )
    return table, notes


def _check_numbers(**values: float | None) -> None:
    """Refuse a number that is not finite and positive (``None``: not given).

    Raises:
        PlanError: naming the argument and the value.
    """
    for name, value in values.items():
        if value is None and name in ("deadline_h", "device_memory_gb"):
            continue
        number = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or not value > 0:
            raise PlanError(f"argument {name!r} (value {value!r}): must be a finite number > 0")


def _memory_note(
    estimates: list, batches: list[int], memory_gb: np.ndarray, headroom: float
) -> str:
    """Why nothing fits: what the smallest candidate needs per rank vs has, and what would fit.

    The model states (weights, gradients, optimizer) do not depend on the batch and the
    activations grow in proportion to it (:mod:`scaledl.planning.memory`), so the largest batch
    that fits is ``(available - states) / activations per sample``.
    """
    i = int(np.argmin([e.total_bytes - (1 - headroom) * gb * 1e9
                       for e, gb in zip(estimates, memory_gb, strict=True)]))  # fmt: skip
    e, batch, has = estimates[i], batches[i], float(memory_gb[i])
    avail = (1 - headroom) * has * 1e9
    states = e.total_bytes - e.activations_bytes
    per_sample = e.activations_bytes / batch
    text = (
        f"no candidate fits in memory: the closest (batch {batch} per rank) needs "
        f"{e.total_bytes / 1e9:.3g} GB per rank ({states / 1e9:.3g} GB weights, gradients and "
        f"optimizer state, {e.activations_bytes / 1e9:.3g} GB activations) and has "
        f"{has:.3g} GB ({avail / 1e9:.3g} GB less the {headroom:.0%} headroom)"
    )
    if states + per_sample <= avail:
        largest = int((avail - states) // per_sample)
        return text + f"; a batch of at most {largest} per rank would fit (--batch-sizes)"
    need = (states + per_sample) / (1 - headroom) / 1e9
    return text + (
        f"; even batch 1 needs {(states + per_sample) / 1e9:.3g} GB: a device with at least "
        f"{need:.3g} GB per rank (--device-memory-gb), a lower precision or a smaller model"
    )


def _implausible_deadline(deadline_h: float, slowest_h: float) -> list[str]:
    """A note when the deadline is over 100 times the slowest candidate (seconds for hours?)."""
    if deadline_h < 100 * slowest_h:
        return []
    return [
        f"the deadline of {deadline_h:g} h is {deadline_h / slowest_h:.3g} times the slowest "
        f"eligible candidate's {slowest_h:.3g} h, so every candidate meets it; --deadline-h is "
        f"in hours ({deadline_h:g} s would be {deadline_h / 3600:.3g} h)"
    ]


def _model_fields(model: dict[str, Any] | Workload) -> dict[str, Any]:
    if isinstance(model, Workload):
        if not is_data_parallel(model):
            raise WorkloadError(f"model: layout {layout_label(model)!r}: {_LAYOUT_CHOSEN}")
        fields = model.model_dump(mode="json")
        skip = (*PLANNED_FIELDS, *LAYOUT_FIELDS)
        return {k: v for k, v in fields.items() if k not in skip and v is not None}
    if not isinstance(model, dict):
        raise PlanError(f"argument 'model' (value {model!r:.80}): a mapping of workload fields")
    chosen = [k for k in PLANNED_FIELDS if k in model]
    if chosen:
        raise WorkloadError(
            f"model: field {chosen[0]!r} (value {model[chosen[0]]!r}): the planner chooses "
            f"{', '.join(PLANNED_FIELDS[:3])} and takes dataset_size as its own argument"
        )
    layout = [k for k in LAYOUT_FIELDS if k in model]
    if layout:
        raise WorkloadError(
            f"model: field {layout[0]!r} (value {model[layout[0]]!r}): {_LAYOUT_CHOSEN}"
        )
    return dict(model)


def _chunk_table(predictor, grid, shared, estimates, memory_gb, settings: _Settings):
    """The table rows of a chunk of candidates (before eligibility, front and pick)."""
    table = grid.copy()
    world = grid["world_size"].to_numpy(dtype=np.int64)
    replicas = grid["dp_size"].to_numpy(dtype=np.int64) if "dp_size" in grid else world
    batch = grid["batch_size"].to_numpy(dtype=np.int64)
    table["global_batch_size"] = replicas * batch
    steps = np.ceil(settings.dataset_size / (replicas * batch).astype(np.float64))
    steps = steps.astype(np.int64)
    table["steps_per_epoch"] = steps
    memory = np.array([e.total_bytes for e in estimates[: len(grid)]])
    table["memory_per_rank_gb"] = memory / 1e9
    table["fits_memory"] = [
        fits_memory(m, gb * 1e9, settings.headroom) for m, gb in zip(memory, memory_gb, strict=True)
    ]
    guard = guard_columns(shared.reasons)
    coverage = settings.coverage
    times = epoch_columns(
        predictor, shared.iteration_s, steps, batch, guard["interval_basis"].tolist(), coverage
    )
    table["iteration_s"] = times["iteration_s"]
    table["epoch_s"] = times["epoch_s"]
    hours = settings.epochs / 3600.0
    table["time_to_train_h"] = times["epoch_s"] * hours
    has = coverage is not None
    table["time_to_train_h_low"] = times["epoch_s_low"] * hours if has else np.nan
    table["time_to_train_h_high"] = times["epoch_s_high"] * hours if has else np.nan
    table["device_hours"] = table["world_size"] * table["time_to_train_h"]
    table["cost"] = table["device_hours"] * settings.price
    table["cost_high"] = (
        table["world_size"] * table["time_to_train_h_high"] * settings.price if has else np.nan
    )
    table["in_domain"] = guard["in_domain"].to_numpy()
    table["extrapolation"] = guard["extrapolation"].to_numpy()
    return table
