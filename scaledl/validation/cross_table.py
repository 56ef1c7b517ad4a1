"""Cross-table rules, checked with pandas and reported like expectations.

Two kinds of rules:

* **Reference rules** (:func:`reference_failures`) are row-level: a row whose ``workload_id`` or
  ``run_id`` is unknown, whose ``workload_id`` disagrees with its run, or whose parent row
  (workload, run) is quarantined, is quarantined itself. Rows of a run whose ``status`` is not
  ``ok`` are quarantined with the reason ``"run status failed"``.
* **Run rules** (:func:`run_failures`) judge a run as a whole: world size consistent with the
  workload, ranks exactly ``0..world_size-1`` in every per-rank table, rows present in every
  required table (for imported runs, ``runs.source`` not ``scaledl``, the tables an import
  carries), per-layer forward + backward sum of an instrumented step not above its
  iteration time (beyond a tolerance), all-reduced bytes per step and rank of a training run
  with world size > 1 equal to gradient bytes x trainable parameters (sum of ``params`` over the
  workload's distinct ``layer_index``) within a tolerance; the gradient element is 4 bytes for
  fp32 and 2 for bf16/fp16 workloads (the profiler builds parameters in the workload's dtype).
  **A run is usable only whole**: when one of these fails, every row of the run, in every table
  (``runs`` included), is quarantined with the rule's name; the workload row is kept (other runs
  may use it).
* **Completeness** (``run_complete``): a run that lost a row of a per-rank table to a row-level
  check (a NaN or negative time, a conflicting duplicate key, ...) would leave a step without
  one of its layers, buckets or iterations, so it is quarantined whole, naming the lost row
  (:func:`lost_row_failures`). The surviving rows must also form a full grid: every rank has
  every instrumented step, every instrumented step every ``layer_index`` ``0..max`` (under
  pipeline parallelism: each rank its own stage's consecutive layers, for every
  ``micro_batch``) (and every all-reduce ``bucket_index`` when the run has buckets), and every
  rank a gap-free run of label steps (:func:`run_failures`).
* **Epoch consistency**: ``epoch_s`` of each rank, divided by ``steps_per_epoch`` x the median
  label ``iteration_ms`` of that rank, must lie in ``[epoch_ratio_min, epoch_ratio_max]`` (an
  epoch written in milliseconds is 1000x off), and ``steps_per_epoch`` must equal
  ``ceil(dataset_size / (batch_size x dp_size))`` of the workload (``dp_size``: the world
  size for plain DDP), with the epoch row's
  ``dataset_size`` the workload's. Failures carry the measured ratio.

A run the profiler's interference guard recorded as still disturbed after its retries
(``interference`` true: its calibration probes drifted from the host's baseline, or other
processes kept the cores busy) is quarantined whole under the rule ``interference``, with the
probe figures as the value. A run whose ``iteration_cv`` exceeds ``max_iteration_cv`` is flagged,
not quarantined.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pandas as pd

from scaledl.profiles.tables import RUN_TABLE_NAMES
from scaledl.validation.config import ValidationConfig
from scaledl.validation.quarantine import FailureLog, RowFailure, format_value
from scaledl.validation.report import ExpectationOutcome, Flag
from scaledl.workloads.spec import PRECISION_BYTES

RUN_STATUS_FAILED = "run status failed"
RUN_COMPLETE = "run_complete"
#: Columns locating a row inside its run, in the order they are named in messages.
_ROW_KEYS = ("rank", "phase", "step", "layer_index", "bucket_index")


def _outcome(
    table: str, level: str, rule: str, column: str, checked: int, failures: list[str]
) -> ExpectationOutcome:
    """Return the outcome record of one pandas rule."""
    return ExpectationOutcome(
        table=table,
        level=level,
        expectation=rule,
        column=column,
        success=not failures,
        element_count=int(checked),
        unexpected_count=len(failures),
        examples=failures[:5],
        engine="pandas",
    )


def _flag_rows(
    frame: pd.DataFrame, mask: np.ndarray, log: FailureLog, rule: str, column: str
) -> list[str]:
    """Record ``rule`` for the rows under ``mask`` and return their values as strings."""
    positions = np.flatnonzero(mask)
    values = [format_value(v) for v in frame[column].to_numpy()[positions]]
    log.add_each((p, RowFailure(rule, column, v)) for p, v in zip(positions, values, strict=True))
    return values


def reference_failures(
    frames: dict[str, pd.DataFrame],
    logs: dict[str, FailureLog],
    run_tables: tuple[str, ...] = RUN_TABLE_NAMES,
) -> list[ExpectationOutcome]:
    """Quarantine rows whose parent is unknown, inconsistent, failed or quarantined.

    Args:
        frames: all six tables (``RangeIndex``), by name (plus any optional table).
        logs: their failure logs, updated in place (parents are judged before children).
        run_tables: the tables whose rows belong to runs (checked against ``runs``).

    Returns:
        One outcome per table and rule.
    """
    outcomes: list[ExpectationOutcome] = []
    workloads, runs = frames["workloads"], frames["runs"]
    known_workloads = set(workloads["workload_id"])
    bad_workload_pos = sorted(logs["workloads"].rows)
    bad_workloads = set(workloads["workload_id"].iloc[bad_workload_pos])

    run_wid = runs["workload_id"]
    unknown = ~run_wid.isin(known_workloads).to_numpy()
    values = _flag_rows(runs, unknown, logs["runs"], "workload_id_known", "workload_id")
    outcomes.append(_outcome("runs", "row", "workload_id_known", "workload_id", len(runs), values))
    parent_bad = run_wid.isin(bad_workloads).to_numpy() & ~unknown
    values = _flag_rows(runs, parent_bad, logs["runs"], "workload quarantined", "workload_id")
    outcomes.append(
        _outcome("runs", "row", "workload_not_quarantined", "workload_id", len(runs), values)
    )

    run_workload = dict(zip(runs["run_id"], runs["workload_id"], strict=True))
    bad_run_pos = sorted(logs["runs"].rows)
    bad_runs = set(runs["run_id"].iloc[bad_run_pos])
    not_ok_runs = set(runs.loc[runs["status"] != "ok", "run_id"])
    for name in run_tables:
        frame, log = frames[name], logs[name]
        if frame.empty:
            continue
        run_ids = frame["run_id"]
        unknown_run = ~run_ids.isin(run_workload.keys()).to_numpy()
        values = _flag_rows(frame, unknown_run, log, "run_id_known", "run_id")
        outcomes.append(_outcome(name, "row", "run_id_known", "run_id", len(frame), values))

        unknown_wid = ~frame["workload_id"].isin(known_workloads).to_numpy()
        values = _flag_rows(frame, unknown_wid, log, "workload_id_known", "workload_id")
        outcomes.append(
            _outcome(name, "row", "workload_id_known", "workload_id", len(frame), values)
        )

        expected = run_ids.map(run_workload)
        mismatch = (expected.notna() & (expected != frame["workload_id"])).to_numpy()
        values = _flag_rows(frame, mismatch, log, "workload_id_matches_run", "workload_id")
        outcomes.append(
            _outcome(name, "row", "workload_id_matches_run", "workload_id", len(frame), values)
        )

        failed = run_ids.isin(not_ok_runs).to_numpy()
        statuses = run_ids.map(dict(zip(runs["run_id"], runs["status"], strict=True)))
        positions = np.flatnonzero(failed)
        log.add_each(
            (p, RowFailure(RUN_STATUS_FAILED, "status", format_value(statuses.iloc[p])))
            for p in positions
        )
        outcomes.append(
            _outcome(
                name,
                "row",
                RUN_STATUS_FAILED,
                "run_id",
                len(frame),
                [format_value(v) for v in run_ids.iloc[positions]],
            )
        )
        quarantined = (run_ids.isin(bad_runs) & ~run_ids.isin(not_ok_runs)).to_numpy()
        values = _flag_rows(frame, quarantined, log, "run quarantined", "run_id")
        outcomes.append(_outcome(name, "row", "run_not_quarantined", "run_id", len(frame), values))
    return outcomes


def _world_sizes(alive: dict[str, pd.DataFrame]) -> dict[str, int]:
    """Return each alive run's world size, taken from its workload."""
    workload_ws = dict(
        zip(alive["workloads"]["workload_id"], alive["workloads"]["world_size"], strict=True)
    )
    return {
        run: int(workload_ws[wid])
        for run, wid in zip(alive["runs"]["run_id"], alive["runs"]["workload_id"], strict=True)
        if wid in workload_ws
    }


