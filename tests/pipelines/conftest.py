"""Shared helpers of the pipeline tests: the DVC executable and throw-away git/DVC repos."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DVC = REPO_ROOT / ".venv-dvc" / "bin" / "dvc"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


def sh(*cmd: str | Path, cwd: Path) -> str:
    """Run a command, failing the test with its output when it fails."""
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
        env={**os.environ, **GIT_ENV}, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture
def run_cmd():
    """:func:`sh` as a fixture."""
    return sh


@pytest.fixture
def dvc_exe() -> Path:
    """The project's DVC executable (tests skip when ``.venv-dvc`` is not installed)."""
    if not DVC.is_file():
        pytest.skip(f"DVC executable not found at {DVC}: create .venv-dvc with dvc installed")
    return DVC


@pytest.fixture
def dvc_repo(tmp_path: Path, dvc_exe: Path) -> tuple[Path, Path]:
    """A git + DVC repository with a local default remote: ``(repo, remote)``."""
    repo, remote = tmp_path / "repo", tmp_path / "remote"
    repo.mkdir()
    remote.mkdir()
    sh("git", "init", "-q", cwd=repo)
    sh(dvc_exe, "init", "-q", cwd=repo)
    sh(dvc_exe, "config", "core.analytics", "false", cwd=repo)
    sh(dvc_exe, "remote", "add", "-d", "local", remote, cwd=repo)
    return repo, remote
