"""Stopping a profile safely: SIGINT and SIGTERM become an exception the launcher can clean up.

By default a Python process dies on SIGTERM without running ``finally`` blocks, and its
``torchrun`` (started in a session of its own, so a terminal's Ctrl-C does not reach it) keeps
profiling without it, using every core. :func:`stop_signals_raise` turns both signals into
:class:`ProfilingInterrupted` while a profile runs (in the main thread; elsewhere the signals
keep their handlers and a ``KeyboardInterrupt`` is handled the same way), so the launcher can
forward the signal to the launch's process group, wait a bounded time, kill what is left and
record the workload in progress as ``interrupted``. The exit code convention is the shell's:
``128 + signal number`` (130 for SIGINT, 143 for SIGTERM).

``kill -9`` of the launcher runs no handler at all: :func:`die_with_parent` (Linux
``prctl(PR_SET_PDEATHSIG, SIGKILL)``) makes the kernel kill ``torchrun`` when its launcher dies
and each worker when its ``torchrun`` dies, so nothing keeps writing parts without a launcher
(and the profiles lock, which the launcher and ``torchrun`` hold, is never free while a worker
writes).

:func:`exit_without_finalizing` ends a rank or ``torchrun`` whose work is written: the
interpreter's own shutdown (tearing down some 2,800 modules of torch and transformers) took 1-2 s
of every launch, twice (the ranks, then ``torchrun``).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator

#: The signals that stop a profile.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ProfilingInterrupted(Exception):  # noqa: N818 (named for what happened, like KeyboardInterrupt)
    """A profile was stopped by a signal.

    Attributes:
        signum: the signal number (``signal.SIGINT`` for a ``KeyboardInterrupt``).
        summary: the :class:`~scaledl.profiling.launch.ProfileSummary` of what was done, set by
            the launcher before re-raising.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"profiling stopped by {signal.Signals(signum).name}")
        self.signum = int(signum)
        self.summary = None

    @property
    def exit_code(self) -> int:
        """``128 + signum``, the shell's convention (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + self.signum


def interruption_reason(signum: int, elapsed_s: float) -> str:
    """The one-line ``error`` of a part a stop signal interrupted.

    A stop is no failure of the workload: its record names the signal and how long the
    workload had run, not the traceback the signal left in the launch log.

    Args:
        signum: the stop signal.
        elapsed_s: seconds the workload had run when it came.

    Returns:
        e.g. ``interrupted (SIGINT) after 12 s``.
    """
    return f"interrupted ({signal.Signals(signum).name}) after {max(elapsed_s, 0.0):.0f} s"


#: The stop signal received inside the current :func:`stop_signals_raise` block (``None``: none).
_stop_signum: list[int | None] = [None]


def _raise(signum, frame) -> None:
    # Further stop signals are ignored until the block exits: a second Ctrl-C must not cut the
    # clean-up short and leave ranks running.
    if _stop_signum[0] is not None:
        return
    _stop_signum[0] = int(signum)
    raise ProfilingInterrupted(signum)


def raise_if_stopped() -> None:
    """Raise :class:`ProfilingInterrupted` if a stop signal came inside the current block.

    The handler raises where the main thread happens to be. Code there may swallow the
    exception: Python's :mod:`logging` catches every ``Exception`` an ``emit`` raises (a
    signal arriving while a Dagster ``context.log.info`` writes is lost that way), as does any
    ``except Exception``. The launcher calls this at every poll and before every launch, so a
    swallowed stop still ends the profile within one poll interval.

    Raises:
        ProfilingInterrupted: a stop signal was received since the block was entered.
    """
    if _stop_signum[0] is not None:
        raise ProfilingInterrupted(_stop_signum[0])


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Inside the block, SIGINT and SIGTERM raise :class:`ProfilingInterrupted` (main thread).

    After the first signal, further ones are ignored until the block exits (the clean-up runs
    to its end), and :func:`raise_if_stopped` raises again should the first exception have
    been swallowed. The previous handlers are restored on exit. In another thread the
    handlers cannot be changed; the block then does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _stop_signum[0] = None
    previous = {s: signal.signal(s, _raise) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _stop_signum[0] = None


def default_stop_signals() -> None:
    """Give SIGTERM and SIGINT their default meaning in this process, whatever it inherited.

    An ignored signal stays ignored across ``fork`` and ``exec``: a rank started under a
    parent that ignores SIGTERM would ignore the stop it is sent (and its launcher wait for the
    SIGKILL). Dagster maps SIGTERM to SIGINT's handler, which is ``SIG_IGN`` in a process whose
    SIGINT is ignored (a background job of a shell, a pytest-xdist worker), so ranks started
    from such a run inherited an ignored SIGTERM. Here SIGTERM ends the process
    (``SIG_DFL``) and SIGINT raises ``KeyboardInterrupt``, as in a fresh interpreter whose
    parent ignored neither. For a rank's start (the zygote's child, the worker); main thread
    only.
    """
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int | None = None) -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux; elsewhere nothing).

    For ``subprocess.Popen(preexec_fn=die_with_parent)`` (in the child, before ``exec``) and
    for a worker's start. When ``parent_pid`` is given and that process is gone already (it
    died before the call), this process exits at once.

    Args:
        parent_pid: the process whose death should end this one (``None``: no check).

    Raises:
        OSError: ``prctl`` failed.
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)  # the parent died before the call: nobody to write for


def exit_without_finalizing(code: int = 0) -> None:
    """Exit at once with ``code``, skipping the interpreter's shutdown; never returns.

    Logging handlers and the standard streams are flushed first; ``atexit`` handlers and the
    teardown of every module are skipped (``os._exit``). In a process that imported torch and
    transformers that teardown took 1-2 s on a 2-core VM, against 0.03 s for this. Only for a
    process whose results are written and closed: a worker after its last part, ``torchrun``
    after its workers exited and its agent shut down.

    Args:
        code: the exit status.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        # A closed stream (ValueError) or a reader gone (BrokenPipeError): nothing to flush to.
        with contextlib.suppress(ValueError, OSError):
            if stream is not None:
                stream.flush()
    os._exit(code)
