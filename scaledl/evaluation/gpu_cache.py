"""Content-addressed cache of the GPU evaluation: computed once per input and code version.

The GPU evaluation (:func:`scaledl.evaluation.gpu.evaluate_gpu`) is deterministic: the same
imported tables, peer predictions, Vidur measurements, settings and code give the same
metrics and predictions (its fits are seeded; the GNN correction is not used on NeuSight's four
models). It is stored with :class:`joblib.Memory` under a key of:

* the SHA-256 of the contents of every input file (:func:`tree_sha256`: the validated
  tables, the model configs they name, the 4-GPU labels, the Vidur and NeuSight folders it
  reads);
* the code version (:func:`code_sha256`: every file of the ``scaledl`` package, the device
  table included, and the versions of the numerical libraries);
* the settings that are not paths (:func:`settings_key`).

joblib adds the cached function's own code to the key. A changed input, setting or code is a
different key, so a stale result is never read back; the oldest entries beyond
:data:`KEEP_ENTRIES` are removed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from joblib import Memory

#: Cache entries kept (each a few hundred KiB); older ones are removed after a store.
KEEP_ENTRIES = 8
#: Libraries whose version is part of the code version (their numerics decide the results).
LIBRARIES = ("numpy", "pandas", "scikit-learn", "scipy", "torch", "joblib")
_PACKAGE = Path(__file__).resolve().parents[1]
_CODE_SUFFIXES = (".py", ".csv", ".json", ".yaml", ".yml")


def _file_digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def tree_sha256(paths: Iterable[Path | None], suffixes: tuple[str, ...] | None = None) -> str:
    """SHA-256 of the relative names and contents of every regular file under ``paths``.

    Args:
        paths: files or folders (read recursively, in sorted order); ``None`` and a missing
            path are hashed as absent, so their appearing changes the digest.
        suffixes: only files with these suffixes (``None``: every file).

    Returns:
        The hex digest.
    """
    digest = hashlib.sha256()
    for root in paths:
        digest.update(b"root\n")
        if root is None or not Path(root).exists():
            digest.update(b"absent\n")
            continue
        root = Path(root)
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            if suffixes is not None and path.suffix not in suffixes:
                continue
            if "__pycache__" in path.parts:
                continue
            name = path.name if path == root else path.relative_to(root).as_posix()
            digest.update(f"{name}\0{_file_digest(path)}\n".encode())
    return digest.hexdigest()


def code_sha256() -> str:
    """The code version: the ``scaledl`` package's files and the numerical libraries' versions."""
    digest = hashlib.sha256(tree_sha256([_PACKAGE], _CODE_SUFFIXES).encode())
    for name in LIBRARIES:
        try:
            digest.update(f"{name}={version(name)}\n".encode())
        except PackageNotFoundError:
            digest.update(f"{name}=absent\n".encode())
    return digest.hexdigest()


#: Settings that do not change the result (how many processes compute it).
NOT_IN_KEY = frozenset({"n_jobs"})


def settings_key(config: Any) -> str:
    """The settings of a dataclass config that are not paths (nor :data:`NOT_IN_KEY`), as JSON."""
    values = {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if not isinstance(getattr(config, f.name), Path) and f.name not in NOT_IN_KEY
    }
    return json.dumps(values, sort_keys=True, default=str)


def cache_key(paths: Iterable[Path | None], config: Any) -> str:
    """The key of one evaluation: inputs' contents, code version and settings."""
    parts = [tree_sha256(paths), code_sha256(), settings_key(config)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _compute(key: str, compute: Callable[[], Any]) -> Any:
    """What is stored under ``key`` (joblib hashes ``key`` and this function's code)."""
    return compute()


class ResultCache:
    """A folder of results stored by key (:class:`joblib.Memory`).

    Args:
        folder: the cache folder (created on the first store).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.memory = Memory(self.folder, verbose=0)
        self._cached = self.memory.cache(_compute, ignore=["compute"])

    def contains(self, key: str) -> bool:
        """Whether a result is stored under ``key``."""
        return self._cached.check_call_in_cache(key, None)

    def get_or_compute(self, key: str, compute: Callable[[], Any]) -> tuple[Any, bool]:
        """The result stored under ``key``, else ``compute()`` stored under it.

        Returns:
            ``(result, hit)``: ``hit`` is true when the result was read from the cache.
        """
        hit = self.contains(key)
        result = self._cached(key, compute)
        if not hit:
            self.memory.reduce_size(items_limit=KEEP_ENTRIES)
        return result, hit
