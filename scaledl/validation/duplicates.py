"""Exact duplicate rows: keep the first copy, quarantine the others as ``duplicate``.

A row equal to an earlier row in every column (a part written twice, a table concatenated with
itself) carries no new information: the first copy stays in the data and each later copy is
quarantined with ``failed_expectation="duplicate"``, ``failed_column="*"`` (all columns) and
``failed_value="copy of row N"`` (rows counted from 1 in the file). Rows that share a key but
differ in some value are *conflicting*, not duplicates: the uniqueness expectations quarantine
every copy, since nothing says which one is right.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scaledl.validation.quarantine import QUARANTINE_COLUMNS
from scaledl.validation.report import ExpectationOutcome

DUPLICATE = "duplicate"


def split_duplicates(
    table: str, frame: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame, ExpectationOutcome]:
    """Separate the later copies of exact duplicate rows from a table.

    Args:
        table: table name (for the outcome).
        frame: the table as read (``RangeIndex``; NaN equals NaN here).

    Returns:
        ``(kept, copies, outcome)``: ``kept`` holds every first copy in file order with a fresh
        ``RangeIndex``; ``copies`` the later copies with the quarantine columns; ``outcome`` the
        rule's report line.
    """
    if frame.empty:
        later = np.zeros(0, dtype=bool)
        first = np.zeros(0, dtype=np.int64)
    else:
        groups = frame.groupby(list(frame.columns), dropna=False, sort=False).ngroup()
        positions = pd.Series(np.arange(len(frame)), index=frame.index)
        first = positions.groupby(groups.to_numpy()).transform("min").to_numpy()
        later = first != np.arange(len(frame))
    copies = frame.loc[later].reset_index(drop=True)
    values = [f"copy of row {p + 1}" for p in first[later]]
    copies[QUARANTINE_COLUMNS[0]] = pd.Series([DUPLICATE] * len(copies), dtype=object)
    copies[QUARANTINE_COLUMNS[1]] = pd.Series(["*"] * len(copies), dtype=object)
    copies[QUARANTINE_COLUMNS[2]] = pd.Series(values, dtype=object)
    outcome = ExpectationOutcome(
        table=table,
        level="row",
        expectation=DUPLICATE,
        column="*",
        success=not later.any(),
        element_count=len(frame),
        unexpected_count=int(later.sum()),
        examples=values[:5],
        engine="pandas",
    )
    return frame.loc[~later].reset_index(drop=True), copies, outcome
