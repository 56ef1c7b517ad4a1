"""An on-disk cache of traced architectures, so a fresh process predicts without tracing.

Tracing an architecture on the meta device (:mod:`scaledl.graph.tracing`) takes about 0.03 s per
batch size on this project's 2-core CI host (0.05 s before operators were memoised,
:mod:`scaledl.graph.dispatch`), and the first trace of a process imports transformers
(seconds). What predictions read of a trace is small: the per-architecture node and edge arrays of
:class:`~scaledl.graph.features.GraphSet` templates. This module keeps those arrays in one
``.npz`` file per architecture (numbers and fixed-width strings, read with
``allow_pickle=False``: no code is ever loaded) in a folder beside the predictor bundle
(``<registry>/<name>/.trace-cache/``, hidden, so registry listings skip it), under a sub-folder
named by a digest of everything the arrays depend on: the torch and transformers versions, the
cache format and the source of the modules that build layer graphs. Any change to those makes a
new, empty sub-folder instead of stale graphs.

The folder is chosen by :func:`use_directory` (the predictor does it when loaded);
``SCALEDL_TRACE_CACHE`` overrides it (a path, or ``off`` for no cache). Entries are written
atomically (:func:`scaledl.io.atomic.write_atomic`). A folder that cannot be written (a
read-only registry) and an entry that cannot be read (truncated by a full disk) are logged as
warnings and the architecture is traced as without a cache: the cache only ever saves time.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import zipfile
from importlib import metadata
from pathlib import Path

import numpy as np

from scaledl.io.atomic import write_atomic

logger = logging.getLogger(__name__)

#: Bumped when the layout of an entry changes.
CACHE_FORMAT = 2
#: Environment variable overriding the cache folder (``off``: no cache).
ENV_VAR = "SCALEDL_TRACE_CACHE"
#: The sources whose code decides a layer graph (their bytes are part of the digest).
_SOURCES = (
    "graph/dispatch.py",
    "graph/features.py",
    "graph/layer_graph.py",
    "graph/tracing.py",
    "graph/units.py",
    "workloads/builders.py",
    "workloads/hf.py",
)
_state: dict[str, object] = {"directory": None, "digest": None, "warned": False}


def use_directory(directory: Path | None) -> None:
    """Set the folder the cache lives in (``None``: no cache unless the environment names one).

    Args:
        directory: e.g. ``<registry>/<name>/.trace-cache``.
    """
    _state["directory"] = None if directory is None else Path(directory)


def cache_folder() -> Path | None:
    """The folder entries are read from and written to now (``None``: no cache).

    Returns:
        ``<directory>/<digest>``, the directory from ``SCALEDL_TRACE_CACHE`` or
        :func:`use_directory`.
    """
    env = os.environ.get(ENV_VAR)
    if env is not None and env.strip().lower() == "off":
        return None
    base = Path(env) if env else _state["directory"]
    if base is None:
        return None
    return Path(base) / _digest()


def _digest() -> str:
    """Digest of the cache format, library versions and layer-graph sources (module docstring)."""
    if _state["digest"] is None:
        sha = hashlib.sha256(f"format {CACHE_FORMAT}".encode())
        for lib in ("torch", "transformers"):
            try:
                sha.update(f"{lib} {metadata.version(lib)}".encode())
            except metadata.PackageNotFoundError:
                sha.update(f"{lib} absent".encode())
        root = Path(__file__).resolve().parents[1]
        for name in _SOURCES:
            sha.update(name.encode())
            sha.update((root / name).read_bytes())
        _state["digest"] = sha.hexdigest()[:24]
    return str(_state["digest"])


def _entry(key: str) -> Path | None:
    folder = cache_folder()
    if folder is None:
        return None
    return folder / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".npz")


def load(key: str) -> dict[str, np.ndarray] | None:
    """The arrays stored for an architecture key, or ``None`` (no cache, or not cached yet).

    Args:
        key: :func:`~scaledl.graph.features.architecture_key` of the architecture.

    Returns:
        Name -> array (strings as ``numpy.str_`` arrays), as given to :func:`store`.
    """
    path = _entry(key)
    if path is None or not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as exc:
        logger.warning("trace cache: %s unreadable (%s): tracing again", path, exc)
        return None
    if str(arrays.pop("key", "")) != key:  # a digest collision, or an entry of another key
        logger.warning("trace cache: %s holds another architecture: tracing again", path)
        return None
    return arrays


def store(key: str, arrays: dict[str, np.ndarray]) -> None:
    """Write an architecture's arrays (atomically); a folder that cannot be written is skipped.

    Args:
        key: the architecture key.
        arrays: name -> numeric or string array (no object arrays).
    """
    path = _entry(key)
    if path is None:
        return
    buffer = io.BytesIO()
    np.savez(buffer, key=np.array(key), **arrays)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, buffer.getvalue())
    except OSError as exc:
        if not _state["warned"]:
            logger.warning("trace cache: cannot write %s (%s): traces stay in memory", path, exc)
            _state["warned"] = True
