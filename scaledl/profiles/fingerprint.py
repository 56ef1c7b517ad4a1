"""A profile's fingerprint: one SHA-256 over its tables, recorded by what is fitted on it."""

from __future__ import annotations

import hashlib
from pathlib import Path


def tables_sha256(directory: Path) -> str:
    """SHA-256 over the parquet files of a directory (names and bytes, sorted by name).

    Args:
        directory: a profile folder (``<name>.parquet`` tables).

    Returns:
        Hex digest of each file's name followed by the hex SHA-256 of its bytes; that of no
        bytes for a folder without parquet files.
    """
    digest = hashlib.sha256()
    for path in sorted(Path(directory).glob("*.parquet")):
        digest.update(path.name.encode())
        with open(path, "rb") as f:
            digest.update(hashlib.file_digest(f, "sha256").hexdigest().encode())
    return digest.hexdigest()
