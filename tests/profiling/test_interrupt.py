"""Stopping is safe: SIGINT / SIGTERM end a profile promptly, with no process left behind."""

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import yaml
from tiny_specs import tiny

import scaledl
from scaledl.profiling.interrupt import (
    ProfilingInterrupted,
    interruption_reason,
    raise_if_stopped,
    stop_signals_raise,
)
from scaledl.profiling.lock import ProfilesLocked, profiles_lock, read_holder
from scaledl.profiling.store import part_statuses, read_run

pytestmark = pytest.mark.slow
PRESETS = Path(scaledl.__file__).parent / "presets"


def slow_preset(directory: Path) -> Path:
    """Smoke settings whose label phase lasts about 2 s a workload (the guard not retrying)."""
    preset = yaml.safe_load((PRESETS / "smoke.yaml").read_text())
    preset["profiling"].update(
        repeats=1, label_min_steps=400, label_max_steps=400, label_budget_s=2.0,
        max_retries=0, drift_tolerance=100.0, allreduce_drift_tolerance=100.0,
        memory_drift_tolerance=100.0,
        max_foreign_load_cores=64.0, quiet_wait_s=0.0,
    )  # fmt: skip
    path = directory / "slow.yaml"
    path.write_text(yaml.safe_dump(preset))
    return path


@pytest.fixture(autouse=True)
def _remove_short_tmpdir(tmp_path):
    """Remove the short TMPDIR :func:`start_profile` linked as ``tmp_path/tmp``."""
    yield
    link = tmp_path / "tmp"
    if link.is_symlink():
        shutil.rmtree(link.resolve(), ignore_errors=True)


def start_profile(tmp_path: Path, out: Path, world_size: int = 1) -> subprocess.Popen:
    """``scaledl profile`` of two tiny workloads: one launch, the worker alone for one rank,
    ``torchrun`` (:mod:`scaledl.profiling.agent`) and its ranks for two. Its temporary
    folders go to ``tmp_path/tmp`` (``TMPDIR``)."""
    workloads = tmp_path / "w.yaml"
    specs = [tiny("bert", batch_size=b, world_size=world_size).to_record() for b in (2, 4)]
    workloads.write_text(yaml.safe_dump([{k: v for k, v in s.items() if k != "workload_id"}
                                         for s in specs]))  # fmt: skip
    preset = slow_preset(tmp_path)
    cmd = [sys.executable, "-c", "from scaledl.cli import main; main()", "profile",
           "--workloads", str(workloads), "--out", str(out), "--preset", str(preset)]  # fmt: skip
    # A short TMPDIR (the zygote's socket path must fit AF_UNIX's 107 characters, which a
    # pytest-xdist tmp_path can exceed); tmp_path/tmp links to it for the checks below.
    if not (tmp_path / "tmp").exists():
        (tmp_path / "tmp").symlink_to(tempfile.mkdtemp(prefix="sdl-", dir="/tmp"))
    env = {**os.environ, "TMPDIR": str((tmp_path / "tmp").resolve())}
    # A session of its own: the test can signal the whole group, as a terminal does.
    return subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.PIPE, text=True,
                            env=env)  # fmt: skip


def wait_for_first_part(out: Path, proc: subprocess.Popen, limit_s: float = 120.0) -> None:
    deadline = time.time() + limit_s
    while time.time() < deadline:
        if any(status == "ok" for status, _ in part_statuses(out).values()):
            return
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.1)
    raise AssertionError("no part finished in time")


def descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