def _check_world_size(alive, failures) -> ExpectationOutcome:
    """Rule ``world_size_matches_workload``: the run's world size is its workload's."""
    runs = alive["runs"]
    ws = _world_sizes(alive)
    bad = []
    for run, run_ws in zip(runs["run_id"], runs["world_size"], strict=True):
        if run in ws and int(run_ws) != ws[run]:
            detail = f"run {run}: world_size {int(run_ws)} != workload world_size {ws[run]}"
            failures[run].append(RowFailure("world_size_matches_workload", "world_size", detail))
            bad.append(detail)
    return _outcome(
        "runs", "cross_table", "world_size_matches_workload", "world_size", len(runs), bad
    )


def _check_ranks(alive, failures) -> list[ExpectationOutcome]:
    """Rule ``ranks_match_world_size``: per table, a run's ranks are exactly 0..ws-1."""
    ws = _world_sizes(alive)
    outcomes = []
    for name in RUN_TABLE_NAMES:
        frame = alive[name]
        ranks = frame.groupby("run_id", sort=True)["rank"].unique()
        bad = []
        for run, present in ranks.items():
            expected = set(range(ws.get(run, 0)))
            got = {int(r) for r in present}
            if got != expected:
                detail = (
                    f"run {run}: {name} ranks {sorted(got)} != 0..{ws.get(run, 0) - 1}"
                    f" (world_size {ws.get(run, 0)})"
                )
                failures[run].append(RowFailure("ranks_match_world_size", "rank", detail))
                bad.append(detail)
        outcomes.append(
            _outcome(name, "cross_table", "ranks_match_world_size", "rank", len(ranks), bad)
        )
    return outcomes


