"""``scaledl list-predictors`` on paths that are not registry roots: one line, never a traceback."""

import shutil

import pytest
from typer.testing import CliRunner

from scaledl.cli import app


def invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result, " ".join(result.output.split())  # one line: messages wrap at the width


def test_a_file_exits_2(tmp_path):
    (tmp_path / "w.csv").write_text("family\n")
    result, text = invoke("list-predictors", "--registry", tmp_path / "w.csv")
    assert result.exit_code == 2, text
    assert "w.csv: not a registry root (a file, not a folder)" in text
    assert "Traceback" not in text


def test_a_missing_folder_is_said(tmp_path):
    result, text = invoke("list-predictors", "--registry", tmp_path / "typo")
    assert result.exit_code == 0, text
    assert "typo: no predictor (the folder does not exist)" in text


@pytest.mark.slow
def test_a_name_directory_or_bundle_points_up(registry_root, tmp_path):
    name_dir = tmp_path / "scaledl"
    shutil.copytree(registry_root / "scaledl", name_dir)
    result, text = invoke("list-predictors", "--registry", name_dir)
    assert result.exit_code == 0, text
    assert "a name directory: --registry takes its parent" in text
    result, text = invoke("list-predictors", "--registry", name_dir / "v2")
    assert "it is a bundle: --registry takes the folder two levels above it" in text
    result, text = invoke("list-predictors", "--registry", tmp_path)
    assert result.exit_code == 0 and " v2 " in text and "no predictor" not in text
