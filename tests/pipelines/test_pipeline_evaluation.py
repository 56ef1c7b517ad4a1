"""The evaluation_report asset: progress in the run's log, per-stage seconds in its metadata."""

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from pipelines.defs.assets.evaluation import evaluation_report
from pipelines.defs.config import ScaledlSettings

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

TABLES = Path(__file__).resolve().parents[1] / "evaluation" / "data"
TINY = {"methods": ["analytical"], "ablations": [], "seeds": 1, "n_jobs": 1,
        "learning_curve_methods": ["analytical"], "learning_curve_sizes": [9],
        "learning_curve_seeds": 1, "include_external": False, "figures": False}  # fmt: skip


def test_the_report_logs_progress_and_gives_each_stage_its_seconds(tmp_path):
    settings = ScaledlSettings(preset="smoke", data_dir=str(tmp_path))
    settings.layout.search_space_path.parent.mkdir(parents=True)
    settings.layout.search_space_path.write_text(json.dumps({"name": "t", "evaluation": TINY}))
    shutil.copytree(TABLES, settings.layout.validated_dir)
    out = evaluation_report(context=dg.build_asset_context(), settings=settings)
    for stage in ("load", "splits", "learning_curve", "external", "figures", "total"):
        assert out.metadata[f"seconds_{stage}"].value >= 0, stage
    assert out.metadata["seconds_splits"].value > 0
    table = out.metadata["stage_seconds"].value
    assert "| splits" in table and "| total" in table
    assert "gpu_cache" not in out.metadata  # no GPU evaluation in this preset