#: ``runs.source`` of the project's own profiler (a missing column means this source).
OWN_SOURCE = "scaledl"


def _check_required(alive, failures, config: ValidationConfig) -> ExpectationOutcome:
    """Rule ``run_has_rows``: every run has rows in every required per-rank table.

    Runs imported from another source (``runs.source`` not ``scaledl``) need only
    ``config.imported_required_run_tables``.
    """
    frame = alive["runs"]
    runs = list(frame["run_id"])
    sources = frame["source"] if "source" in frame else pd.Series(OWN_SOURCE, index=frame.index)
    imported = set(frame["run_id"][sources.fillna(OWN_SOURCE) != OWN_SOURCE])
    bad = []
    for name in dict.fromkeys((*config.required_run_tables, *config.imported_required_run_tables)):
        present = set(alive[name]["run_id"])
        for run in runs:
            required = (
                config.imported_required_run_tables
                if run in imported
                else config.required_run_tables
            )
            if name in required and run not in present:
                detail = f"run {run}: no rows in {name}"
                failures[run].append(RowFailure("run_has_rows", "run_id", detail))
                bad.append(detail)
    return _outcome("runs", "cross_table", "run_has_rows", "run_id", len(runs), bad)


def _check_layer_sum(alive, failures, config: ValidationConfig) -> ExpectationOutcome:
    """Rule ``layer_sum_within_iteration`` on instrumented steps."""
    keys = ["run_id", "rank", "step"]
    layers = alive["layer_timings"]
    sums = (
        layers.assign(_ms=layers["forward_ms"] + layers["backward_ms"])
        .groupby(keys, sort=False)["_ms"]
        .sum()
        .rename("layer_sum_ms")
        .reset_index()
    )
    iters = alive["iteration_timings"]
    iters = iters.loc[iters["phase"] == "instrumented", keys + ["iteration_ms"]]
    joined = sums.merge(iters, on=keys, how="inner")
    over = joined["layer_sum_ms"] > joined["iteration_ms"] * (1.0 + config.layer_sum_tolerance)
    bad = []
    for row in joined.loc[over].drop_duplicates("run_id").itertuples(index=False):
        detail = (
            f"run {row.run_id} rank {row.rank} step {row.step}: layer forward+backward sum "
            f"{row.layer_sum_ms:.4g} ms > iteration {row.iteration_ms:.4g} ms "
            f"x (1 + {config.layer_sum_tolerance:g})"
        )
        failures[row.run_id].append(
            RowFailure("layer_sum_within_iteration", "forward_ms+backward_ms", detail)
        )
        bad.append(detail)
    return _outcome(
        "layer_timings",
        "cross_table",
        "layer_sum_within_iteration",
        "forward_ms+backward_ms",
        joined["run_id"].nunique(),
        bad,
    )


