"""The zygote forks processes that behave as launched ones: status, signals, streams, titles."""

import os
import signal
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from scaledl.profiling.launch import forks_ranks
from scaledl.profiling.settings import ProfileSettings
from scaledl.profiling.zygote import (
    MAX_SOCKET_PATH,
    Zygote,
    ZygoteError,
    fork_from,
    socket_base_dir,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

SCRIPT = """
import os, sys, time
print(os.getpid(), os.getsid(0), os.environ.get("ZYGOTE_TEST"), os.getcwd(), *sys.argv[1:],
      flush=True)
mode = sys.argv[1]
if mode == "sleep":
    time.sleep(60)
elif mode == "fail":
    raise RuntimeError("boom")
sys.exit(int(sys.argv[2]))
"""


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zygote")
    (folder / "zygote_probe.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    z = Zygote(env, startup_timeout_s=60, preload=False)
    yield z
    z.close()


def _ended(process: psutil.Process, timeout_s: float = 30.0) -> bool:
    """Whether a process (not ours: reparented, maybe left a zombie) has ended in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _fork(zygote, tmp_path, *argv, env=None):
    out = open(tmp_path / "out.txt", "wb")  # noqa: SIM115 - the child writes to it
    child = zygote.fork(
        "zygote_probe", list(argv), {"ZYGOTE_TEST": "yes", **(env or {})},
        (out.fileno(), out.fileno(), out.fileno()), cwd=str(tmp_path),
    )  # fmt: skip
    out.close()
    return child, tmp_path / "out.txt"


def test_a_forked_module_gets_its_arguments_environment_streams_and_status(zygote, tmp_path):
    child, out = _fork(zygote, tmp_path, "exit", "3")
    assert child.wait(timeout=30) == 3 and child.poll() == 3 and not child.zygote_died
    pid, sid, env, cwd, *argv = out.read_text().split()
    assert int(pid) == child.pid == int(sid)  # a session (and process group) of its own
    assert (env, cwd, argv) == ("yes", str(tmp_path), ["exit", "3"])


def test_a_failure_prints_its_traceback_and_exits_1(zygote, tmp_path):
    child, out = _fork(zygote, tmp_path, "fail")
    assert child.wait(timeout=30) == 1
    assert "RuntimeError: boom" in out.read_text()


def test_a_signal_gives_a_negative_status_and_the_title_is_the_command(zygote, tmp_path):
    child, out = _fork(zygote, tmp_path, "sleep")
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.5)
    assert child.poll() is None
    title = " ".join(psutil.Process(child.pid).cmdline()).strip()  # setproctitle pads
    assert title == f"{sys.executable} -m zygote_probe sleep"
    os.killpg(child.pid, signal.SIGTERM)
    assert child.wait(timeout=30) == -signal.SIGTERM


def test_a_child_stops_on_sigterm_even_when_the_zygote_inherited_it_ignored(tmp_path):
    # Dagster maps SIGTERM to SIGINT's handler, SIG_IGN in a background job or an xdist worker;
    # an ignored signal survives fork and exec, so the zygote started then ignores SIGTERM.
    folder = tmp_path / "probe"
    folder.mkdir()
    (folder / "zygote_probe.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        ignoring = Zygote(env, startup_timeout_s=60, preload=False)
    finally:
        signal.signal(signal.SIGTERM, previous)
    try:
        assert psutil.Process(ignoring._proc.pid).status() != psutil.STATUS_ZOMBIE
        child, _ = _fork(ignoring, tmp_path, "sleep")
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=0.5)
        os.killpg(child.pid, signal.SIGTERM)
        assert child.wait(timeout=30) == -signal.SIGTERM
    finally:
        ignoring.close()


def test_a_child_whose_client_has_gone_kills_itself(zygote, tmp_path):
    child, _ = _fork(zygote, tmp_path, "sleep")
    process = psutil.Process(child.pid)
    child._conn.close()  # the launcher's end of the connection: as if it died
    assert _ended(process)


def test_children_die_with_the_zygote(tmp_path):
    z = Zygote(dict(os.environ), startup_timeout_s=60, preload=False)
    script = tmp_path / "sleep.py"
    script.write_text("import time; time.sleep(60)")
    child = fork_from(z.socket_path, None, [], dict(os.environ), (0, 1, 2), path=str(script))
    process = psutil.Process(child.pid)
    z.close()  # SIGKILL
    assert _ended(process)
    assert child.wait(timeout=30) == -signal.SIGKILL and child.zygote_died
    assert z.death() == (
        f"the profiling zygote (pid {z.pid}) died during the launch (killed by signal 9), ending "
        "the processes it had forked; the next launch starts a new zygote "
        "(profiling.fork_ranks: false launches fresh interpreters instead)"
    )


def test_no_zygote_and_a_bad_request_are_errors(tmp_path, zygote):
    with pytest.raises(ZygoteError, match="zygote at"):
        fork_from(str(tmp_path / "none.sock"), "x", [], {}, (0, 1, 2))
    with pytest.raises(ZygoteError, match="needs a module or path"):
        fork_from(zygote.socket_path, None, [], {}, (0, 1, 2))
    assert zygote.alive()


def test_a_zygote_that_cannot_start_is_an_error_with_its_log():
    env = {**os.environ, "PYTHONPATH": "/nonexistent", "PYTHONHOME": "/nonexistent"}
    with pytest.raises(ZygoteError, match="did not start"):
        Zygote(env, startup_timeout_s=30, preload=False)


def test_a_long_temporary_folder_puts_the_socket_under_tmp(tmp_path, monkeypatch):
    # A pytest-xdist or scheduler TMPDIR can exceed AF_UNIX's 107-character socket path
    long_dir = tmp_path / ("d" * 60) / ("e" * 60)
    long_dir.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(long_dir))
    assert socket_base_dir() == "/tmp"
    z = Zygote(dict(os.environ), startup_timeout_s=60, preload=False)
    try:
        assert z.socket_path.startswith("/tmp/scaledl-zygote-")
        assert len(z.socket_path) <= MAX_SOCKET_PATH
        assert z.pid > 0 and psutil.pid_exists(z.pid)
    finally:
        z.close()
    short = tempfile.mkdtemp(prefix="s", dir="/tmp")  # tmp_path itself may be too long
    try:
        monkeypatch.setattr(tempfile, "tempdir", short)
        assert socket_base_dir() == short  # a short one is kept
    finally:
        os.rmdir(short)


def test_the_rank_client_forwards_signals_and_exits_with_the_rank(zygote, tmp_path):
    cmd = [sys.executable, "-m", "scaledl.profiling.zygote", "rank", zygote.socket_path,
           "zygote_probe"]  # fmt: skip
    done = subprocess.run([*cmd, "exit", "4"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 4, done.stderr
    client = subprocess.Popen([*cmd, "sleep"], stdout=subprocess.PIPE, text=True)
    pid = int(client.stdout.readline().split()[0])
    time.sleep(0.2)  # the client's handlers are installed once it has the pid
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=30) == 1
    assert _ended(psutil.Process(pid)) if psutil.pid_exists(pid) else True


def test_only_cpu_launches_on_one_node_fork():
    on, off = ProfileSettings(), ProfileSettings(fork_ranks=False)
    assert forks_ranks(on, cuda=False, nodes=1)
    assert not forks_ranks(on, cuda=True, nodes=1)
    assert not forks_ranks(on, cuda=False, nodes=2)
    assert not forks_ranks(off, cuda=False, nodes=1)
