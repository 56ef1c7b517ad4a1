"""One profiler per profiles directory: a file lock naming its holder.

Two profilers writing into one directory measure the same workloads twice, each under the
other's load. :func:`profiles_lock` takes an exclusive lock on ``OUT/.profile.lock``
(``filelock.FileLock``: ``fcntl`` on Unix, so the operating system releases it when its holder
dies) and writes the holder (pid, host, start time) beside it. A second profiler either waits up
to ``timeout_s`` or fails with :class:`ProfilesLocked` naming the holder; a holder file left by
a process that no longer exists (the lock itself is free then) is taken over with a warning.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import psutil
from filelock import FileLock, Timeout

log = logging.getLogger(__name__)


class ProfilesLocked(RuntimeError):  # noqa: N818 (a state, like FileExistsError)
    """Another profiler holds the directory; the message names it."""


def _holder_path(out_dir: Path) -> Path:
    return Path(out_dir) / ".profile.lock.json"


def read_holder(out_dir: Path) -> dict | None:
    """The recorded holder of a profiles directory's lock, or ``None``."""
    try:
        return json.loads(_holder_path(out_dir).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _describe(holder: dict | None) -> str:
    if not holder:
        return "an unknown process"
    return f"pid {holder.get('pid')} on host {holder.get('host')} since {holder.get('started_at')}"


@contextlib.contextmanager
def profiles_lock(out_dir: Path, timeout_s: float = 0.0) -> Iterator[None]:
    """Hold the profiles directory's lock inside the block.

    Args:
        out_dir: the profiles directory (created if missing).
        timeout_s: seconds to wait for another profiler to finish (0: fail at once).

    Raises:
        ProfilesLocked: another profiler holds the lock after ``timeout_s``; names its pid,
            host, start time and the lock file.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(out_dir / ".profile.lock")
    try:
        lock.acquire(timeout=timeout_s)
    except Timeout:
        raise ProfilesLocked(
            f"{out_dir}: another profiler is writing here ({_describe(read_holder(out_dir))}); "
            f"wait for it to finish or stop it (lock {out_dir / '.profile.lock'})"
        ) from None
    try:
        stale = read_holder(out_dir)
        if stale and stale.get("host") == socket.gethostname():
            if not psutil.pid_exists(int(stale.get("pid", -1))):
                log.warning(
                    "%s: taking over the lock of a profiler that no longer runs (%s)",
                    out_dir,
                    _describe(stale),
                )
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        _holder_path(out_dir).write_text(json.dumps(holder))
        yield
    finally:
        _holder_path(out_dir).unlink(missing_ok=True)
        lock.release()
