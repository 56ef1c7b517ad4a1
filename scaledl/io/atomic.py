"""Durable atomic writes: a file or a folder appears whole, and stays there after a power loss.

The rule is SQLite's and DVC's: write into a temporary name in the target's own directory,
``fsync`` the data, ``os.replace`` it onto the target name, then ``fsync`` the directory so the
rename itself is on disk. A crash (``kill -9``, power loss) at any point leaves either the old
target or the new one, never a name that points at data never written; what it can leave is a
hidden temporary (``.<name>.<pid>.<random>.tmp``), which :func:`remove_stale_temps` removes
once the process that made it is gone.

* :func:`atomic_file`: a context manager yielding a temporary path to write (any library that
  writes to a path: ``to_parquet``, ``torch.save``...), published on success.
* :func:`write_atomic`: ``atomic_file`` for bytes or text.
* :func:`write_parquet_atomic`: ``atomic_file`` for a DataFrame as parquet.
* :func:`atomic_dir`: a temporary folder published as a whole (every file in it fsynced).
* :func:`fsync_path`: ``fsync`` of a file or a directory by name.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    import pandas as pd

_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[a-z0-9_]+\.tmp$")


def fsync_path(path: Path) -> None:
    """``fsync`` a file or a directory (a directory's fsync makes its renames durable).

    Raises:
        OSError: the path cannot be opened or synced.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    """The process's umask (read by setting it and restoring it at once)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _temp_prefix(target: Path) -> str:
    return f".{target.name}.{os.getpid()}."


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` that becomes ``path`` durably when the block succeeds.

    The caller writes the temporary file (any writer that takes a path). On success it is
    fsynced, renamed onto ``path`` and the directory fsynced; on an exception it is removed
    and ``path`` is untouched. The directory is created if missing. The file gets the mode a
    plain ``open`` would give it (``0o666`` less the umask), not ``mkstemp``'s ``0o600``.

    Raises:
        OSError: writing, syncing or renaming failed (``ENOSPC``, ``EROFS``...); ``path`` is
            unchanged then.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_umask())  # a plain open's mode, not mkstemp's 0o600
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def write_atomic(path: Path, data: bytes | str) -> Path:
    """Write bytes (or UTF-8 text) to ``path`` durably (:func:`atomic_file`).

    Returns:
        ``path``.

    Raises:
        OSError: as :func:`atomic_file`.
    """
    payload = data.encode() if isinstance(data, str) else data
    with atomic_file(path) as tmp:
        tmp.write_bytes(payload)
    return Path(path)


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> Path:
    """Write a DataFrame as parquet (its index not written) durably (:func:`atomic_file`).

    Returns:
        ``path``.

    Raises:
        OSError: as :func:`atomic_file`.
    """
    with atomic_file(path) as tmp:
        frame.to_parquet(tmp, index=False)
    return Path(path)


@contextlib.contextmanager
def atomic_dir(
    target: Path,
    replace: bool = False,
    if_exists: Callable[[Path, Path], None] | None = None,
) -> Iterator[Path]:
    """A temporary folder beside ``target`` that becomes ``target`` durably on success.

    On success every file in the folder and the folder itself are fsynced, the folder is
    renamed onto ``target`` and the parent fsynced. With ``replace``, an existing ``target``
    is swapped with the new folder in one step (Linux ``renameat2(RENAME_EXCHANGE)``) and the
    old one removed, so ``target`` is always either the old folder or the new one. Where the
    exchange is not available (another OS, a file system without it) the old folder is renamed
    aside first: a crash between the two renames leaves no ``target`` (the old one as a hidden
    temporary). On an exception the temporary folder is removed and ``target`` is untouched.
    The folder gets a plain ``mkdir``'s mode (``0o777`` less the umask), not ``mkdtemp``'s.

    Args:
        target: the folder to publish.
        replace: replace an existing ``target``.
        if_exists: called as ``if_exists(tmp, target)`` when ``target`` exists (and not
            ``replace``): it raises to refuse, or returns to keep the existing ``target`` (the
            temporary folder is removed); also when another publisher's rename wins the race
            after the check. Without it an existing non-empty ``target`` makes ``os.replace``
            fail with ``OSError``.

    Raises:
        OSError: writing, syncing or renaming failed; ``target`` is unchanged then.
        Exception: whatever ``if_exists`` raises.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(target), suffix=".tmp", dir=target.parent))
    tmp.chmod(0o777 & ~_umask())  # a plain mkdir's mode, not mkdtemp's 0o700
    try:
        yield tmp
        if if_exists is not None and not replace and target.exists():
            if_exists(tmp, target)
            shutil.rmtree(tmp, ignore_errors=True)
            return
        for file in sorted(p for p in tmp.rglob("*") if p.is_file()):
            fsync_path(file)
        fsync_path(tmp)
        exchanged = replace and target.exists() and _exchange(tmp, target)
        if not exchanged:
            if replace and target.exists():
                aside = tempfile.mkdtemp(prefix=_temp_prefix(target), suffix=".tmp", dir=tmp.parent)
                os.replace(target, aside)
                os.replace(tmp, target)
                tmp = Path(aside)  # the old folder, removed below
            else:
                try:
                    os.replace(tmp, target)
                except OSError as exc:
                    # Another publisher renamed its folder onto ``target`` after the check.
                    if if_exists is None or exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
                    if_exists(tmp, target)
                    shutil.rmtree(tmp, ignore_errors=True)
                    return
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_path(target.parent)
    shutil.rmtree(tmp, ignore_errors=True)  # the old folder after an exchange (or nothing)


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2  # <fcntl.h>, <linux/fs.h>


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (``renameat2(RENAME_EXCHANGE)``); ``False`` when unsupported.

    Raises:
        OSError: the exchange is supported but failed.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if not sys.platform.startswith("linux") or not hasattr(libc, "renameat2"):
        return False
    if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def remove_stale_temps(directory: Path) -> list[Path]:
    """Remove the temporaries of this module left in ``directory`` by processes that died.

    A temporary whose process (its pid, in the name) still runs on this host is kept: it may
    be writing. A directory shared between hosts may hold another host's live temporary; it is
    removed only when no process of that pid runs here either, so share a publish target
    between hosts only with one writer at a time (the profiles lock, the pipeline).

    Returns:
        The removed paths.
    """
    removed = []
    for path in Path(directory).iterdir() if Path(directory).is_dir() else []:
        match = _TEMP.match(path.name)
        if match is None or psutil.pid_exists(int(match["pid"])):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed
