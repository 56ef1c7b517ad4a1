"""``python -m scaledl.profiling.agent``: torchrun's launcher, its arguments and exit statuses."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def run_agent(tmp_path, script: str) -> subprocess.CompletedProcess:
    path = tmp_path / "rank.py"
    path.write_text(script)
    cmd = [sys.executable, "-m", "scaledl.profiling.agent", "--standalone", "--nnodes=1",
           "--nproc-per-node=2", "--monitor-interval=0.5", str(path)]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_a_launch_that_succeeds_runs_every_rank_and_exits_0(tmp_path):
    done = run_agent(
        tmp_path,
        "import os, pathlib\n"
        "pathlib.Path(f\"rank{os.environ['RANK']}-of-{os.environ['WORLD_SIZE']}\").touch()\n",
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.glob("rank*-of-*")) == ["rank0-of-2", "rank1-of-2"]


def test_a_failing_rank_fails_the_launch_as_in_torchrun(tmp_path):
    done = run_agent(tmp_path, "import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n")
    assert done.returncode == 1
    assert "ChildFailedError" in done.stderr and "exitcode  : 3" in done.stderr
