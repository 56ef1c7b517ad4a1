"""Stopping a Dagster run that profiles: no worker of the launch survives it.

Dagster terminates a run by interrupting its process (the run worker receives SIGINT in its main
thread, as ``dagster job execute`` does on Ctrl-C; a container stop sends SIGTERM). The run here
materialises the design and then the design's one shard (``profiling_shard``) on an in-process
test instance inside a child process, which the test interrupts once the first workload is
profiled.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

import scaledl
from scaledl.profiling.store import part_statuses

# timed: a bound on the seconds a stop takes (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.timed]
REPO = Path(__file__).resolve().parents[2]

RUN = """
import sys
import dagster as dg
from pipelines.definitions import defs as load_defs
from pipelines.defs.config import ScaledlSettings
from pipelines.defs.resources import DvcResource, LocalPredictorStore, LocalTorchrunLauncher

data, preset = sys.argv[1], sys.argv[2]
definitions = load_defs()
resources = {"settings": ScaledlSettings(preset=preset, data_dir=data),
             "launcher": LocalTorchrunLauncher(), "predictor_store": LocalPredictorStore(),
             "dvc": DvcResource()}
with dg.instance_for_test() as instance:
    assets = list(definitions.assets)
    design = dg.materialize(assets, selection=["search_space", "workload_design"],
                            resources=resources, instance=instance)
    # SCALEDL_PROFILING_SHARDS=1: the one shard holds the whole design.
    result = dg.materialize(assets, selection=["profiling_shard"], partition_key="0-of-1",
                            resources=resources, instance=instance, raise_on_error=False)
sys.exit(0 if result.success else 3)
"""


def slow_smoke(directory: Path) -> Path:
    """The smoke preset with a label phase of about 2 s a workload, the guard not retrying."""
    preset = yaml.safe_load((Path(scaledl.__file__).parent / "presets" / "smoke.yaml").read_text())
    preset["profiling"].update(
        repeats=1, label_min_steps=400, label_max_steps=400, label_budget_s=2.0,
        max_retries=0, drift_tolerance=100.0, memory_drift_tolerance=100.0,
        max_foreign_load_cores=64.0, quiet_wait_s=0.0,
    )  # fmt: skip
    path = directory / "slow-smoke.yaml"
    path.write_text(yaml.safe_dump(preset))
    return path


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stopping_a_profiling_run_leaves_no_worker(tmp_path, signum):
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN, str(data), str(slow_smoke(tmp_path))],
        cwd=REPO,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path), "SCALEDL_PROFILING_SHARDS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    profiles = data / "profiles"
    deadline = time.time() + 240
    while not any(s == "ok" for s, _ in part_statuses(profiles).values()):
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.time() < deadline, "no workload profiled in time"
        time.sleep(0.2)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert any("scaledl.profiling.worker" in " ".join(c.cmdline()) for c in children)
    sent = time.time()
    proc.send_signal(signum)
    proc.communicate(timeout=60)
    assert proc.returncode != 0  # the run did not succeed
    assert time.time() - sent <= 15.0
    _, alive = psutil.wait_procs(children, timeout=2)
    assert alive == [], [p.cmdline() for p in alive]
    statuses = [s for s, _ in part_statuses(profiles).values()]
    assert "ok" in statuses and statuses.count("interrupted") == 1
