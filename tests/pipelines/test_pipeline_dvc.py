import filecmp
from pathlib import Path

import pytest

from pipelines.defs.resources import DvcError, DvcResource, read_dvc_file


def _same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(_same_tree(a / d, b / d) for d in cmp.common_dirs)


@pytest.mark.slow
def test_dvc_round_trip_through_a_local_remote(dvc_repo, dvc_exe, tmp_path, run_cmd):
    sh = run_cmd
    repo, remote = dvc_repo
    data = repo / "data"
    (data / "profiles").mkdir(parents=True)
    (data / "profiles" / "runs.csv").write_text("run_id,ms\nr1,1.5\n")
    (data / "README.md").write_text("data\n")
    resource = DvcResource(dvc_executable=str(dvc_exe), repo_root=str(repo))

    first = resource.version(data)
    assert first["md5"].endswith(".dir") and first["nfiles"] == 2 and first["pushed"]
    assert read_dvc_file(repo / "data.dvc")["md5"] == first["md5"]
    sh("git", "add", "-A", cwd=repo)
    sh("git", "commit", "-qm", "data v1", cwd=repo)

    clone = tmp_path / "clone"
    sh("git", "clone", "-q", repo, clone, cwd=tmp_path)
    assert not (clone / "data").exists()
    sh(dvc_exe, "remote", "add", "-f", "-d", "local", remote, cwd=clone)
    sh(dvc_exe, "pull", "-q", cwd=clone)
    assert _same_tree(data, clone / "data")

    (data / "profiles" / "runs.csv").write_text("run_id,ms\nr1,1.5\nr2,2.5\n")
    second = resource.version(data)
    assert second["md5"] != first["md5"]


def test_missing_dvc_executable_is_named(tmp_path):
    resource = DvcResource(dvc_executable=str(tmp_path / "nope" / "dvc"), repo_root=str(tmp_path))
    with pytest.raises(DvcError, match=r"DVC executable not found: .*nope/dvc"):
        resource.version(tmp_path / "data")


def test_data_outside_the_repository_is_rejected(dvc_repo, dvc_exe, tmp_path):
    repo, _ = dvc_repo
    resource = DvcResource(dvc_executable=str(dvc_exe), repo_root=str(repo))
    with pytest.raises(DvcError, match="outside the DVC repository"):
        resource.version(tmp_path / "elsewhere")
