"""A pre-imported parent that forks the CPU profiler's ranks: a launch costs a fork.

A launch started one interpreter per rank that imported torch, the worker and transformers'
model modules before its first workload: 4-5 s per rank on a 2-core VM, paid by every launch and
so by every shard of a design. The zygote imports them once per launcher process and forks a
rank per request:

* :class:`Zygote` starts ``python -m scaledl.profiling.zygote serve SOCKET`` with the ranks'
  allocator environment (glibc reads ``MALLOC_*`` at process start, so they must be the
  zygote's), which imports the modules, prints ``ready`` and accepts requests on a Unix socket.
  It computes nothing (no thread pool exists when it forks) and dies with the launcher.
* A request names a module and its arguments, the environment, the working directory and the
  rank's standard streams (file descriptors, passed with ``SCM_RIGHTS``). The child starts a
  session of its own (its process group is its own, as a launched process's), takes the streams
  and the environment, dies with the zygote, and runs the module as ``python -m`` would. The
  zygote replies ``pid N``, then ``exit C`` when the child ends (``C`` as
  :attr:`subprocess.Popen.returncode`: negative for a signal). A child whose client has gone
  (its end of the connection closed) kills itself.
* A one-rank launch is a request of the launcher (:meth:`Zygote.fork`, returning a
  :class:`ForkedProcess` with the ``Popen`` methods the launcher uses). The ranks of a
  ``torchrun`` launch are requests of ``python -m scaledl.profiling.zygote rank SOCKET MODULE
  ARGS``, torchrun's entrypoint: a client of a few milliseconds that forwards signals to its
  rank and exits with its status, so torchrun's rendezvous, monitoring and failure reports are
  torchrun's.

Each fork is a fresh process for what a launch varies (model initialisation, allocations, the
state of the machine); what it shares with the other launches is the imported code. Only CPU
profiles on one node use it (:attr:`~scaledl.profiling.settings.ProfileSettings.fork_ranks`):
CUDA must not be initialised before a fork, and a GPU workload's measurement dwarfs a launch.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import setproctitle

from scaledl.profiling.interrupt import default_stop_signals, die_with_parent

#: The modules a rank imports before its first workload (transformers' five built-in families'
#: model classes are reached through attribute access, which imports their modules).
PRELOAD_MODULES = ("torch", "torch.distributed", "scaledl.profiling.worker")
PRELOAD_TRANSFORMERS = (
    "BertForMaskedLM",
    "ViTForImageClassification",
    "T5ForConditionalGeneration",
    "LlamaForCausalLM",
    "DeiTForImageClassificationWithTeacher",
)
#: Largest request (module, arguments, environment) in bytes.
MAX_REQUEST_BYTES = 1 << 20
#: Seconds a client waits for the zygote's ``pid`` reply.
REPLY_TIMEOUT_S = 30.0


#: Longest socket path AF_UNIX takes (``sun_path`` is 108 bytes on Linux, NUL included).
MAX_SOCKET_PATH = 107
#: Characters the socket path adds to the base folder: ``/scaledl-zygote-`` (mkdtemp's 8 random
#: characters follow) and ``/zygote.sock``.
_SOCKET_SUFFIX = len("/scaledl-zygote-") + 8 + len("/zygote.sock")


def socket_base_dir() -> str:
    """The folder the zygote's private folder (socket and log) is made in.

    The temporary folder (``TMPDIR``) where the socket path fits in :data:`MAX_SOCKET_PATH`
    characters, else ``/tmp`` (a long ``TMPDIR``, e.g. a test's or a job scheduler's, made the
    bind fail with "AF_UNIX path too long").

    Raises:
        ZygoteError: neither fits or ``/tmp`` is not a writable folder.
    """
    base = tempfile.gettempdir()
    if len(base) + _SOCKET_SUFFIX <= MAX_SOCKET_PATH:
        return base
    if os.path.isdir("/tmp") and os.access("/tmp", os.W_OK | os.X_OK):
        return "/tmp"
    raise ZygoteError(
        f"profiling zygote: the temporary folder {base!r} is too long for a socket path "
        f"({len(base) + _SOCKET_SUFFIX} > {MAX_SOCKET_PATH} characters) and /tmp is not "
        "writable; set TMPDIR to a shorter folder or profiling.fork_ranks: false"
    )


class ZygoteError(RuntimeError):
    """The zygote could not start, or died, or refused a request (the message says which)."""


def _preload() -> None:
    import importlib

    for name in PRELOAD_MODULES:
        importlib.import_module(name)
    try:
        # transformers: optional for the profiler (only Hugging Face families need it).
        import transformers
    except ImportError:
        return
    for name in PRELOAD_TRANSFORMERS:
        getattr(transformers, name, None)


def serve(socket_path: str, preload: bool = True) -> None:
    """The zygote's loop: accept requests on ``socket_path`` and fork a child for each.

    Args:
        socket_path: the Unix socket to listen on (created here).
        preload: import :data:`PRELOAD_MODULES` (and transformers' model modules) first.
    """
    # setproctitle finds the room for a longer title (argv and the environment) on its first
    # call: done here, before a child clears its environment.
    setproctitle.setproctitle(setproctitle.getproctitle())
    if preload:
        _preload()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd is written
    children: dict[int, socket.socket] = {}
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(socket_path)
    server.listen(16)
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([server, wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 512):
                    pass
        if server in ready:
            conn, _ = server.accept()
            pid = _fork(
                conn, [server.fileno(), wake_r, wake_w, *(c.fileno() for c in children.values())]
            )
            if pid is None:
                conn.close()
            else:
                children[pid] = conn
                with contextlib.suppress(OSError):
                    conn.send(f"pid {pid}".encode())
        _reap(children)


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(f"exit {os.waitstatus_to_exitcode(status)}".encode())
            conn.close()


def _fork(conn: socket.socket, close_in_child: list[int]) -> int | None:
    try:
        message, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST_BYTES, 3)
        request = json.loads(message)
        if len(fds) != 3 or not (request.get("module") or request.get("path")):
            raise ValueError(f"a request needs a module or path and 3 streams, got {request}")
    except (OSError, ValueError) as exc:
        with contextlib.suppress(OSError):
            conn.send(f"error {exc}".encode()[:4096])
        return None
    zygote_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        _child(conn, fds, request, close_in_child, zygote_pid)
    for fd in fds:
        os.close(fd)
    return pid


def _child(
    conn: socket.socket, fds: list[int], request: dict, close_fds: list[int], zygote_pid: int
) -> None:
    """Become the requested process; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        default_stop_signals()  # stoppable even if the zygote inherited an ignored SIGTERM
        for fd in close_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        os.setsid()
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        die_with_parent(zygote_pid)  # exits at once if the zygote died before this call
        argv = [str(a) for a in request.get("argv") or []]
        target = ["-m", request["module"]] if request.get("module") else [request["path"]]
        # ps and psutil show the command a fresh interpreter would have had, not the zygote's.
        setproctitle.setproctitle(" ".join([sys.executable, *target, *argv]))
        os.environ.clear()
        os.environ.update(request.get("env") or {})
        os.chdir(request.get("cwd") or os.getcwd())
        threading.Thread(target=_die_with_client, args=(conn,), daemon=True).start()
        # The module was imported by the preload; running it as __main__ is what is meant.
        warnings.filterwarnings("ignore", message=".*found in sys.modules", category=RuntimeWarning)
        if request.get("module"):
            sys.argv = [request["module"], *argv]
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = [request["path"], *argv]
            runpy.run_path(request["path"], run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except BaseException:  # the child's own failure: its traceback goes to its stderr
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(ValueError, OSError):
            stream.flush()
    os._exit(code)


def _die_with_client(conn: socket.socket) -> None:
    try:
        data = conn.recv(16)
    except OSError:
        data = b""
    if not data:  # the client closed its end: nobody waits for this process
        os.kill(os.getpid(), signal.SIGKILL)


class ForkedProcess:
    """A process the zygote forked, with the ``subprocess.Popen`` methods a launcher uses.

    Attributes:
        pid: the child's pid (also its process group and session id).
        returncode: ``None`` while it runs; then its exit status, negative for a signal
            (``-SIGKILL`` when the zygote died under it).
        zygote_died: the connection closed without the zygote's ``exit`` reply: the zygote
            died, and the child with it.
    """

    def __init__(self, conn: socket.socket, pid: int) -> None:
        self._conn = conn
        self.pid = pid
        self.returncode: int | None = None
        self.zygote_died = False

    def _read(self, timeout: float | None) -> bool:
        if self.returncode is not None:
            return True
        ready, _, _ = select.select([self._conn], [], [], timeout)
        if not ready:
            return False
        try:
            data = self._conn.recv(64)
        except OSError:
            data = b""
        text = data.decode(errors="replace")
        self.zygote_died = not text.startswith("exit ")
        self.returncode = -signal.SIGKILL if self.zygote_died else int(text.split()[1])
        self._conn.close()
        return True

    def poll(self) -> int | None:
        """The exit status if the process has ended, else ``None``."""
        self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        if not self._read(timeout):
            raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode


def fork_from(
    socket_path: str,
    module: str | None,
    argv: Sequence[str],
    env: Mapping[str, str],
    fds: Sequence[int],
    cwd: str | None = None,
    path: str | None = None,
) -> ForkedProcess:
    """Ask the zygote at ``socket_path`` to fork ``python -m module argv`` (or ``path``).

    Args:
        socket_path: the zygote's socket.
        module: module to run as ``__main__`` (or ``None`` with ``path``).
        argv: its arguments.
        env: its whole environment.
        fds: its stdin, stdout and stderr (file descriptors; the child gets duplicates).
        cwd: its working directory (default: this process's).
        path: a script to run instead of a module.

    Returns:
        The running :class:`ForkedProcess`.

    Raises:
        ZygoteError: no zygote listens there, it refused the request or did not answer.
    """
    request = {"module": module, "path": path, "argv": list(argv), "env": dict(env),
               "cwd": cwd or os.getcwd()}  # fmt: skip
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(socket_path)
        socket.send_fds(conn, [json.dumps(request).encode()], list(fds))
        ready, _, _ = select.select([conn], [], [], REPLY_TIMEOUT_S)
        reply = conn.recv(4096).decode(errors="replace") if ready else "no reply"
    except OSError as exc:
        conn.close()
        raise ZygoteError(f"profiling zygote at {socket_path}: {exc}") from exc
    if not reply.startswith("pid "):
        conn.close()
        raise ZygoteError(f"profiling zygote at {socket_path}: {reply or 'closed'}")
    return ForkedProcess(conn, int(reply.split()[1]))


class Zygote:
    """A running zygote (``python -m scaledl.profiling.zygote serve``), child of this process.

    Args:
        env: the zygote's environment (its children's until a request replaces it; the
            allocator's ``MALLOC_*`` variables take effect from here).
        startup_timeout_s: seconds the imports may take before :class:`ZygoteError`.
        preload: import the worker's modules (``False``: a bare zygote, for tests).
    """

    def __init__(
        self, env: Mapping[str, str], startup_timeout_s: float = 600.0, preload: bool = True
    ) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="scaledl-zygote-", dir=socket_base_dir()))
        self.socket_path = str(self._dir / "zygote.sock")
        self._log = self._dir / "zygote.log"
        cmd = [sys.executable, "-m", "scaledl.profiling.zygote", "serve", self.socket_path]
        if not preload:
            cmd.append("--bare")
        with open(self._log, "wb") as log:
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                env=dict(env), start_new_session=True,
                preexec_fn=functools.partial(die_with_parent, os.getpid()),
            )  # fmt: skip
        assert self._proc.stdout is not None
        deadline = time.monotonic() + startup_timeout_s
        line = b""
        while time.monotonic() < deadline and self._proc.poll() is None:
            ready, _, _ = select.select([self._proc.stdout], [], [], 0.5)
            if ready:
                line = self._proc.stdout.readline()
                break
        if line == b"" and self._proc.poll() is None:  # its stdout closed: it is exiting
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5.0)
        if line.strip() != b"ready":
            log_text = self._log.read_bytes().decode(errors="replace") if self._log.exists() else ""
            last = (log_text.strip().splitlines() or ["no output"])[-1]
            how = (
                "exited"
                if self._proc.poll() is not None
                else f"timed out after {startup_timeout_s:g} s"
            )
            self.close()
            raise ZygoteError(
                f"profiling zygote did not start: {how} ({last}); "
                "profiling.fork_ranks: false launches fresh interpreters instead"
            )

    @property
    def pid(self) -> int:
        """The zygote's process id."""
        return self._proc.pid

    def alive(self) -> bool:
        """Whether the zygote still runs."""
        return self._proc.poll() is None

    def death(self, timeout_s: float = 5.0) -> str:
        """Why a launch forked from this zygote ended: the zygote's death, in one line.

        For a :class:`ForkedProcess` whose ``zygote_died`` is set. Waits up to ``timeout_s``
        seconds for the zygote's exit status (its sockets close as it exits).
        """
        advice = "(profiling.fork_ranks: false launches fresh interpreters instead)"
        try:
            code = self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return (
                f"the profiling zygote (pid {self.pid}) closed the launch's connection without "
                f"its exit status {advice}"
            )
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        return (
            f"the profiling zygote (pid {self.pid}) died during the launch ({how}), ending the "
            f"processes it had forked; the next launch starts a new zygote {advice}"
        )

    def fork(self, module: str, argv: Sequence[str], env: Mapping[str, str], fds: Sequence[int],
             cwd: str | None = None) -> ForkedProcess:  # fmt: skip
        """:func:`fork_from` this zygote."""
        return fork_from(self.socket_path, module, argv, env, fds, cwd)

    def close(self) -> None:
        """Stop the zygote (its running children die with it) and remove its folder."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def rank_main(socket_path: str, module: str, argv: Sequence[str]) -> None:
    """Entrypoint torchrun runs per rank: fork it from the zygote, forward signals, exit with it.

    Never returns: exits with the rank's status (1 and a line on stderr when it died of a
    signal, or the zygote was unreachable).
    """
    die_with_parent()  # torchrun's death ends this client, and so the rank
    try:
        rank = fork_from(socket_path, module, argv, os.environ, (0, 1, 2))
    except ZygoteError as exc:
        print(f"scaledl rank: {exc}", file=sys.stderr, flush=True)
        os._exit(1)

    def forward(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(rank.pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, forward)
    code = rank.wait()
    if code < 0:
        print(f"scaledl rank: pid {rank.pid} died of signal {-code}", file=sys.stderr, flush=True)
    sys.stderr.flush()
    os._exit(code if code >= 0 else 1)


def main(argv: list[str] | None = None) -> None:
    """``serve SOCKET [--bare]`` (the zygote) or ``rank SOCKET MODULE [ARGS...]`` (a client)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) >= 2 and args[0] == "serve":
        serve(args[1], preload="--bare" not in args[2:])
    elif len(args) >= 3 and args[0] == "rank":
        rank_main(args[1], args[2], args[3:])
    else:
        sys.exit("usage: python -m scaledl.profiling.zygote serve SOCKET [--bare] | "
                 "rank SOCKET MODULE [ARGS...]")  # fmt: skip


if __name__ == "__main__":
    main()
