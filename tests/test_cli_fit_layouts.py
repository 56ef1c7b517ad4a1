"""``scaledl fit-layouts``: saves the calibration beside the predictor; bad input exits 2."""

import dataclasses
import shutil

import pandas as pd
import pytest
from scaledl_fixtures import layout_slice
from typer.testing import CliRunner

import scaledl.parallel.calibration as calibration_module
from scaledl.cli import app
from scaledl.prediction.predictor import load_predictor

pytestmark = pytest.mark.slow  # the tiny bundle (registry_root) profiles first


def invoke(*args):
    result = CliRunner().invoke(app, ["fit-layouts", *[str(a) for a in args]])
    return result, " ".join(result.output.split())


@pytest.fixture
def name_dir(registry_root, tmp_path):
    target = tmp_path / "scaledl"
    shutil.copytree(registry_root / "scaledl", target)
    return target


def fitted_as(monkeypatch, calibration, device):
    """The CLI's fit returns ``calibration`` as fitted on ``device`` (the fit is tested alone)."""
    cal = dataclasses.replace(calibration, device_name=device)
    monkeypatch.setattr(calibration_module, "fit_layout_calibration", lambda directory: cal)


def test_fit_layouts_saves_beside_the_predictor_and_reports(name_dir, layout_calibration,
                                                            monkeypatch, tmp_path):  # fmt: skip
    device = load_predictor(name_dir).devices[0]
    fitted_as(monkeypatch, layout_calibration, device)
    result, text = invoke("--profiles", tmp_path, "--predictor", name_dir)
    assert result.exit_code == 0, result.output
    assert f"recipe: {layout_calibration.recipe.name}" in text
    assert "in-sample (NOT an accuracy claim)" in text and "scaledl evaluate-layouts" in text
    assert load_predictor(name_dir).layout_calibration(device).recipe.name == (
        layout_calibration.recipe.name
    )


def test_profiles_of_another_device_exit_2_naming_it(name_dir, layout_calibration, monkeypatch,
                                                     tmp_path):  # fmt: skip
    fitted_as(monkeypatch, layout_calibration, "cpu:Some Other CPU")
    result, text = invoke("--profiles", tmp_path, "--predictor", name_dir)
    assert result.exit_code == 2
    assert "field 'device_name' (value 'cpu:Some Other CPU')" in text and "trained on" in text
    assert not (name_dir / "v2" / "layouts").exists()


def test_bad_profiles_and_predictors_exit_2(name_dir, tmp_path):
    result, text = invoke("--profiles", tmp_path / "nowhere", "--predictor", name_dir)
    assert result.exit_code == 2 and "not a directory of validated profiles" in text
    (tmp_path / "empty").mkdir()
    result, text = invoke("--profiles", tmp_path / "empty", "--predictor", name_dir)
    assert result.exit_code == 2 and "workloads.parquet" in text and "Traceback" not in text
    result, text = invoke("--profiles", tmp_path, "--predictor", tmp_path / "no-bundle")
    assert result.exit_code == 2 and "not a predictor bundle" in text
    ddp = layout_slice(tmp_path / "ddp")
    w = pd.read_parquet(ddp / "workloads.parquet")
    w[w["tp_size"].isna()].to_parquet(ddp / "workloads.parquet")
    result, text = invoke("--profiles", ddp, "--predictor", name_dir)
    assert result.exit_code == 2 and "need both data-parallel and layout workloads" in text
