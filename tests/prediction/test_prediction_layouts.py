"""Layout rows take their device's layout calibration, else the current recipe, and say which."""

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from scaledl_fixtures import save_beside
from tiny_specs import tiny_spec
from typer.testing import CliRunner

from scaledl.cli import app
from scaledl.prediction.layouts import RECIPE_CURRENT, RECIPE_PREDICTOR, recipe_lines
from scaledl.prediction.predictor import load_predictor
from scaledl.workloads.spec import Workload

pytestmark = pytest.mark.slow  # the tiny bundle (registry_root) profiles first

REPO = Path(__file__).resolve().parents[2]

ROWS = [tiny_spec("bert", num_layers=2, batch_size=4, world_size=2),
        tiny_spec("bert", num_layers=2, batch_size=4, world_size=2, sharding="fsdp"),
        tiny_spec("bert", num_layers=2, batch_size=4, world_size=2, dp_size=1, pp_size=2,
                  micro_batches=2)]  # fmt: skip


@pytest.fixture
def name_dir(registry_root, tmp_path):
    """A private copy of the tiny predictor's name directory (tests add calibrations)."""
    target = tmp_path / "scaledl"
    shutil.copytree(registry_root / "scaledl", target)
    return target


def test_without_a_calibration_layouts_take_the_current_recipe_and_say_so(name_dir):
    result = load_predictor(name_dir).predict(ROWS)
    assert result["recipe"].tolist() == [RECIPE_PREDICTOR, RECIPE_CURRENT, RECIPE_CURRENT]
    (line,) = recipe_lines(result["recipe"].value_counts().to_dict())
    assert "current for 2 row(s)" in line and "scaledl fit-layouts" in line
    for page in re.findall(r"docs/[\w/.-]+\.md", line):  # the page it points to exists
        assert (REPO / page).is_file(), page
    assert "docs/" in line
    assert "no layout profile corrects it" in result["extrapolation"].iloc[1]


def test_a_calibration_answers_its_device_layouts(name_dir, layout_calibration):
    plain = load_predictor(name_dir).predict(ROWS)
    target = save_beside(layout_calibration, name_dir / "v2")
    predictor = load_predictor(name_dir)
    result = predictor.predict(ROWS)
    label = f"calibrated:{layout_calibration.recipe.name}@{target.name}"
    assert result["recipe"].tolist() == [RECIPE_PREDICTOR, label, label]
    assert result["iteration_s"].iloc[0] == plain["iteration_s"].iloc[0]  # DDP: the GNN's
    ws = [Workload.parse({**row, "device_name": predictor.devices[0]}) for row in ROWS[1:]]
    _, corrected_ms = predictor.layout_calibration(predictor.devices[0]).predict(ws)
    np.testing.assert_allclose(result["iteration_s"].iloc[1:], corrected_ms / 1000.0)
    assert label in result["extrapolation"].iloc[1]
    (line,) = recipe_lines(result["recipe"].value_counts().to_dict())
    assert line.startswith(f"layout recipe: {label} for 2 row(s)")


def test_the_cli_prints_the_recipe(name_dir, layout_calibration):
    inline = [x for k, v in ROWS[1].items() if k != "family" for x in ("--set", f"{k}={v}")]
    args = ["predict", "--predictor", str(name_dir), "--family", "bert", *inline]
    before = CliRunner().invoke(app, args)
    assert before.exit_code == 0, before.output
    assert "layout recipe: current for 1 row(s)" in before.output
    save_beside(layout_calibration, name_dir / "v2")
    after = CliRunner().invoke(app, args)
    assert after.exit_code == 0, after.output
    assert f"layout recipe: calibrated:{layout_calibration.recipe.name}@" in after.output
