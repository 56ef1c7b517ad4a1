"""The ``scaledl`` entry point: SIGTERM unwinds a command as Ctrl-C does (no temporary left)."""

import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pandas as pd
import pytest
from tiny_specs import tiny_spec

REPO = Path(__file__).resolve().parents[2]


def test_the_installed_command_runs_main_which_handles_sigterm():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["scaledl"] == "scaledl.cli:main"


@pytest.mark.slow
def test_sigterm_mid_stream_leaves_no_temporary_and_the_output_untouched(registry_root, tmp_path):
    # 30,000 rows: several seconds of prediction after the temporary appears (it is created
    # before the first row is read), far more than the polling below needs to see it.
    rows = [tiny_spec(("bert", "vit", "t5")[i % 3], batch_size=1 + i % 4, world_size=1 + i % 2,
                      dataset_size=100 + i) for i in range(30_000)]  # fmt: skip
    workloads = tmp_path / "w.csv"
    pd.DataFrame(rows).to_csv(workloads, index=False)
    out = tmp_path / "O.parquet"
    out.write_bytes(b"the previous output")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    predictor = registry_root / "scaledl"
    command = [sys.executable, "-m", "scaledl.cli", "predict", "--predictor", str(predictor),
               "--workloads", str(workloads), "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while not list(tmp_path.glob(".O.parquet.*.tmp")):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        assert proc.poll() is None, "finished before the signal: make the input larger"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr.decode()
    assert "stopped by SIGTERM" in stderr.decode()
    assert "Traceback" not in stderr.decode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["O.parquet", "w.csv"]
    assert out.read_bytes() == b"the previous output"