def _check_allreduce(alive, failures, config: ValidationConfig) -> ExpectationOutcome:
    """Rule ``allreduce_bytes_match_params`` for training runs with world size > 1."""
    workloads = alive["workloads"].set_index("workload_id")
    layers = alive["layer_timings"]
    params = (
        layers.drop_duplicates(["workload_id", "layer_index"])
        .groupby("workload_id")["params"]
        .sum()
    )
    allreduce = alive["allreduce_timings"]
    totals = allreduce.groupby(["run_id", "rank", "step"], sort=False)["allreduce_bytes"].sum()
    by_run = {run: grp for run, grp in totals.groupby(level="run_id", sort=False)}
    checked, bad = 0, []
    tol = config.allreduce_bytes_tolerance
    for run, wid in zip(alive["runs"]["run_id"], alive["runs"]["workload_id"], strict=True):
        spec = workloads.loc[wid]
        if spec["mode"] != "train" or int(spec["world_size"]) <= 1 or not _all_reduces(spec):
            continue
        checked += 1
        n_params = float(params.get(wid, 0))
        per_param = config.grad_bytes_per_param or PRECISION_BYTES[spec["precision"]]
        expected = per_param * n_params
        steps = by_run.get(run)
        if steps is None or steps.empty:
            detail = f"run {run}: no all-reduce rows (expected {expected:.0f} bytes per step)"
        else:
            off = (steps - expected).abs() > tol * expected
            if not off.any():
                continue
            (_, rank, step), total = next(iter(steps[off].items()))
            detail = (
                f"run {run} rank {rank} step {step}: {total:.0f} all-reduce bytes, expected "
                f"{expected:.0f} ({per_param} x {n_params:.0f} params) "
                f"+/- {tol:.0%}"
            )
        failures[run].append(RowFailure("allreduce_bytes_match_params", "allreduce_bytes", detail))
        bad.append(detail)
    return _outcome(
        "allreduce_timings",
        "cross_table",
        "allreduce_bytes_match_params",
        "allreduce_bytes",
        checked,
        bad,
    )


def _layout_value(spec: pd.Series, name: str, default):
    """A layout field of a workload row (absent or empty: the plain-DDP default)."""
    value = spec.get(name, default)
    return default if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _all_reduces(spec: pd.Series) -> bool:
    """Whether the layout all-reduces every gradient over the ranks (plain DDP and ZeRO-1).

    FSDP/ZeRO-2 reduce-scatter instead, and a tensor- or pipeline-parallel rank holds only its
    shard or stage (their collectives are in ``collective_timings``).
    """
    return (
        _layout_value(spec, "sharding", "none") in ("none", "zero1")
        and int(_layout_value(spec, "tp_size", 1)) == 1
        and int(_layout_value(spec, "pp_size", 1)) == 1
    )


def _check_interference(alive, failures) -> ExpectationOutcome:
    """Rule ``interference``: the run was measured while the host was disturbed."""
    runs = alive["runs"]
    if "interference" not in runs.columns:
        return _outcome("runs", "cross_table", "interference", "interference", len(runs), [])
    bad = []
    disturbed = runs[runs["interference"].fillna(False).astype(bool)]
    for row in disturbed.to_dict("records"):
        figures = ", ".join(
            f"{k} {row[k]:.3g}"
            for k in (
                "probe_gemm_drift",
                "probe_memory_drift",
                "probe_allreduce_drift",
                "foreign_load_cores",
            )
            if k in row and row[k] == row[k] and row[k] is not None
        )
        attempts = row.get("attempts", 1)
        detail = f"run {row['run_id']}: disturbed after {attempts} attempt(s): {figures}"
        failures[row["run_id"]].append(RowFailure("interference", "interference", detail))
        bad.append(detail)
    return _outcome("runs", "cross_table", "interference", "interference", len(runs), bad)


