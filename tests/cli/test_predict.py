"""``scaledl predict``: a workloads file and an inline workload together are refused."""

import pandas as pd
import pytest
from tiny_specs import tiny_spec
from typer.testing import CliRunner

from scaledl.cli import app


def invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result, " ".join(result.output.split())  # one line: messages wrap at the width


@pytest.mark.parametrize("out", [None, "pred.csv"])  # the streamed path too
@pytest.mark.parametrize(
    ("inline", "named"),
    [
        (["--family", "bert"], "--family"),
        (["--set", "batch_size=8"], "--set"),
        (["--family", "bert", "--set", "batch_size=8"], "--family / --set"),
    ],
)
def test_a_file_and_an_inline_workload_are_refused(tmp_path, inline, named, out):
    """Either would be ignored silently; refused before the predictor is even looked for."""
    csv = tmp_path / "w.csv"
    pd.DataFrame([tiny_spec("bert")]).to_csv(csv, index=False)
    extra = ["--out", tmp_path / out] if out else []
    result, text = invoke(
        "predict", "--predictor", tmp_path / "none", "--workloads", csv, *inline, *extra
    )
    assert result.exit_code == 2, text
    assert f"--workloads {csv} and {named}: give either a file or an inline workload" in text
    assert "Traceback" not in text and not (tmp_path / "pred.csv").exists()


def test_plan_names_its_model_option(tmp_path):
    csv = tmp_path / "m.csv"
    pd.DataFrame([tiny_spec("bert")]).to_csv(csv, index=False)
    result, text = invoke(
        "plan", "--dataset-size", 1024, "--epochs", 1, "--price-per-device-hour", 1,
        "--predictor", tmp_path / "none", "--model", csv, "--family", "bert",
    )  # fmt: skip
    assert result.exit_code == 2, text
    assert f"--model {csv} and --family: give either a file or an inline workload" in text


@pytest.mark.parametrize(
    ("out", "named"),
    [
        ("pred.csv", "--out"),  # streamed
        ("pred.parquet", "--out"),
        ("layers", "--out (per-layer table)"),  # with --detail: X.layers.csv is the folder
    ],
)
def test_an_out_that_is_a_folder_is_refused_before_any_work(tmp_path, out, named):
    """Found before the predictor is loaded (it does not exist here), not after predicting."""
    csv = tmp_path / "w.csv"
    pd.DataFrame([tiny_spec("bert")]).to_csv(csv, index=False)
    folder = tmp_path / ("pred.layers.csv" if out == "layers" else out)
    folder.mkdir()
    given = tmp_path / "pred.csv" if out == "layers" else folder
    detail = ["--detail"] if out == "layers" else []
    result, text = invoke(
        "predict", "--predictor", tmp_path / "none", "--workloads", csv, "--out", given, *detail
    )
    assert result.exit_code == 2, text
    assert f"{named} {folder}: a folder; give a file path in it" in text
