"""Cross-table rules, checked with pandas and reported like expectations.

Two kinds of rules:

* **Reference rules** (:func:`reference_failures`) are row-level: a row whose ``workload_id`` or
  ``run_id`` is unknown, whose ``workload_id`` disagrees with its run, or whose parent row
  (workload, run) is quarantined, is quarantined itself. Rows of a run whose ``status`` is not
  ``ok`` are quarantined with the reason ``"run status failed"``.
* **Run rules** (:func:`run_failures`) judge a run as a whole: world size consistent with the
  workload, ranks exactly ``0..world_size-1`` in every per-rank table, rows present in every
  required table, per-layer forward + backward sum of an instrumented step not above its
  iteration time (beyond a tolerance), all-reduced bytes per step and rank of a training run
  with world size > 1 equal to gradient bytes x trainable parameters (sum of ``params`` over the
  workload's distinct ``layer_index``) within a tolerance; the gradient element is 4 bytes for
  fp32 and 2 for bf16/fp16 workloads (the profiler builds parameters in the workload's dtype).
  **A run is usable only whole**: when one of these fails, every row of the run, in every table
  (``runs`` included), is quarantined with the rule's name; the workload row is kept (other runs
  may use it).

A run the profiler's interference guard recorded as still disturbed after its retries
(``interference`` true: its calibration probes drifted from the host's baseline, or other
processes kept the cores busy) is quarantined whole under the rule ``interference``, with the
probe figures as the value. A run whose ``iteration_cv`` exceeds ``max_iteration_cv`` is flagged,
not quarantined.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from scaledl.validation.config import ValidationConfig
from scaledl.validation.quarantine import FailureLog, RowFailure, format_value
from scaledl.validation.report import ExpectationOutcome, Flag
from scaledl.validation.schemas import RUN_TABLES

RUN_STATUS_FAILED = "run status failed"
#: Bytes of one gradient element per workload precision.
GRAD_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


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
    frames: dict[str, pd.DataFrame], logs: dict[str, FailureLog]
) -> list[ExpectationOutcome]:
    """Quarantine rows whose parent is unknown, inconsistent, failed or quarantined.

    Args:
        frames: all six tables (``RangeIndex``), by name.
        logs: their failure logs, updated in place (parents are judged before children).

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
    for name in RUN_TABLES:
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
    for name in RUN_TABLES:
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


def _check_required(alive, failures, config: ValidationConfig) -> ExpectationOutcome:
    """Rule ``run_has_rows``: every run has rows in every required per-rank table."""
    runs = list(alive["runs"]["run_id"])
    bad = []
    for name in config.required_run_tables:
        present = set(alive[name]["run_id"])
        for run in runs:
            if run not in present:
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
        if spec["mode"] != "train" or int(spec["world_size"]) <= 1:
            continue
        checked += 1
        n_params = float(params.get(wid, 0))
        per_param = config.grad_bytes_per_param or GRAD_BYTES[spec["precision"]]
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
            for k in ("probe_gemm_drift", "probe_allreduce_drift", "foreign_load_cores")
            if k in row and row[k] == row[k] and row[k] is not None
        )
        attempts = row.get("attempts", 1)
        detail = f"run {row['run_id']}: disturbed after {attempts} attempt(s): {figures}"
        failures[row["run_id"]].append(RowFailure("interference", "interference", detail))
        bad.append(detail)
    return _outcome("runs", "cross_table", "interference", "interference", len(runs), bad)


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