def lost_row_failures(
    frames: dict[str, pd.DataFrame], logs: dict[str, FailureLog]
) -> tuple[list[ExpectationOutcome], dict[str, list[RowFailure]]]:
    """Rule ``run_complete``: a run whose per-rank rows were partly quarantined is incomplete.

    Args:
        frames: all six tables (``RangeIndex``), by name.
        logs: their failure logs after the row-level and reference checks.

    Returns:
        ``(outcomes, failures)``: one outcome per per-rank table and, per run still alive (its
        ``runs`` row not quarantined), the reason naming the table, the first lost row (rank,
        step, layer...) and why it was lost.
    """
    runs = frames["runs"]
    dead = set(runs["run_id"].iloc[sorted(logs["runs"].rows)])
    alive_runs = set(runs["run_id"]) - dead
    failures: dict[str, list[RowFailure]] = defaultdict(list)
    outcomes = []
    for name in RUN_TABLE_NAMES:
        frame, bad = frames[name], []
        lost: dict[str, list[tuple[int, list[RowFailure]]]] = defaultdict(list)
        for position, row_failures in logs[name].items():
            run = frame["run_id"].iloc[position]
            if run in alive_runs:
                lost[run].append((position, row_failures))
        for run, rows in lost.items():
            position, row_failures = rows[0]
            where = " ".join(
                f"{key} {format_value(frame[key].iloc[position])}"
                for key in _ROW_KEYS
                if key in frame.columns
            )
            why = "; ".join(f"{f.expectation} on {f.column}" for f in row_failures)
            detail = f"run {run}: {len(rows)} {name} row(s) quarantined, first {where} ({why})"
            failures[run].append(RowFailure(RUN_COMPLETE, name, detail))
            bad.append(detail)
        outcomes.append(_outcome(name, "cross_table", RUN_COMPLETE, "run_id", len(alive_runs), bad))
    return outcomes, dict(failures)


def _first_missing(frame: pd.DataFrame, axes: dict[str, list]) -> str | None:
    """The first cell of the full grid ``axes`` that ``frame`` lacks, or None when complete."""
    expected = math.prod(len(v) for v in axes.values())
    if len(frame.drop_duplicates(list(axes))) == expected:
        return None
    have = set(frame[list(axes)].itertuples(index=False, name=None))
    grid = pd.MultiIndex.from_product(list(axes.values()))
    cell = next(c for c in grid if c not in have)
    return " ".join(f"{k} {v}" for k, v in zip(axes, cell, strict=True))


def _check_steps_complete(alive, failures) -> ExpectationOutcome:
    """Rule ``run_complete`` on the surviving rows: full rank x step x layer/bucket grids."""
    iters = alive["iteration_timings"]
    tables = {
        "layer_timings": alive["layer_timings"],
        "allreduce_timings": alive["allreduce_timings"],
        "instrumented": iters[iters["phase"] == "instrumented"],
        "label": iters[iters["phase"] == "label"],
    }
    groups = {
        name: dict(tuple(frame.groupby("run_id", sort=False))) for name, frame in tables.items()
    }
    empty = {name: frame.iloc[0:0] for name, frame in tables.items()}
    runs, bad = list(alive["runs"]["run_id"]), []
    for run in runs:
        g = {name: groups[name].get(run, empty[name]) for name in tables}
        ranks = sorted({int(r) for name in tables for r in g[name]["rank"]})
        timed = ("layer_timings", "instrumented")
        steps = sorted({int(s) for name in timed for s in g[name]["step"]})
        detail = None
        layers = g["layer_timings"]
        if len(layers) and steps:
            axes = {"rank": ranks, "step": steps}
            detail = _layer_grid_missing(layers, ranks, steps)
            if detail is None:
                missing = _first_missing(g["instrumented"], axes)
                detail = missing and f"iteration_timings (instrumented) lacks {missing}"
            buckets = g["allreduce_timings"]
            if detail is None and len(buckets):
                indices = list(range(int(buckets["bucket_index"].max()) + 1))
                missing = _first_missing(buckets, {**axes, "bucket_index": indices})
                detail = missing and f"allreduce_timings lacks {missing}"
        if detail is None and ranks:
            label = g["label"]
            present = sorted({int(s) for s in label["step"]})
            if not present:
                detail = "iteration_timings has no label iteration"
            else:
                span = list(range(present[0], present[-1] + 1))
                missing = _first_missing(label, {"rank": ranks, "step": span})
                detail = missing and f"iteration_timings (label) lacks {missing}"
        if detail:
            detail = f"run {run}: {detail}"
            failures[run].append(RowFailure(RUN_COMPLETE, "step", detail))
            bad.append(detail)
    return _outcome("runs", "cross_table", RUN_COMPLETE, "step", len(runs), bad)


