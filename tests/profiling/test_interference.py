"""The interference guard end to end: a real profile while another process busies a core."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_specs import tiny

from scaledl.profiling.launch import profile_workloads
from scaledl.profiling.settings import ProfileSettings
from scaledl.profiling.store import consolidate, current_marker_path

# serial: the foreign-load meter and the guard's probes need an idle host (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

# Waits for the launcher's marker file (a workload has started), then keeps one core busy for
# BUSY_S seconds and stops by itself.
BUSY_S = 3.0
_BUSY = """
import os, sys, time
marker = sys.argv[1]
deadline = time.time() + 120
while not os.path.exists(marker) and time.time() < deadline:
    time.sleep(0.01)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    pass
"""
# Starts the busy loop as a grandchild and exits, so the busy loop is not in the test's (the
# launcher's) process tree: to the guard it is another process, as on a shared machine.
_DETACH = """
import subprocess, sys
p = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]],
                     start_new_session=True, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
print(p.pid)
"""


def detached_busy_loop(marker: Path, seconds: float) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _DETACH, _BUSY, str(marker), str(seconds)],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(out.stdout.strip())


def test_disturbed_workload_is_remeasured_never_silently_accepted(tmp_path):
    workloads = [tiny("bert"), tiny("vit")]
    settings = ProfileSettings(
        warmup_steps=1,
        instrumented_steps=1,
        layer_stride=2,
        repeats=2,
        label_min_steps=8,
        label_budget_s=0.5,
        timeout_s=60,
        max_retries=1,
        retry_wait_s=15.0,
        quiet_wait_s=0.0,
        probe_repeats=3,
    )
    pid = detached_busy_loop(current_marker_path(tmp_path), BUSY_S)
    try:
        summary = profile_workloads(workloads, tmp_path, settings, progress=False)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    runs = consolidate(tmp_path)["runs"].sort_values("started_at").reset_index(drop=True)
    assert summary.failed == {} and len(runs) == 4
    # The first workload measured overlapped the busy loop: disturbed, then measured again once
    # the host was quiet (or, if it stayed busy, flagged). Never accepted as it was.
    first = runs.iloc[0]
    assert first["disturbed_attempts"] >= 1
    assert first["attempts"] == 2 or first["interference"]
    assert (
        first["foreign_load_cores"] < settings.foreign_load_limit(cuda=False)
        or first["interference"]
    )
    # Every accepted part was measured quiet.
    accepted = runs[~runs["interference"].astype(bool)]
    assert (accepted["foreign_load_cores"] <= 0.25).all()
    # Two independent launches per workload, repeat 0 of both before repeat 1 of either.
    assert sorted(runs["repeat"]) == [0, 0, 1, 1]
    assert list(runs["repeat"]) == [0, 0, 1, 1]
    assert runs.groupby("workload_id")["repeat"].nunique().eq(2).all()
    # The adaptive stop rule and the pinning are recorded.
    assert (runs["label_steps"] >= 8).all()
    assert set(runs["label_stop_reason"]) <= {"precise", "budget", "max_steps"}
    all_cores = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    assert (runs["affinity"] == f"rank0:{all_cores}").all()  # world size 1 only: every core
    # Resuming skips every complete (workload, repeat) part.
    # (a part still disturbed is measured again).
    again = profile_workloads(workloads, tmp_path, settings, progress=False)
    assert again.requested == 4
    assert again.skipped == 4 - int(runs["interference"].astype(bool).sum())
