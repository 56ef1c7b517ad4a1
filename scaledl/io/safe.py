"""One safe reader for every file the product reads: regular files only, bounded, finite.

A file named by a user or found by a glob may be a FIFO (an ``open`` that never returns), a
link to ``/dev/zero`` (a read that never ends), a 200 KB nest of brackets (a ``RecursionError``
deep in ``json``) or a number no float holds (``1e999`` parses to infinity). Every reader of
JSON, YAML-free text and tables goes through :func:`check_regular_file` first, and JSON through
:func:`read_json`, so each of those ends in one :class:`UnsafeInputError` naming the file, the
field where there is one, and the value.

Limits (decisions, not measurements): :data:`MAX_JSON_BYTES` 16 MiB is 100x the largest JSON
the product writes (a bundle manifest with its hashes, a few KB; ``docs/results/*.json``
under 1 MB); :data:`MAX_JSON_DEPTH` 64 is 8x the deepest the product writes.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

MAX_JSON_BYTES = 16 * 2**20
MAX_JSON_DEPTH = 64
#: Tables (parquet, CSV) a user hands in: 4 GiB, far above any profile or design.
MAX_TABLE_BYTES = 4 * 2**30

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


class UnsafeInputError(ValueError):
    """A file that is not a regular file, is too large, too deeply nested or not finite."""


def check_regular_file(path: str | os.PathLike, max_bytes: int = MAX_TABLE_BYTES) -> Path:
    """Refuse what is not a regular file of at most ``max_bytes``, before anything opens it.

    Links are followed: a link to a regular file is fine, one to ``/dev/zero`` or a FIFO is not.

    Args:
        path: the file.
        max_bytes: the largest size accepted, in bytes.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        FileNotFoundError: the file does not exist.
        UnsafeInputError: a directory, FIFO, device or socket, or larger than ``max_bytes``.
    """
    path = Path(path)
    info = os.stat(path)  # stat never blocks on a FIFO, unlike open
    if not stat.S_ISREG(info.st_mode):
        kind = (
            "a directory" if stat.S_ISDIR(info.st_mode)
            else "a FIFO" if stat.S_ISFIFO(info.st_mode)
            else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
            else "a socket" if stat.S_ISSOCK(info.st_mode)
            else "not a regular file"
        )  # fmt: skip
        raise UnsafeInputError(f"{path}: is {kind}, not a regular file; refused")
    if info.st_size > max_bytes:
        raise UnsafeInputError(
            f"{path}: {info.st_size:,} bytes, over the {max_bytes:,}-byte limit for this file"
        )
    return path


def read_bytes(path: str | os.PathLike, max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (checked, then read bounded).

    Raises:
        FileNotFoundError: the file does not exist.
        UnsafeInputError: see :func:`check_regular_file`; also a file that grew past the limit
            while read.
        OSError: the file cannot be read.
    """
    path = check_regular_file(path, max_bytes)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):  # swapped since the stat
            raise UnsafeInputError(f"{path}: not a regular file; refused")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnsafeInputError(f"{path}: over the {max_bytes:,}-byte limit for this file")
    return data


def read_text(path: str | os.PathLike, max_bytes: int = MAX_JSON_BYTES) -> str:
    """UTF-8 text of a regular file of at most ``max_bytes``.

    Raises:
        UnsafeInputError: not a regular file, too large, or not UTF-8.
        FileNotFoundError, OSError: as :func:`read_bytes`.
    """
    data = read_bytes(path, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsafeInputError(f"{path}: not UTF-8 text ({exc})") from None


def json_depth(text: str) -> int:
    """The deepest nesting of ``[`` / ``{`` in JSON text (brackets inside strings ignored)."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


class _NonFinite:
    """A ``NaN`` / ``Infinity`` / out-of-range number met while parsing, refused by its field."""

    def __init__(self, text: str) -> None:
        self.text = text[:40]


def _number(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def _non_finite_in(value: Any, where: str) -> str | None:
    """``where`` (with list indices) and the text of the first non-finite number, else ``None``.

    Objects are checked as they are built (:func:`_checked_pairs`), so only lists are walked.
    """
    if isinstance(value, _NonFinite):
        return f"{where} (value {value.text})" if where else f"value {value.text}"
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _non_finite_in(item, f"{where}[{i}]")
            if found is not None:
                return found
    return None


def _checked_pairs(hook: Any) -> Any:
    """An ``object_pairs_hook`` refusing a non-finite number by its field, then ``hook``."""

    def pairs(items: list[tuple[str, Any]]) -> Any:
        for key, value in items:
            found = _non_finite_in(value, f"field {key!r}")
            if found is not None:
                raise ValueError(f"{found}: not a finite number")
        return hook(items) if hook is not None else dict(items)

    return pairs


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads`` ``object_pairs_hook`` refusing a key given twice (JSON keeps the last).

    Raises:
        ValueError: naming the key.
    """
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} given twice; keep one")
        out[key] = value
    return out


def parse_json(
    text: str, source: str, max_depth: int = MAX_JSON_DEPTH, object_pairs_hook: Any = None
) -> Any:
    """Parse JSON text whose every number is finite and whose nesting is at most ``max_depth``.

    Args:
        text: the JSON.
        source: what the text came from (a path, a field), for the error.
        max_depth: the deepest ``[`` / ``{`` nesting accepted.
        object_pairs_hook: passed to :func:`json.loads` (e.g. :func:`unique_keys`).

    Raises:
        UnsafeInputError: nested too deeply, a ``NaN`` / ``Infinity`` / out-of-range number
            (named by its field), or not JSON; the message names ``source``.
    """
    depth = json_depth(text)
    if depth > max_depth:
        raise UnsafeInputError(
            f"{source}: JSON nested {depth} levels deep, over the limit of {max_depth}"
        )
    try:
        value = json.loads(
            text,
            parse_constant=_NonFinite,
            parse_float=_number,
            object_pairs_hook=_checked_pairs(object_pairs_hook),
        )
        found = _non_finite_in(value, "")
        if found is not None:
            raise ValueError(f"{found}: not a finite number")
    except (ValueError, RecursionError) as exc:
        raise UnsafeInputError(f"{source}: not valid JSON: {exc}") from None
    return value


def read_json(
    path: str | os.PathLike,
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
    object_pairs_hook: Any = None,
) -> Any:
    """Read a JSON file through every check of this module.

    Args:
        path: the file.
        max_bytes: the largest size accepted, in bytes.
        max_depth: the deepest nesting accepted.
        object_pairs_hook: passed to :func:`json.loads`.

    Returns:
        The parsed value (any JSON type: callers check the shape they need).

    Raises:
        FileNotFoundError: no such file.
        UnsafeInputError: not a regular file, too large, not UTF-8, too deep, not finite, or
            not JSON; the message names the path.
        OSError: the file cannot be read.
    """
    return parse_json(read_text(path, max_bytes), str(path), max_depth, object_pairs_hook)