def _layer_grid_missing(layers: pd.DataFrame, ranks: list[int], steps: list[int]) -> str | None:
    """The first missing cell of a run's layer rows, or None.

    Every rank times every ``layer_index`` ``0..max`` at every step; under pipeline
    parallelism (rows with ``micro_batch``) each rank times its own stage's consecutive layers,
    each at every step and for every micro-batch.
    """
    if "micro_batch" not in layers or layers["micro_batch"].isna().all():
        indices = list(range(int(layers["layer_index"].max()) + 1))
        missing = _first_missing(layers, {"rank": ranks, "step": steps, "layer_index": indices})
        return missing and f"layer_timings lacks {missing}"
    micro = list(range(int(layers["micro_batch"].max()) + 1))
    for rank in ranks:
        own = layers[layers["rank"] == rank]
        if own.empty:
            return f"layer_timings lacks rank {rank}"
        indices = list(range(int(own["layer_index"].min()), int(own["layer_index"].max()) + 1))
        axes = {"step": steps, "layer_index": indices, "micro_batch": micro}
        missing = _first_missing(own, axes)
        if missing:
            return f"layer_timings lacks rank {rank} {missing}"
    return None


def _epoch_frame(alive) -> pd.DataFrame:
    """Epoch rows joined with their workload and their rank's median label iteration."""
    iters = alive["iteration_timings"]
    label = iters[iters["phase"] == "label"]
    median = label.groupby(["run_id", "rank"])["iteration_ms"].median().rename("median_ms")
    workloads = alive["workloads"]
    spec = workloads[["workload_id", "batch_size", "world_size", "dataset_size"]].copy()
    spec = spec.rename(columns={"dataset_size": "workload_dataset_size"})
    # Data-parallel replicas: the ranks of a tensor- or pipeline-parallel group share samples.
    replicas = workloads["dp_size"] if "dp_size" in workloads else spec["world_size"]
    spec["replicas"] = replicas.fillna(spec["world_size"]).astype(int)
    epochs = alive["epochs"].merge(spec, on="workload_id", how="inner")
    return epochs.merge(median.reset_index(), on=["run_id", "rank"], how="left")


def _check_epoch_time(alive, failures, config: ValidationConfig) -> ExpectationOutcome:
    """Rule ``epoch_matches_iterations``: epoch_s / (steps x median iteration) within bounds."""
    epochs = _epoch_frame(alive)
    epochs = epochs[epochs["median_ms"].notna()]
    expected_s = epochs["steps_per_epoch"] * epochs["median_ms"] / 1000.0
    epochs = epochs.assign(expected_s=expected_s, ratio=epochs["epoch_s"] / expected_s)
    lo, hi = config.epoch_ratio_min, config.epoch_ratio_max
    off = epochs[(epochs["ratio"] < lo) | (epochs["ratio"] > hi)]
    bad = []
    for row in off.drop_duplicates("run_id").itertuples(index=False):
        detail = (
            f"run {row.run_id} rank {int(row.rank)}: epoch_s {row.epoch_s:.4g} s vs "
            f"steps_per_epoch {row.steps_per_epoch} x median label iteration "
            f"{row.median_ms:.4g} ms = {row.expected_s:.4g} s: ratio {row.ratio:.4g} "
            f"outside [{lo:g}, {hi:g}]"
        )
        failures[row.run_id].append(RowFailure("epoch_matches_iterations", "epoch_s", detail))
        bad.append(detail)
    return _outcome(
        "epochs",
        "cross_table",
        "epoch_matches_iterations",
        "epoch_s",
        epochs["run_id"].nunique(),
        bad,
    )


