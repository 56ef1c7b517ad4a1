"""The published-runs asset writes the result and the HTML section and reports the figures."""

from pathlib import Path

import dagster as dg

from pipelines.defs.assets.published_runs import published_runs_evaluation
from pipelines.defs.config import ScaledlSettings
from scaledl.evaluation import published_runs
from scaledl.evaluation.published_runs import PublishedRunsResult

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "results" / "published_runs.json"


def test_asset_writes_result_and_report_with_the_figures(tmp_path, monkeypatch):
    committed = PublishedRunsResult.read(COMMITTED)
    calls = []

    def evaluate(progress=None):  # the evaluation itself (minutes) is tested on its own
        progress("composed")
        calls.append(progress)
        return committed

    monkeypatch.setattr(published_runs, "evaluate_published_runs", evaluate)
    settings = ScaledlSettings(preset="smoke", data_dir=str(tmp_path))
    out = published_runs_evaluation(context=dg.build_asset_context(), settings=settings)
    reports = settings.layout.reports_dir
    assert len(calls) == 1
    assert PublishedRunsResult.read(reports / "published_runs.json") == committed
    assert "Leave one source out" in (reports / "published_runs.html").read_text()
    loso = committed.protocols["leave_one_source_out"]
    assert out.metadata["mean_mre_scaledl"].value == loso.mean_mre["scaledl"]
    assert out.metadata["answered_share"].value == committed.coverage.answered_share
    assert "torchtitan" in out.metadata["mre_by_source"].value