@pytest.mark.timed  # a bound on the seconds a stop takes (tests/conftest.py)
@pytest.mark.parametrize(
    ("send", "signum", "code", "world_size"),
    [("group", signal.SIGINT, 130, 1), ("cli", signal.SIGTERM, 143, 2)],
)
def test_stop_signal_ends_the_launch_and_every_child(tmp_path, send, signum, code, world_size):
    out = tmp_path / "profiles"
    proc = start_profile(tmp_path, out, world_size)
    wait_for_first_part(out, proc)
    children = descendants(proc.pid)
    commands = [" ".join(c.cmdline()) for c in children]
    agents = [c for c in commands if "-m scaledl.profiling.agent" in c]
    ranks = [c for c in commands if "-m scaledl.profiling.worker" in c]
    # CPU ranks are forked by the zygote; torchrun's entrypoints are its clients.
    zygotes = [c for c in commands if "scaledl.profiling.zygote serve" in c]
    clients = [c for c in commands if "scaledl.profiling.zygote rank" in c and c not in agents]
    assert len(ranks) == world_size and len(agents) == (world_size > 1), commands
    assert len(zygotes) == 1 and len(clients) == (world_size if world_size > 1 else 0), commands
    # The launch's and the zygote's scratch folders (task file, launch log, socket).
    scratch = sorted(p.name.split("-")[1] for p in (tmp_path / "tmp").glob("scaledl-*"))
    assert scratch == ["launch", "zygote"], scratch
    sent = time.time()
    if send == "group":
        os.killpg(proc.pid, signum)  # what Ctrl-C in a terminal does
    else:
        proc.send_signal(signum)  # what a scheduler, a container stop or Dagster sends
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert time.time() - sent <= 10.0
    gone, alive = psutil.wait_procs(children, timeout=2)
    assert alive == [], [p.cmdline() for p in alive]
    assert "run the same command again to resume" in err
    assert list((tmp_path / "tmp").glob("scaledl-*")) == []  # removed as on a normal exit
    statuses = part_statuses(out)
    ok = [key for key, (status, _) in statuses.items() if status == "ok"]
    interrupted = [key for key, (status, _) in statuses.items() if status == "interrupted"]
    assert len(ok) >= 1 and len(interrupted) == 1
    assert f": {len(ok)} of 2 (workload, repeat) parts done, {2 - len(ok)} left, " in err
    run = read_run(out / "parts" / interrupted[0][0] / "r0")
    assert signal.Signals(signum).name in run["error"]
    if send != "group":
        return  # the stored parts are the same whichever signal stopped it: resumed once below
    # Resuming keeps the finished parts and measures the rest, the interrupted one included.
    first = {key: statuses[key][1] for key in ok}
    again = start_profile(tmp_path, out)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    after = part_statuses(out)
    assert all(after[key][1] == run_id for key, run_id in first.items())
    assert all(status == "ok" for status, _ in after.values()) and len(after) == 2


def test_second_profiler_into_one_directory_exits_2_naming_the_holder(tmp_path):
    out = tmp_path / "profiles"
    with profiles_lock(out):
        holder = read_holder(out)
        assert holder["pid"] == os.getpid()
        proc = start_profile(tmp_path, out)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert f"pid {os.getpid()}" in err and "another profiler" in err
    assert part_statuses(out) == {}
    assert read_holder(out) is None  # released


def test_lock_waits_then_fails_and_takes_over_a_dead_holder(tmp_path, caplog):
    out = tmp_path / "p"
    with profiles_lock(out):
        with pytest.raises(ProfilesLocked, match="another profiler"):
            with profiles_lock(out, timeout_s=0.2):
                pass
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / ".profile.lock.json").write_text(
        json.dumps({"pid": dead.pid, "host": os.uname().nodename, "started_at": "then"})
    )
    with caplog.at_level("WARNING"):
        with profiles_lock(out):
            pass
    assert "no longer runs" in caplog.text and str(dead.pid) in caplog.text


