"""Great Expectations suites built from the table specifications.

Two suites per table:

* the *table-level* suite: required columns exist, the table is not empty (unless allowed) and
  every column has a usable dtype. Any failure stops the pipeline.
* the *row-level* suite: not-null, value bounds, value sets and uniqueness. Failing rows are
  quarantined, the others continue.

Whether a value is integral is not expressible as a GX expectation on a float column, so
:func:`integral_failures` checks it with pandas and reports it in the same format.
"""

from __future__ import annotations

import great_expectations as gx
import great_expectations.expectations as gxe
import numpy as np
import pandas as pd

from scaledl.profiles.schemas import ColumnSpec, TableSpec
from scaledl.validation.config import ValidationConfig

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOAT_DTYPES = ["float16", "float32", "float64"]

#: Accepted dtypes per column kind. ``int`` accepts floats: an integer column with nulls reads
#: back from parquet as float64; its values are then checked to be integral.
TYPE_LISTS: dict[str, list[str]] = {
    "str": ["str"],
    "int": INT_DTYPES + FLOAT_DTYPES,
    "number": INT_DTYPES + FLOAT_DTYPES,
    "bool": ["bool"],
}

INTEGRAL = "expect_column_values_to_be_integral"


def _meta(level: str, column: str) -> dict[str, str]:
    """Return the metadata attached to each expectation (read back from its result)."""
    return {"level": level, "column": column}


def table_level_suite(spec: TableSpec, frame: pd.DataFrame) -> gx.ExpectationSuite:
    """Build the table-level suite of one table.

    Args:
        spec: the table specification.
        frame: the table; dtype expectations are built only for columns it has, and only when
            it has rows (an empty table carries no typed values).

    Returns:
        The suite named ``<table>.table``.
    """
    expectations: list = [
        gxe.ExpectColumnToExist(column=col.name, meta=_meta("table", col.name))
        for col in spec.columns
        if col.required
    ]
    if not spec.allow_empty:
        expectations.append(
            gxe.ExpectTableRowCountToBeBetween(min_value=1, meta=_meta("table", ""))
        )
    if len(frame):
        expectations += [
            gxe.ExpectColumnValuesToBeInTypeList(
                column=col.name, type_list=TYPE_LISTS[col.kind], meta=_meta("table", col.name)
            )
            for col in spec.columns
            if col.name in frame.columns
        ]
    # Passing the list to the constructor avoids add_expectation's quadratic duplicate check.
    return gx.ExpectationSuite(name=f"{spec.name}.table", expectations=expectations)


def _column_expectations(col: ColumnSpec, config: ValidationConfig) -> list:
    """Return the row-level expectations of one column."""
    meta = _meta("row", col.name)
    out: list = []
    if not col.nullable:
        out.append(gxe.ExpectColumnValuesToNotBeNull(column=col.name, meta=meta))
    maximum = col.max_value
    if col.max_from_config is not None:
        maximum = float(getattr(config, col.max_from_config))
    if col.min_value is not None or maximum is not None:
        out.append(
            gxe.ExpectColumnValuesToBeBetween(
                column=col.name,
                min_value=col.min_value,
                max_value=maximum,
                strict_min=col.strict_min,
                meta=meta,
            )
        )
    if col.value_set is not None:
        out.append(
            gxe.ExpectColumnValuesToBeInSet(
                column=col.name, value_set=list(col.value_set), meta=meta
            )
        )
    if col.unique:
        out.append(gxe.ExpectColumnValuesToBeUnique(column=col.name, meta=meta))
    return out


def row_level_suite(
    spec: TableSpec, columns: list[str], config: ValidationConfig
) -> gx.ExpectationSuite:
    """Build the row-level suite of one table.

    Args:
        spec: the table specification.
        columns: the columns the table has (optional columns absent from it are skipped).
        config: thresholds (``max_time_ms``, ``max_epoch_s``).

    Returns:
        The suite named ``<table>.rows``.
    """
    expectations: list = [
        expectation
        for col in spec.columns
        if col.name in columns
        for expectation in _column_expectations(col, config)
    ]
    # A key column that is optional (``required=False``) takes part only when present.
    key = [c for c in spec.unique_together if c in columns or not _is_optional(spec, c)]
    if key and all(c in columns for c in key):
        expectations.append(
            gxe.ExpectCompoundColumnsToBeUnique(
                column_list=key,
                meta=_meta("row", ",".join(key)),
            )
        )
    return gx.ExpectationSuite(name=f"{spec.name}.rows", expectations=expectations)


def _is_optional(spec: TableSpec, name: str) -> bool:
    return any(c.name == name and not c.required for c in spec.columns)


def integral_failures(spec: TableSpec, frame: pd.DataFrame) -> dict[str, tuple[np.ndarray, int]]:
    """Find non-integral values in the ``int`` columns (pandas check).

    Args:
        spec: the table specification.
        frame: the table (``RangeIndex``).

    Returns:
        For each ``int`` column present: ``(positions of non-integral values, non-null count)``.
    """
    out: dict[str, tuple[np.ndarray, int]] = {}
    for col in spec.columns:
        if col.kind != "int" or col.name not in frame.columns:
            continue
        values = pd.to_numeric(frame[col.name], errors="coerce").to_numpy(
            dtype=float, na_value=np.nan
        )
        present = ~np.isnan(values)
        bad = present & (np.floor(np.where(present, values, 0.0)) != np.where(present, values, 0.0))
        bad |= present & ~np.isfinite(values)
        out[col.name] = (np.flatnonzero(bad), int(present.sum()))
    return out


def restore_int_dtypes(spec: TableSpec, frame: pd.DataFrame) -> pd.DataFrame:
    """Cast float-typed ``int`` columns back to ``int64`` once they hold no null.

    Args:
        spec: the table specification.
        frame: validated rows.

    Returns:
        The frame with those columns cast (other columns untouched).
    """
    frame = frame.copy()
    for col in spec.columns:
        if (
            col.kind == "int"
            and col.name in frame.columns
            and pd.api.types.is_float_dtype(frame[col.name].dtype)
            and not frame[col.name].isna().any()
        ):
            frame[col.name] = frame[col.name].astype("int64")
    return frame
