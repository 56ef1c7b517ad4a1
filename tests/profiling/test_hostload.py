import os
import subprocess
import sys
import time

import pytest

from scaledl.profiling.hostload import ForeignLoadMeter, wait_for_quiet_host

# serial: the foreign-load meter needs an idle host (tests/conftest.py).
pytestmark = pytest.mark.serial

BUSY = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass\n"


def busy_loop(seconds: float) -> subprocess.Popen:
    """A bounded busy loop on one core, outside this process's tree."""
    return subprocess.Popen([sys.executable, "-c", BUSY.format(s=seconds)], start_new_session=True)


def test_meter_counts_other_trees_and_not_its_own():
    """One busy child, two meters over the same interval: the meter rooted at this process owns
    the child (not foreign), the meter rooted elsewhere sees it as foreign. The difference is the
    child's own CPU time, whatever else the host runs meanwhile."""
    import psutil

    own = ForeignLoadMeter(root_pid=os.getpid())
    other = ForeignLoadMeter(root_pid=1 << 22)  # a tree that does not exist: all is foreign
    proc = busy_loop(3.0)
    try:
        time.sleep(0.3)
        child = psutil.Process(proc.pid)
        cpu0, t0 = sum(child.cpu_times()[:2]), time.monotonic()
        own.start()
        other.start()
        time.sleep(1.5)
        seen_by_other, seen_by_own = other.stop(), own.stop()
        child_cores = (sum(child.cpu_times()[:2]) - cpu0) / (time.monotonic() - t0)
    finally:
        proc.kill()
        proc.wait()
    assert child_cores > 0.2  # the busy loop ran
    assert seen_by_other - seen_by_own == pytest.approx(child_cores, abs=0.2)


def test_meter_stop_before_start_raises():
    with pytest.raises(RuntimeError):
        ForeignLoadMeter().stop()


def test_wait_for_quiet_host_is_bounded_and_reports():
    proc = busy_loop(5.0)
    try:
        time.sleep(0.3)
        started = time.monotonic()
        report = wait_for_quiet_host(0.3, max_wait_s=1.0, sample_s=0.5, root_pid=1 << 22)
        assert time.monotonic() - started < 3.0
        assert not report.quiet and report.max_seen_cores > 0.5
        assert "still busy" in report.describe()
    finally:
        proc.kill()
        proc.wait()
