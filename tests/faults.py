"""Fault injection for the durability tests: a crash at the n-th I/O call, and an fsync spy.

:func:`crash_at` makes the ``n``-th call of the I/O functions a publish uses (``open``,
``os.open``, ``os.mkdir``, ``os.replace``, ``os.fsync``, ``os.unlink``, ``os.rmdir``) raise
``OSError(EIO)``, as a crash at that point would stop the publish; :func:`count_io` counts them.
:class:`FsyncSpy` records, in order, every ``os.fsync`` (by path) and ``os.replace``, so a test
can check the rule "fsync the data, rename, fsync the directory".
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_IO = [
    (builtins, "open"),
    (io, "open"),
    (os, "open"),
    (os, "mkdir"),
    (os, "replace"),
    (os, "fsync"),
    (os, "unlink"),
    (os, "rmdir"),
]


class InjectedCrash(OSError):
    """The injected fault."""


@contextlib.contextmanager
def _patched(on_call: Callable[[str], None]) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        for module, name in _IO:
            real = getattr(module, name)

            def wrapper(*args, _real=real, _name=name, **kwargs):
                on_call(_name)
                return _real(*args, **kwargs)

            mp.setattr(module, name, wrapper)
        yield


def count_io(action: Callable[[], object]) -> int:
    """How many I/O calls ``action`` makes."""
    calls = []
    with _patched(calls.append):
        action()
    return len(calls)


def crash_at(n: int, action: Callable[[], object]) -> bool:
    """Run ``action`` with its ``n``-th I/O call (from 1) raising; ``True`` when it crashed."""
    calls = []

    def on_call(name: str) -> None:
        calls.append(name)
        if len(calls) == n:
            raise InjectedCrash(errno.EIO, f"injected crash at I/O call {n} ({name})")

    try:
        with _patched(on_call):
            action()
    except Exception as exc:  # the crash itself, or an error the code raised from it
        while exc is not None and not isinstance(exc, InjectedCrash):
            exc = exc.__cause__ or exc.__context__
        if exc is None:
            raise
        return True
    return False


class FsyncSpy:
    """Record ``os.fsync`` (as ``("fsync", path)``) and ``os.replace`` (``("replace", src,
    dst)``) in call order while installed with :meth:`install`."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FsyncSpy:
        """Spy on ``os.fsync``, ``os.replace`` and the folder exchange of
        :mod:`scaledl.io.atomic` (a rename too)."""
        from scaledl.io import atomic

        real_fsync, real_replace, real_exchange = os.fsync, os.replace, atomic._exchange

        def fsync(fd):
            self.events.append(("fsync", Path(os.readlink(f"/proc/self/fd/{fd}"))))
            return real_fsync(fd)

        def record(src, dst):
            is_dir = Path(src).is_dir()
            files = sorted(p for p in Path(src).rglob("*") if p.is_file()) if is_dir else []
            self.events.append(("replace", Path(src), Path(dst), files))

        def replace(src, dst, *args, **kwargs):
            record(src, dst)
            return real_replace(src, dst, *args, **kwargs)

        def exchange(a, b):
            record(a, b)
            return real_exchange(a, b)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(atomic, "_exchange", exchange)
        return self

    def replaces(self) -> list[tuple]:
        return [e for e in self.events if e[0] == "replace"]

    def assert_durable(self) -> None:
        """Every rename of a temporary (a file, or every file of a folder and the folder) was
        fsynced before it, and the destination's directory after it. (Renaming an old folder
        aside moves data already on disk.)"""
        assert self.replaces(), "no rename recorded"
        for i, event in enumerate(self.events):
            if event[0] != "replace" or not event[1].name.endswith(".tmp"):
                continue
            _, src, dst, files = event
            before = {e[1] for e in self.events[:i] if e[0] == "fsync"}
            after = {e[1] for e in self.events[i + 1 :] if e[0] == "fsync"}
            assert src.resolve() in before, f"{src} renamed to {dst} unsynced"
            unsynced = [f for f in files if f.resolve() not in before]
            assert not unsynced, f"{unsynced} renamed (in {src}) unsynced"
            assert dst.parent.resolve() in after, f"{dst.parent} not synced after the rename"


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "2m", read_only: bool = False) -> Iterator[Path]:
    """A real small (or read-only) file system at ``path`` for the test's duration.

    Mounting needs root with ``CAP_SYS_ADMIN`` (a container may lack it): the test is skipped
    where ``mount`` fails. Read-only is refused to root too (``EROFS``), unlike a chmod.
    """
    import subprocess

    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                             capture_output=True, text=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)
