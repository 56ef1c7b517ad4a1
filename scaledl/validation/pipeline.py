"""Entry points: :func:`validate_profiles` and :func:`validate_design`.

Order of the profile validation:

1. read every table (unreadable or missing file: table-level failure);
2. table-level GX suite per table: required columns, non-empty (``allreduce_timings`` may be
   empty), dtypes. Any table-level failure writes the HTML report and raises
   :class:`ValidationError` listing every such failure (file, table, column, expectation);
3. exact duplicate rows: the first copy stays, later copies are quarantined as ``duplicate``
   (:mod:`scaledl.validation.duplicates`);
4. row-level GX suite per table (+ the pandas integrality check of integer columns): failing
   rows are quarantined, valid rows continue;
5. reference rules (unknown ids, quarantined or failed parent run/workload) - row-level;
6. run rules (see :mod:`scaledl.validation.cross_table`): a run that lost a row to steps 4-5
   is incomplete, and the surviving rows must pass the completeness, timing, all-reduce and
   epoch rules; a failing run is quarantined whole, in every table;
7. high-CV runs are flagged (``flag_high_cv`` column of the validated ``runs`` table);
   the optional tables (:data:`~scaledl.profiles.schemas.OPTIONAL_PROFILE_TABLES`:
   ``operator_timings``), when their file exists, get the same table-level, duplicate,
   row-level and reference checks and lose the rows of quarantined runs (a stale output of one
   that no longer exists is removed);
8. valid rows go to ``out_dir/<table>.parquet``, quarantined rows (original columns plus
   ``failed_expectation``, ``failed_column``, ``failed_value``) to
   ``quarantine_dir/<table>.parquet`` (written for every table, possibly empty, so no stale file
   remains), and the report to ``report_dir/index.html``. All writes are atomic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from scaledl.io.atomic import write_parquet_atomic
from scaledl.profiles.schemas import (
    DESIGN,
    OPTIONAL_PROFILE_TABLES,
    PROFILE_TABLES,
    TableSpec,
)
from scaledl.profiles.tables import RUN_TABLE_NAMES
from scaledl.validation.config import ValidationConfig
from scaledl.validation.cross_table import (
    high_cv_flags,
    lost_row_failures,
    reference_failures,
    run_failures,
)
from scaledl.validation.duplicates import DUPLICATE, split_duplicates
from scaledl.validation.errors import TableFailure, ValidationError
from scaledl.validation.gx_runner import GxRunner
from scaledl.validation.quarantine import FailureLog, RowFailure, format_value
from scaledl.validation.report import ExpectationOutcome, TableSummary, ValidationReport, write_html
from scaledl.validation.suites import (
    INTEGRAL,
    integral_failures,
    restore_int_dtypes,
    row_level_suite,
    table_level_suite,
)
from scaledl.validation.tables import read_table


def _table_level(
    runner: GxRunner, spec: TableSpec, frame: pd.DataFrame, path: Path, report: ValidationReport
) -> list[TableFailure]:
    """Run the table-level suite; record outcomes and return the failures."""
    result = runner.run(spec.name, frame, table_level_suite(spec, frame))
    report.expectations.extend(result.outcomes)
    return [
        TableFailure(str(path), spec.name, column, expectation, detail)
        for column, expectation, detail in result.errors
    ]


def _row_level(
    runner: GxRunner,
    spec: TableSpec,
    frame: pd.DataFrame,
    path: Path,
    config: ValidationConfig,
    report: ValidationReport,
) -> tuple[FailureLog, list[TableFailure]]:
    """Run the row-level suite and the integrality check; return the failure log."""
    log = FailureLog(spec.name)
    result = runner.run(spec.name, frame, row_level_suite(spec, list(frame.columns), config))
    report.expectations.extend(result.outcomes)
    log.add_each(result.row_failures)
    for column, (positions, checked) in integral_failures(spec, frame).items():
        values = [format_value(v) for v in frame[column].to_numpy()[positions]]
        log.add_each(
            (p, RowFailure(INTEGRAL, column, v)) for p, v in zip(positions, values, strict=True)
        )
        report.expectations.append(
            ExpectationOutcome(
                table=spec.name,
                level="row",
                expectation=INTEGRAL,
                column=column,
                success=not len(positions),
                element_count=checked,
                unexpected_count=len(positions),
                examples=values[:5],
                engine="pandas",
            )
        )
    errors = [
        TableFailure(str(path), spec.name, column, expectation, detail)
        for column, expectation, detail in result.errors
    ]
    return log, errors


def _fail(report: ValidationReport, failures: list[TableFailure], report_dir: Path) -> None:
    """Attach table-level failures to the report, write it, and raise."""
    report.table_failures.extend(failures)
    write_html(report, report_dir)
    raise ValidationError(failures, report=report)


def validate_profiles(
    profiles_dir: Path,
    out_dir: Path,
    quarantine_dir: Path,
    report_dir: Path,
    config: ValidationConfig | None = None,
) -> ValidationReport:
    """Validate the six profile tables, quarantine bad rows and write the valid ones.

    Args:
        profiles_dir: directory holding ``workloads``, ``runs``, ``layer_timings``,
            ``allreduce_timings``, ``iteration_timings`` and ``epochs`` as ``<table>.parquet``.
        out_dir: destination of the valid rows, same file names.
        quarantine_dir: destination of the quarantined rows, ``<table>.parquet``.
        report_dir: destination of ``index.html``.
        config: thresholds and tolerances (defaults when ``None``).

    Returns:
        The :class:`ValidationReport` (per-table counts, expectation outcomes, flags).

    Raises:
        ValidationError: a table-level failure (missing or unreadable file, missing column,
            unusable dtype, empty table); the message names file, table, column and
            expectation, and the report page is written before raising.
    """
    config = config or ValidationConfig()
    profiles_dir, out_dir = Path(profiles_dir), Path(out_dir)
    quarantine_dir, report_dir = Path(quarantine_dir), Path(report_dir)
    report = ValidationReport(
        config=config.model_dump(mode="json"),
        paths={
            "profiles": str(profiles_dir),
            "validated": str(out_dir),
            "quarantine": str(quarantine_dir),
            "report": str(report_dir / "index.html"),
        },
    )
    runner = GxRunner()
    optional = {
        name: spec
        for name, spec in OPTIONAL_PROFILE_TABLES.items()
        if (profiles_dir / f"{name}.parquet").exists()
    }
    for name in set(OPTIONAL_PROFILE_TABLES) - set(optional):
        for stale in (out_dir / f"{name}.parquet", quarantine_dir / f"{name}.parquet"):
            stale.unlink(missing_ok=True)
    tables = {**PROFILE_TABLES, **optional}
    paths = {name: profiles_dir / f"{name}.parquet" for name in tables}
    frames = _read_usable(runner, tables, paths, report, report_dir)
    copies: dict[str, pd.DataFrame] = {}
    for name in tables:
        frames[name], copies[name], outcome = split_duplicates(name, frames[name])
        report.expectations.append(outcome)

    logs: dict[str, FailureLog] = {}
    failures: list[TableFailure] = []
    for name, spec in tables.items():
        logs[name], errors = _row_level(runner, spec, frames[name], paths[name], config, report)
        failures.extend(errors)
    if failures:
        _fail(report, failures, report_dir)
    _quarantine_bad_runs(frames, logs, tuple(optional), config, report)
    for name, spec in tables.items():
        report.tables[name] = _write_split(
            spec, frames[name], copies[name], logs[name], paths[name],
            (out_dir, quarantine_dir), config, report,
        )  # fmt: skip
    write_html(report, report_dir)
    return report


def _write_split(
    spec: TableSpec,
    frame: pd.DataFrame,
    copies: pd.DataFrame,
    log: FailureLog,
    source: Path,
    dirs: tuple[Path, Path],
    config: ValidationConfig,
    report: ValidationReport,
) -> TableSummary:
    """Write a table's valid rows to ``dirs[0]`` and its quarantined ones to ``dirs[1]``.

    Args:
        spec: the table's schema.
        frame: its rows without the later copies of duplicates.
        copies: those copies (quarantined as ``duplicate``).
        log: the failures of ``frame``'s rows.
        source: the file the table was read from.
        dirs: the validated and quarantine folders.
        config: validation settings (the high-CV flag of ``runs``).
        report: receives the flags.

    Returns:
        The table's counts.
    """
    valid, quarantined = log.split(frame)
    if len(copies):
        quarantined = pd.concat([quarantined, copies], ignore_index=True)
    valid = restore_int_dtypes(spec, valid)
    if spec.name == "runs":
        valid["flag_high_cv"], flags = high_cv_flags(valid, config)
        report.flags.extend(flags)
    write_parquet_atomic(valid, dirs[0] / f"{spec.name}.parquet")
    write_parquet_atomic(quarantined, dirs[1] / f"{spec.name}.parquet")
    reasons = log.reasons()
    if len(copies):
        reasons[DUPLICATE] = len(copies)
    return TableSummary(
        file=str(source), rows_in=len(frame) + len(copies), passed=len(valid),
        quarantined=len(quarantined), quarantine_reasons=reasons,
    )  # fmt: skip


def _read_usable(
    runner: GxRunner,
    tables: dict[str, TableSpec],
    paths: dict[str, Path],
    report: ValidationReport,
    report_dir: Path,
) -> dict[str, pd.DataFrame]:
    """Every table read and passing its table-level suite.

    Raises:
        ValidationError: a table is unreadable or fails a table-level expectation (the report
            page is written first).
    """
    frames: dict[str, pd.DataFrame] = {}
    failures: list[TableFailure] = []
    for name in tables:
        try:
            frames[name] = read_table(paths[name], name)
        except ValidationError as exc:
            failures.extend(exc.failures)
    if failures:
        _fail(report, failures, report_dir)
    for name, spec in tables.items():
        failures.extend(_table_level(runner, spec, frames[name], paths[name], report))
    if failures:
        _fail(report, failures, report_dir)
    return frames


def _quarantine_bad_runs(
    frames: dict[str, pd.DataFrame],
    logs: dict[str, FailureLog],
    optional: tuple[str, ...],
    config: ValidationConfig,
    report: ValidationReport,
) -> None:
    """Log every row of a run that lost rows or breaks a cross-table rule (whole runs go)."""
    report.expectations.extend(reference_failures(frames, logs, (*RUN_TABLE_NAMES, *optional)))
    lost_outcomes, bad_runs = lost_row_failures(frames, logs)
    report.expectations.extend(lost_outcomes)
    alive = {name: _alive(frames[name], logs[name]) for name in PROFILE_TABLES}
    for name in ("runs", *RUN_TABLE_NAMES):  # incomplete runs are judged by the rule that lost rows
        alive[name] = alive[name][~alive[name]["run_id"].isin(bad_runs.keys())]
    outcomes, rule_failures = run_failures(alive, config)
    report.expectations.extend(outcomes)
    for run, reasons in rule_failures.items():
        bad_runs.setdefault(run, []).extend(reasons)
    for name in ("runs", *RUN_TABLE_NAMES, *optional):
        run_ids = frames[name]["run_id"]
        positions = np.flatnonzero(run_ids.isin(bad_runs.keys()).to_numpy())
        logs[name].add_each((p, reason) for p in positions for reason in bad_runs[run_ids.iloc[p]])


def _alive(frame: pd.DataFrame, log: FailureLog) -> pd.DataFrame:
    """Return the rows of ``frame`` that no check has failed so far."""
    keep = np.ones(len(frame), dtype=bool)
    keep[sorted(log.rows)] = False
    return frame.loc[keep]


def validate_design(path: Path) -> pd.DataFrame:
    """Validate the design table; the design is an input, so every failure is fatal.

    Checks: readable file, required workload spec columns plus ``sampler`` and ``seed``,
    non-empty, dtypes, no nulls where required, positive sizes, known family / precision /
    mode / backend, unique ``workload_id`` when present.

    Args:
        path: ``design.parquet``.

    Returns:
        The design table (integer columns as ``int64`` where they hold no null).

    Raises:
        ValidationError: any failed check; the message names file, table, column, expectation
            and up to five offending values with their row numbers.
    """
    path = Path(path)
    frame = read_table(path, DESIGN.name)
    runner = GxRunner()
    report = ValidationReport()
    failures = _table_level(runner, DESIGN, frame, path, report)
    if failures:
        raise ValidationError(failures)
    log, failures = _row_level(runner, DESIGN, frame, path, ValidationConfig(), report)
    by_check: dict[tuple[str, str], list[str]] = {}
    for position, row_failures in log.items():
        for failure in row_failures:
            by_check.setdefault((failure.column, failure.expectation), []).append(
                f"row {position}: {failure.value}"
            )
    failures += [
        TableFailure(
            str(path),
            DESIGN.name,
            column,
            expectation,
            f"{len(rows)} row(s): " + "; ".join(rows[:5]),
        )
        for (column, expectation), rows in by_check.items()
    ]
    if failures:
        raise ValidationError(failures)
    return restore_int_dtypes(DESIGN, frame)
