"""Reading tables with clear errors and writing files atomically."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from scaledl.validation.errors import TableFailure, ValidationError


def read_table(path: Path, table: str) -> pd.DataFrame:
    """Read one parquet table.

    Args:
        path: parquet file.
        table: table name, used in the error message.

    Returns:
        The table with a fresh ``RangeIndex``.

    Raises:
        ValidationError: the file is missing, truncated, corrupted or otherwise unreadable.
    """
    path = Path(path)
    if not path.is_file():
        raise ValidationError(
            [TableFailure(str(path), table, None, "file_exists", "file not found")]
        )
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for broken files
        raise ValidationError(
            [
                TableFailure(
                    str(path),
                    table,
                    None,
                    "readable_parquet",
                    f"cannot read parquet: {type(exc).__name__}: {exc}",
                )
            ]
        ) from exc
    return frame.reset_index(drop=True)
