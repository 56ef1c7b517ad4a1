"""The table-level failure record and :class:`ValidationError`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class TableFailure:
    """One table-level failure: the whole table is unusable.

    Attributes:
        file: path of the file the table was read from.
        table: table name (the file stem).
        column: offending column, or ``None`` for a whole-table problem.
        expectation: the expectation (or read step) that failed.
        detail: what was observed.
    """

    file: str
    table: str
    column: str | None
    expectation: str
    detail: str

    def message(self) -> str:
        """Return a one-line human-readable description.

        Returns:
            ``"<file>: table '<table>', column '<column>': <expectation> failed (<detail>)"``.
        """
        column = f", column '{self.column}'" if self.column else ""
        where = f"{self.file}: table '{self.table}'{column}"
        return f"{where}: {self.expectation} failed ({self.detail})"

    def to_dict(self) -> dict[str, Any]:
        """Return the failure as a JSON-serialisable dict.

        Returns:
            The dataclass fields.
        """
        return asdict(self)


class ValidationError(ValueError):
    """A table-level validation failure that stops the pipeline.

    Attributes:
        failures: every table-level failure found, in table order.
        report: the :class:`~scaledl.validation.report.ValidationReport` written before raising
            (``None`` when the failure happened outside :func:`validate_profiles`).
    """

    def __init__(self, failures: list[TableFailure], report: Any = None) -> None:
        self.failures = list(failures)
        self.report = report
        lines = [f.message() for f in self.failures]
        super().__init__("table-level validation failed:\n  " + "\n  ".join(lines))
