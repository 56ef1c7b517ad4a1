"""Start the Dagster UI (``dagster dev``) so that stopping it stops every process it started.

Usage::

    PORT=3000 .venv/bin/python scripts/ui.py [--host 127.0.0.1] [--port 3000]

``DAGSTER_HOME`` defaults to ``<repo>/.dagster_home`` (prepared with the repository's
``dagster.yaml``). ``dagster dev`` runs in its own session/process group with SIGINT and SIGTERM
restored to their defaults (a shell that backgrounds a job makes it ignore SIGINT, and the
``dagster dev`` started then ignores Ctrl-C). On SIGINT, SIGTERM or SIGHUP the wrapper asks
``dagster dev`` to stop (SIGINT), then terminates and finally kills the process group and every
descendant. The wrapper is a child subreaper, so descendants that detach stay its descendants.
If the wrapper itself is killed (SIGKILL), ``dagster dev`` gets SIGKILL from the kernel
(``PR_SET_PDEATHSIG``) and a watchdog process kills the descendants it last saw.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parents[1]
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 15.0
WATCH_INTERVAL_S = 0.5


def _prctl(option: int, value: int) -> None:
    """``prctl(option, value)`` on Linux; a no-op elsewhere."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _child_setup() -> None:
    """In the child before exec: default signal handlers and SIGKILL when the wrapper dies."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _dagster_executable() -> str:
    candidate = Path(sys.executable).parent / "dagster"
    return str(candidate) if candidate.exists() else "dagster"


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _kill_all(procs: list[psutil.Process], sig: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


def watchdog(wrapper_pid: int, child_pid: int) -> int:
    """Kill ``child_pid``'s process tree as last seen once ``wrapper_pid`` is gone."""
    try:
        wrapper = psutil.Process(wrapper_pid)
    except psutil.NoSuchProcess:
        wrapper = None
    seen: dict[int, psutil.Process] = {}
    while wrapper is not None and wrapper.is_running():
        for proc in _descendants(child_pid):
            seen.setdefault(proc.pid, proc)
        seen = {pid: p for pid, p in seen.items() if p.is_running()}
        if not seen and not psutil.pid_exists(child_pid):
            return 0
        time.sleep(WATCH_INTERVAL_S)
    for proc in _descendants(child_pid):
        seen.setdefault(proc.pid, proc)
    _kill_all([p for p in seen.values() if p.is_running()], signal.SIGKILL)
    return 0


class UiProcess:
    """``dagster dev`` under the wrapper's control."""

    def __init__(self, host: str, port: int, dagster_home: Path) -> None:
        env = {**os.environ, "DAGSTER_HOME": str(dagster_home)}
        # No target: in the repository root `dagster dev` reads the code location from
        # pyproject.toml's [tool.dg] (pipelines.definitions).
        cmd = [_dagster_executable(), "dev", "-h", host, "-p", str(port)]
        self.proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=env, start_new_session=True, preexec_fn=_child_setup
        )
        self.watchdog = subprocess.Popen(
            [sys.executable, __file__, "--watchdog", str(os.getpid()), str(self.proc.pid)],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )

    def tree(self) -> list[psutil.Process]:
        """``dagster dev`` and all descendants of the wrapper except the watchdog."""
        me = psutil.Process()
        return [p for p in me.children(recursive=True) if p.pid != self.watchdog.pid]

    def stop(self, grace_s: float = GRACE_S) -> None:
        """SIGINT to ``dagster dev``, then SIGTERM and SIGKILL to everything left."""
        procs = self.tree()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        _, alive = psutil.wait_procs(procs, timeout=grace_s * 2 / 3)
        alive += [p for p in self.tree() if p not in alive]
        if alive:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except OSError:
                pass
            _kill_all(alive, signal.SIGTERM)
            _, alive = psutil.wait_procs(alive, timeout=grace_s / 3)
        alive += [p for p in self.tree() if p not in alive]
        if alive:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            _kill_all(alive, signal.SIGKILL)
            psutil.wait_procs(alive, timeout=5)
        self.proc.poll()
        self.watchdog.terminate()
        self.watchdog.wait(timeout=5)


def main(argv: list[str] | None = None) -> int:
    """Run the UI until it exits or the wrapper gets SIGINT/SIGTERM/SIGHUP."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--watchdog"]:
        return watchdog(int(args[1]), int(args[2]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "3000")))
    opts = parser.parse_args(args)

    sys.path.insert(0, str(REPO_ROOT))
    from pipelines.home import prepare_home

    home = prepare_home()
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    ui = UiProcess(opts.host, opts.port, home)
    print(f"Dagster UI on http://{opts.host}:{opts.port} (DAGSTER_HOME={home})", flush=True)
    while not stopping and ui.proc.poll() is None:
        time.sleep(0.2)
    ui.stop()
    if stopping:
        return 128 + stopping[0]
    return ui.proc.returncode or 0


if __name__ == "__main__":
    raise SystemExit(main())
