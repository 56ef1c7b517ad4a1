"""``scaledl evaluate published-runs``: the command around the evaluation (stubbed here).

The evaluation itself is covered by tests/evaluation/test_published_runs.py; this checks what
the command writes and prints from a result, here the committed one.
"""

import json
from pathlib import Path

from typer.testing import CliRunner

import scaledl.evaluation.published_runs as published_runs
from scaledl.cli import app

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "results" / "published_runs.json"


def test_published_runs_writes_the_result_page_block_and_report(tmp_path, monkeypatch):
    result = published_runs.PublishedRunsResult.from_dict(json.loads(COMMITTED.read_text()))
    monkeypatch.setattr(published_runs, "evaluate_published_runs", lambda *a, **k: result)
    page = tmp_path / "page.md"
    page.write_text((ROOT / "docs" / "results" / "published-runs.md").read_text())
    out, report = tmp_path / "result.json", tmp_path / "report.html"
    args = ["evaluate", "published-runs", "--out", out, "--readme", page, "--report", report]
    run = CliRunner().invoke(app, [str(a) for a in args])
    assert run.exit_code == 0, run.output
    for target in result.targets:
        reached = {True: "yes", False: "no", None: "not measured"}[target.met]
        assert f"{target.text}: {target.measured} (reached: {reached})" in run.output
    assert json.loads(out.read_text()) == json.loads(COMMITTED.read_text())
    assert page.read_text() == (ROOT / "docs" / "results" / "published-runs.md").read_text()
    assert report.stat().st_size > 0