def test_stop_signals_raise_and_restore_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(ProfilingInterrupted) as info:
        with stop_signals_raise():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert info.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_stop_signal_swallowed_by_logging_is_raised_again():
    """A signal arriving inside ``logging`` (Dagster's ``context.log``) is not lost (stop 33 CI)."""

    class SignalsWhileEmitting(logging.Handler):
        def emit(self, record):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler raises here, inside emit: logging swallows it

    logger = logging.getLogger("scaledl.test.swallow")
    logger.addHandler(SignalsWhileEmitting())
    logger.propagate = False
    with pytest.raises(ProfilingInterrupted) as info:
        with stop_signals_raise():
            logger.warning("a part finished")  # returns normally: the exception was swallowed
            os.kill(os.getpid(), signal.SIGINT)  # a second signal is ignored during clean-up
            time.sleep(0.2)
            raise_if_stopped()
    assert info.value.signum == signal.SIGTERM
    raise_if_stopped()  # outside a block nothing is pending


@pytest.mark.timed  # the ranks must be gone within seconds (tests/conftest.py)
def test_kill_9_of_the_cli_takes_torchrun_and_its_ranks_with_it(tmp_path):
    """Issue 23: SIGKILL runs no handler; the kernel ends the children (PR_SET_PDEATHSIG)."""
    out = tmp_path / "profiles"
    proc = start_profile(tmp_path, out, world_size=2)
    wait_for_first_part(out, proc)
    children = descendants(proc.pid)
    commands = [" ".join(c.cmdline()) for c in children]
    assert any("-m scaledl.profiling.agent" in c for c in commands), commands
    assert sum("-m scaledl.profiling.worker" in c for c in commands) == 2, commands
    assert any("scaledl.profiling.zygote serve" in c for c in commands), commands
    proc.kill()
    proc.wait()
    _, alive = psutil.wait_procs(children, timeout=10)
    assert alive == [], [p.cmdline() for p in alive]
    # Nothing writes any more: the parts stay as they are and the lock is free.
    parts = part_statuses(out)
    with profiles_lock(out):
        assert part_statuses(out) == parts


def test_exit_without_finalizing_flushes_output_and_skips_atexit(tmp_path):
    marker = tmp_path / "atexit-ran"
    log_file = tmp_path / "log.txt"
    code = f"""
import atexit, logging, pathlib
from scaledl.profiling.interrupt import exit_without_finalizing
atexit.register(pathlib.Path({str(marker)!r}).write_text, "ran")
logging.basicConfig(filename={str(log_file)!r}, level=logging.INFO)
logging.getLogger("t").info("logged before the exit")
print("printed before the exit", end="")  # a pipe: block-buffered, not flushed yet
exit_without_finalizing(3)
print("never printed")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "printed before the exit"
    assert "logged before the exit" in log_file.read_text()
    assert not marker.exists()  # the interpreter's shutdown (atexit included) was skipped


def test_an_interruption_is_one_line_naming_the_signal_and_the_seconds():
    assert interruption_reason(signal.SIGINT, 12.4) == "interrupted (SIGINT) after 12 s"
    assert interruption_reason(signal.SIGTERM, 0.2) == "interrupted (SIGTERM) after 0 s"
    assert interruption_reason(signal.SIGINT, -1.0) == "interrupted (SIGINT) after 0 s"


DAGSTER_AFTER_A_RUN = """
import signal, sys
from dagster._utils.interrupts import capture_interrupts
from scaledl.profiling.interrupt import default_stop_signals
if sys.argv[1] == "reset":
    default_stop_signals()
with capture_interrupts():  # what every in-process Dagster run enters and leaves
    pass
print(signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)
"""


def test_default_stop_signals_keep_sigterm_after_dagster_in_a_background_job():
    # A background job starts with SIGINT ignored; leaving a Dagster run maps SIGTERM to SIGINT's
    # handler, so without the reset SIGTERM is ignored from then on.
    def run(mode: str) -> str:
        return subprocess.run(
            [sys.executable, "-c", DAGSTER_AFTER_A_RUN, mode], capture_output=True, text=True,
            timeout=120, check=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        ).stdout.strip()  # fmt: skip

    assert run("as-started") == "True"
    assert run("reset") == "False"