def _check_steps_per_epoch(alive, failures) -> ExpectationOutcome:
    """Rule ``steps_per_epoch_matches_dataset``: ceil(dataset / (batch x world)) steps."""
    epochs = _epoch_frame(alive)
    bad, seen = [], set()
    for row in epochs.itertuples(index=False):
        dataset, batch, world = (
            int(row.workload_dataset_size),
            int(row.batch_size),
            int(row.replicas),
        )
        replicas = "world_size" if world == int(row.world_size) else "dp_size"
        expected = math.ceil(dataset / (batch * world))
        if int(row.dataset_size) != dataset:
            detail = (
                f"run {row.run_id} rank {int(row.rank)}: epoch dataset_size {row.dataset_size} != "
                f"workload dataset_size {dataset}: ratio {row.dataset_size / dataset:.4g}"
            )
        elif int(row.steps_per_epoch) != expected:
            detail = (
                f"run {row.run_id} rank {int(row.rank)}: steps_per_epoch {row.steps_per_epoch} != "
                f"ceil(dataset_size {dataset} / (batch_size {batch} x {replicas} {world})) = "
                f"{expected}: ratio {row.steps_per_epoch / expected:.4g}"
            )
        else:
            continue
        if row.run_id not in seen:
            seen.add(row.run_id)
            failures[row.run_id].append(
                RowFailure("steps_per_epoch_matches_dataset", "steps_per_epoch", detail)
            )
            bad.append(detail)
    return _outcome(
        "epochs",
        "cross_table",
        "steps_per_epoch_matches_dataset",
        "steps_per_epoch",
        epochs["run_id"].nunique(),
        bad,
    )


def run_failures(
    alive: dict[str, pd.DataFrame], config: ValidationConfig
) -> tuple[list[ExpectationOutcome], dict[str, list[RowFailure]]]:
    """Check the run rules on the rows that passed every row-level and reference check.

    Args:
        alive: the six tables restricted to surviving rows.
        config: tolerances and required tables.

    Returns:
        ``(outcomes, failures)``: one outcome per rule (and per table for the rank rule) and,
        per failing run id, the reasons; every row of such a run is to be quarantined.
    """
    failures: dict[str, list[RowFailure]] = defaultdict(list)
    outcomes = [
        _check_world_size(alive, failures),
        *_check_ranks(alive, failures),
        _check_required(alive, failures, config),
        _check_layer_sum(alive, failures, config),
        _check_allreduce(alive, failures, config),
        _check_steps_complete(alive, failures),
        _check_epoch_time(alive, failures, config),
        _check_steps_per_epoch(alive, failures),
        _check_interference(alive, failures),
    ]
    return outcomes, dict(failures)


def high_cv_flags(runs: pd.DataFrame, config: ValidationConfig) -> tuple[pd.Series, list[Flag]]:
    """Flag (keep) runs whose iteration-time CV exceeds ``max_iteration_cv``.

    Args:
        runs: validated runs.
        config: the threshold.

    Returns:
        ``(flag_high_cv column, flags)``.
    """
    mask = runs["iteration_cv"].astype(float) > config.max_iteration_cv
    flags = [
        Flag(
            "runs",
            str(run),
            "flag_high_cv",
            "iteration_cv",
            format_value(cv),
            f"{config.max_iteration_cv:g}",
        )
        for run, cv in zip(runs.loc[mask, "run_id"], runs.loc[mask, "iteration_cv"], strict=True)
    ]
    return mask.astype(bool).rename("flag_high_cv"), flags
