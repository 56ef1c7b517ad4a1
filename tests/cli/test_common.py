"""No command replaces its input: an output resolving to an input (or to another output) exits 2."""

import os

import pandas as pd
import pytest
from typer.testing import CliRunner

from scaledl.cli import app
from scaledl.cli.common import refuse_overwrite


def invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result, " ".join(result.output.split())  # one line: messages wrap at the width


def _workloads(path):
    frame = pd.DataFrame({"family": ["bert"], "batch_size": [2], "world_size": [1]})
    if path.suffix == ".parquet":
        frame.to_parquet(path)
    else:
        frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize("spelling", ["same", "dotdot", "symlink", "hardlink"])
def test_predict_refuses_an_out_that_is_its_workloads(tmp_path, suffix, spelling):
    source = _workloads(tmp_path / f"F{suffix}")
    (tmp_path / "sub").mkdir()
    out = {
        "same": source,
        "dotdot": tmp_path / "sub" / ".." / source.name,
        "symlink": tmp_path / "sub" / f"link{suffix}",
        "hardlink": tmp_path / "sub" / f"hard{suffix}",
    }[spelling]
    if spelling == "symlink":
        out.symlink_to(source)
    elif spelling == "hardlink":
        os.link(source, out)
    before = source.read_bytes()
    # The predictor is never reached: the check comes before any work.
    result, text = invoke(
        "predict", "--predictor", tmp_path / "none", "--workloads", source, "--out", out
    )
    assert result.exit_code == 2, text
    assert f"--out {out}: the same file as the input --workloads {source}" in text
    assert "refused" in text and "Traceback" not in text
    assert source.read_bytes() == before


def test_predict_detail_refuses_a_per_layer_table_that_is_its_workloads(tmp_path):
    source = _workloads(tmp_path / "pred.layers.parquet")
    before = source.read_bytes()
    out = tmp_path / "pred.parquet"
    result, text = invoke(
        "predict", "--predictor", tmp_path / "none", "--workloads", source, "--out", out,
        "--detail",
    )  # fmt: skip
    assert result.exit_code == 2, text
    assert f"--out (per-layer table) {source}: the same file as the input --workloads" in text
    assert "Traceback" not in text and source.read_bytes() == before and not out.exists()


def test_plan_refuses_an_out_that_is_its_model_file(tmp_path):
    model = _workloads(tmp_path / "m.csv")
    before = model.read_bytes()
    out = tmp_path / "x" / ".." / "m.csv"
    result, text = invoke(
        "plan", "--dataset-size", 10, "--epochs", 1, "--price-per-device-hour", 1,
        "--predictor", tmp_path / "none", "--model", model, "--out", out,
    )  # fmt: skip
    assert result.exit_code == 2 and "the same file as the input --model" in text, text
    assert model.read_bytes() == before


def test_design_refuses_to_augment_its_out_in_place(tmp_path):
    design = _workloads(tmp_path / "design.parquet")
    before = design.read_bytes()
    result, text = invoke("design", "--preset", "smoke", "--augment", design, "--out", design)
    assert result.exit_code == 2 and "the same file as the input --augment" in text, text
    assert design.read_bytes() == before


def test_validate_refuses_an_out_or_quarantine_that_is_the_profiles(tmp_path):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    result, text = invoke("validate", profiles, "--out", tmp_path / "profiles" / "")
    assert result.exit_code == 2 and "the same file as the input PATH" in text, text
    result, text = invoke("validate", profiles, "--out", tmp_path / "v", "--quarantine",
                          tmp_path / "v")  # fmt: skip
    assert result.exit_code == 2 and "--quarantine" in text and "the output --out" in text, text


def test_distinct_paths_pass(tmp_path):
    (tmp_path / "a.csv").write_text("x\n")
    (tmp_path / "r2").mkdir()
    refuse_overwrite({"--out": tmp_path / "b.csv", "--png": None}, {"--w": tmp_path / "a.csv"})
    refuse_overwrite({"--out": tmp_path / "b.json"}, {"--repeat": [tmp_path / "r2"], "--a": None})
    refuse_overwrite({"--out": tmp_path / "quick"}, {"--preset": "quick"})  # a name, no file
    with pytest.raises(ValueError, match="the same file as the input --repeat"):
        refuse_overwrite(
            {"--out": tmp_path / "r2"}, {"--repeat": [tmp_path / "r1", tmp_path / "r2"]}
        )
