"""Reading tables with clear errors and writing files atomically."""

from __future__ import annotations

import os
import tempfile
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


def _atomic_write(path: Path, write) -> None:
    """Write ``path`` through a temporary file in the same directory and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> None:
    """Write a dataframe as parquet atomically (temporary file + ``os.replace``).

    Args:
        frame: the table; its index is not written.
        path: destination file; parent directories are created.
    """
    _atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))


def write_text_atomic(text: str, path: Path) -> None:
    """Write a UTF-8 text file atomically (temporary file + ``os.replace``).

    Args:
        text: file content.
        path: destination file; parent directories are created.
    """
    _atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
