"""The validation report: per-table counts, expectation outcomes, flags and its HTML page."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from scaledl.io.atomic import write_atomic
from scaledl.io.render import render
from scaledl.validation.errors import TableFailure

Level = Literal["table", "row", "cross_table"]


@dataclass
class ExpectationOutcome:
    """The result of one expectation (or pandas rule) on one table.

    Attributes:
        table: table name (``"cross_table"`` rules name the table they check, or ``runs``).
        level: ``table`` (failure stops the pipeline), ``row`` (failing rows are quarantined)
            or ``cross_table`` (failing runs are quarantined in every table).
        expectation: expectation type (GX name) or rule name.
        column: checked column(s), or ``None``.
        success: no failure.
        element_count: rows (or runs, for run-level rules) checked.
        unexpected_count: failing rows (or runs).
        examples: up to five failing values, as strings.
        engine: ``great_expectations`` or ``pandas``.
    """

    table: str
    level: Level
    expectation: str
    column: str | None
    success: bool
    element_count: int
    unexpected_count: int
    examples: list[str] = field(default_factory=list)
    engine: str = "great_expectations"


@dataclass
class TableSummary:
    """Row counts of one table.

    Attributes:
        file: input file.
        rows_in: rows read.
        passed: rows written to the validated output.
        quarantined: rows written to quarantine; ``passed + quarantined == rows_in``.
        quarantine_reasons: quarantined rows per failed expectation.
    """

    file: str
    rows_in: int
    passed: int
    quarantined: int
    quarantine_reasons: dict[str, int] = field(default_factory=dict)


@dataclass
class Flag:
    """A kept row that deserves attention (e.g. a noisy run).

    Attributes:
        table: table of the flagged row.
        key: its id (``run_id``).
        flag: flag name (``flag_high_cv``).
        column: column the flag is about.
        value: the value, as a string.
        threshold: the threshold it exceeded, as a string.
    """

    table: str
    key: str
    flag: str
    column: str
    value: str
    threshold: str


@dataclass
class ValidationReport:
    """Everything one validation produced.

    Attributes:
        tables: per-table row counts, by table name.
        expectations: every expectation outcome, in evaluation order.
        flags: flagged (kept) rows.
        table_failures: table-level failures (non-empty only on the report attached to a
            :class:`~scaledl.validation.errors.ValidationError`).
        config: the configuration used, as a dict.
        paths: the input and output directories and the report file.
        created_at: ISO timestamp (UTC).
    """

    tables: dict[str, TableSummary] = field(default_factory=dict)
    expectations: list[ExpectationOutcome] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)
    table_failures: list[TableFailure] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    @property
    def passed(self) -> bool:
        """Whether every expectation held: no table-level failure and no quarantined row."""
        return not self.table_failures and all(e.success for e in self.expectations)

    @property
    def quarantined_rows(self) -> int:
        """Total quarantined rows over all tables."""
        return sum(t.quarantined for t in self.tables.values())

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-serialisable builtins.

        Returns:
            A dict with ``passed``, ``tables``, ``expectations``, ``flags``,
            ``table_failures``, ``config``, ``paths`` and ``created_at``.
        """
        return {
            "passed": self.passed,
            "created_at": self.created_at,
            "tables": {name: asdict(t) for name, t in self.tables.items()},
            "expectations": [asdict(e) for e in self.expectations],
            "flags": [asdict(f) for f in self.flags],
            "table_failures": [f.to_dict() for f in self.table_failures],
            "config": self.config,
            "paths": self.paths,
        }


def _frame_html(frame: pd.DataFrame) -> str | None:
    """An HTML table of ``frame`` (values escaped by pandas), ``None`` when it is empty."""
    if frame.empty:
        return None
    return frame.to_html(index=False, escape=True, border=0, na_rep="")


def _tables(report: ValidationReport) -> dict[str, pd.DataFrame]:
    """The page's tables: table-level failures, row counts, expectations, flags, paths, config."""
    summary = pd.DataFrame(
        [
            {
                "table": name,
                "file": t.file,
                "rows in": t.rows_in,
                "passed": t.passed,
                "quarantined": t.quarantined,
                "quarantine reasons": "; ".join(
                    f"{k}: {v}" for k, v in sorted(t.quarantine_reasons.items())
                ),
            }
            for name, t in report.tables.items()
        ]
    )
    expectations = pd.DataFrame(
        [
            {
                "table": e.table,
                "level": e.level,
                "expectation": e.expectation,
                "column": e.column or "",
                "result": "pass" if e.success else "FAIL",
                "checked": e.element_count,
                "unexpected": e.unexpected_count,
                "examples": ", ".join(e.examples),
                "engine": e.engine,
            }
            for e in report.expectations
        ]
    )
    failed = (
        expectations.loc[expectations["result"] == "FAIL"] if len(expectations) else expectations
    )
    return {
        "failures": pd.DataFrame([f.to_dict() for f in report.table_failures]),
        "summary": summary,
        "failed": failed,
        "expectations": expectations,
        "flags": pd.DataFrame([asdict(f) for f in report.flags]),
        "paths": pd.DataFrame([{"what": k, "path": v} for k, v in report.paths.items()]),
        "config": pd.DataFrame([{"setting": k, "value": str(v)} for k, v in report.config.items()]),
    }


#: The page's sections: (title, table of :func:`_tables`, text when it is empty).
_SECTIONS = (
    ("Table-level failures", "failures", "None."),
    ("Tables", "summary", "No table was read."),
    ("Failed expectations", "failed", "None."),
    ("All expectations", "expectations", "No expectation was evaluated."),
    ("Flags (rows kept)", "flags", "None."),
    ("Paths", "paths", "None."),
    ("Configuration", "config", "Defaults."),
)


def render_html(report: ValidationReport) -> str:
    """Render the report as one self-contained HTML page (template ``validation.html.j2``).

    Args:
        report: the validation report.

    Returns:
        The HTML document.
    """
    tables = _tables(report)
    sections = [
        {"title": title, "table": _frame_html(tables[key]), "empty": empty}
        for title, key, empty in _SECTIONS
    ]
    return render(
        "validation.html.j2",
        status="PASSED" if report.passed else "FAILED",
        css_class="pass" if report.passed else "fail",
        quarantined=report.quarantined_rows,
        n_flags=len(report.flags),
        created_at=report.created_at,
        sections=sections,
    )


def write_html(report: ValidationReport, report_dir: Path) -> Path:
    """Write the report page to ``report_dir/index.html`` atomically.

    Args:
        report: the validation report.
        report_dir: destination directory (created).

    Returns:
        The written file.
    """
    path = Path(report_dir) / "index.html"
    write_atomic(path, render_html(report))
    return path
