"""Collect row-level failures and split a table into valid and quarantined rows."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

QUARANTINE_COLUMNS = ("failed_expectation", "failed_column", "failed_value")


@dataclass(frozen=True)
class RowFailure:
    """Why one row failed.

    Attributes:
        expectation: expectation type or rule name.
        column: offending column.
        value: offending value, as a string.
    """

    expectation: str
    column: str
    value: str


def format_value(value: object) -> str:
    """Return a value as a short string for ``failed_value``.

    Args:
        value: any cell value.

    Returns:
        ``"null"`` for missing values, otherwise ``str(value)``.
    """
    if value is None or (isinstance(value, float | np.floating) and np.isnan(value)):
        return "null"
    if value is pd.NA or value is pd.NaT:
        return "null"
    return str(value)


class FailureLog:
    """Row failures of one table, by positional row index.

    A row may fail several expectations; it is quarantined once, with all reasons joined
    by ``"; "`` in the ``failed_*`` columns.
    """

    def __init__(self, table: str) -> None:
        self.table = table
        self._rows: dict[int, list[RowFailure]] = defaultdict(list)

    def add(self, rows: Iterable[int], failure: RowFailure) -> None:
        """Record the same failure for several rows.

        Args:
            rows: positional row indices.
            failure: the failure.
        """
        for row in rows:
            self._rows[int(row)].append(failure)

    def add_each(self, items: Iterable[tuple[int, RowFailure]]) -> None:
        """Record one failure per row.

        Args:
            items: ``(row, failure)`` pairs.
        """
        for row, failure in items:
            self._rows[int(row)].append(failure)

    @property
    def rows(self) -> set[int]:
        """Positional indices of the failed rows."""
        return set(self._rows)

    def items(self) -> list[tuple[int, list[RowFailure]]]:
        """Return the failed rows and their failures, by row position.

        Returns:
            ``(position, failures)`` pairs sorted by position.
        """
        return [(row, list(self._rows[row])) for row in sorted(self._rows)]

    def reasons(self) -> dict[str, int]:
        """Return quarantined rows per expectation (a row counts once per expectation).

        Returns:
            Expectation name to row count.
        """
        counts: Counter[str] = Counter()
        for failures in self._rows.values():
            counts.update({f.expectation for f in failures})
        return dict(counts)

    def split(self, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Split a table into valid rows and quarantined rows.

        Args:
            frame: the table, with a ``RangeIndex`` (positions are row indices).

        Returns:
            ``(valid, quarantined)``; ``quarantined`` holds every original column plus
            ``failed_expectation``, ``failed_column`` and ``failed_value`` (strings). Both have a
            fresh ``RangeIndex`` and ``len(valid) + len(quarantined) == len(frame)``.
        """
        bad = np.zeros(len(frame), dtype=bool)
        order = sorted(self._rows)
        bad[order] = True
        valid = frame.loc[~bad].reset_index(drop=True)
        quarantined = frame.iloc[order].reset_index(drop=True)
        per_row = [list(dict.fromkeys(self._rows[r])) for r in order]
        for name in QUARANTINE_COLUMNS:
            field = name.removeprefix("failed_")
            quarantined[name] = pd.Series(
                ["; ".join(getattr(f, field) for f in failures) for failures in per_row],
                dtype=object,
            )
        return valid, quarantined
