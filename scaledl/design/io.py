"""Write and read design tables as parquet (``data/design/design.parquet``).

The design-level values (``log_det``, ``d_efficiency``, sampler, seed, model terms, ...) are
columns of every row and also JSON in the parquet schema metadata under
:data:`METADATA_KEY`; :func:`read_design` puts them in ``DataFrame.attrs["design"]``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from scaledl.design.design import DESIGN_COLUMNS, DesignResult
from scaledl.design.errors import DesignError
from scaledl.io.atomic import atomic_file
from scaledl.io.safe import UnsafeInputError, check_regular_file

METADATA_KEY = b"scaledl.design"
REQUIRED_COLUMNS = ("workload_id", "family", "batch_size", *DESIGN_COLUMNS)


def write_design(result: DesignResult, path: str | Path) -> Path:
    """Write a design to parquet atomically and durably (:func:`scaledl.io.atomic.atomic_file`).

    Args:
        result: the design.
        path: destination file; parent directories are created.

    Returns:
        The path written.

    Raises:
        DesignError: the file cannot be written (the message names it).
    """
    path = Path(path)
    table = pa.Table.from_pandas(result.table, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[METADATA_KEY] = json.dumps(result.summary()).encode()
    table = table.replace_schema_metadata(meta)
    try:
        with atomic_file(path) as tmp:
            pq.write_table(table, tmp)
    except (OSError, pa.ArrowException) as exc:
        raise DesignError(f"{path}: cannot write design: {exc}") from None
    return path


def read_design(path: str | Path) -> pd.DataFrame:
    """Read a design table written by :func:`write_design`.

    Args:
        path: the parquet file.

    Returns:
        The table; ``attrs["design"]`` holds the design-level metadata (empty dict if absent).

    Raises:
        DesignError: the file is missing, not a regular file (a FIFO, a device), not readable
            parquet, or lacks design columns; the message names the file.
    """
    path = Path(path)
    try:
        check_regular_file(path)
    except FileNotFoundError:
        raise DesignError(f"{path}: design file not found") from None
    except UnsafeInputError as exc:
        raise DesignError(str(exc)) from None
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise DesignError(f"{path}: not a readable parquet design file: {exc}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise DesignError(f"{path}: not a design table: missing column(s) {missing}")
    frame = table.to_pandas()
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    try:
        frame.attrs["design"] = json.loads(raw) if raw else {}
    except json.JSONDecodeError as exc:
        raise DesignError(f"{path}: corrupt design metadata: {exc}") from None
    return frame
