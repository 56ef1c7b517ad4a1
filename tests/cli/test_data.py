"""``scaledl validate`` and ``scaledl import``: unwritable outputs and bad imports exit 2."""

import errno
import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from faults import tmpfs
from typer.testing import CliRunner

from scaledl.cli import app, common
from scaledl.cli.common import writable_folder

NEUSIGHT = Path(__file__).resolve().parents[2] / "external" / "neusight"


def invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result, " ".join(result.output.split())  # one line: messages wrap at the width


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_validate_on_a_read_only_profiles_folder(profiled, tmp_path):
    with tmpfs(tmp_path / "ro", size="16m") as mount:
        shutil.copytree(profiled.out_dir, mount / "profiles")
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        before = _snapshot(mount / "profiles")
        result, text = invoke("validate", mount / "profiles")
        assert result.exit_code == 2, text
        assert text == (
            f"error: --out {mount / 'validated'}: cannot write the validated tables here "
            "(Read-only file system); give --out a writable folder"
        )
        outputs = (
            "--out",
            tmp_path / "v",
            "--quarantine",
            tmp_path / "q",
            "--report",
            tmp_path / "r",
        )
        result, text = invoke("validate", mount / "profiles", *outputs)
        assert result.exit_code == 0, text
        assert (tmp_path / "v" / "runs.parquet").is_file()
        assert _snapshot(mount / "profiles") == before  # nothing measured lost or changed


def test_an_unwritable_output_folder_is_one_line_naming_it(tmp_path, monkeypatch):
    # Root writes through a chmod'd folder: the read-only file system is injected (EROFS).
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(common.tempfile, "TemporaryFile", read_only)
    with pytest.raises(
        ValueError, match=r"--report .*/r: cannot write the report here \(Read-only"
    ):
        writable_folder(tmp_path / "r", "--report", "the report")


def test_import_of_a_nan_label_exits_2_and_writes_no_table(tmp_path):
    root = tmp_path / "neusight"
    root.mkdir()
    for sub in ("device_configs", "model_configs"):
        (root / sub).symlink_to(NEUSIGHT / sub)
    gpu = root / "label" / "Tesla_P4"
    gpu.mkdir(parents=True)
    (gpu / "bert_large-train-512-8-dp4.json").write_text(
        '{"num_layer": 24, "e2e_latency": NaN, "fw_latency": 1, "bwall_latency": 1}'
    )
    result, text = invoke("import", "neusight", root, "--out", tmp_path / "out")
    assert result.exit_code == 2, text
    assert (
        "bert_large-train-512-8-dp4.json: not valid JSON: field 'e2e_latency' (value NaN)" in text
    )
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.parquet"))


SCALE_RUNS = Path(__file__).resolve().parents[2] / "external" / "scale_runs"


@pytest.mark.skipif(not SCALE_RUNS.is_dir(), reason="external/scale_runs not in this checkout")
def test_import_published_runs_writes_runs_quarantine_and_counts(tmp_path):
    rows = pd.read_csv(SCALE_RUNS / "megatron_lm.csv", dtype=str, keep_default_na=False)
    rows = rows.iloc[[12, 13]].copy()
    rows.iloc[1, rows.columns.get_loc("precision")] = "fp6"
    src = tmp_path / "two_rows.csv"
    rows.to_csv(src, index=False)
    result, text = invoke("import", "published-runs", src, "--out", tmp_path / "out")
    assert result.exit_code == 0, text
    assert "1 of 2 rows accepted (1 with a step time)" in text
    assert "quarantined 1: unknown precision" in text
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert json.loads(runs["job"].iloc[0])["tp_size"] == 1 and runs["source"].iloc[0] == "two_rows"
    quarantine = pd.read_csv(tmp_path / "out" / "quarantine.csv", dtype=str)
    assert quarantine.iloc[0][["row", "field", "value"]].tolist() == ["2", "precision", "fp6"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["per_source"]["two_rows"] == {
        "rows": 2, "accepted": 1, "quarantined": 1, "with_iteration_s": 1
    }  # fmt: skip


@pytest.mark.skipif(not SCALE_RUNS.is_dir(), reason="external/scale_runs not in this checkout")
def test_import_published_runs_never_writes_over_its_input(tmp_path):
    src = tmp_path / "runs.csv"
    src.write_bytes((SCALE_RUNS / "megatron_lm.csv").read_bytes())
    before = src.read_bytes()
    result, text = invoke("import", "published-runs", src, "--out", tmp_path)
    assert result.exit_code == 2, text
    assert "--out (runs.csv)" in text and "the same file as the input PATH" in text
    assert src.read_bytes() == before


def test_import_published_runs_of_a_file_without_a_column_exits_2(tmp_path):
    src = tmp_path / "short.csv"
    src.write_text("source,table\nx,y\n")
    result, text = invoke("import", "published-runs", src, "--out", tmp_path / "out")
    assert result.exit_code == 2, text
    assert text.startswith(f"error: {src}: column(s) ['source_repo'")
    assert "Traceback" not in text
