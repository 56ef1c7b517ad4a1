"""The 4-GPU block's renderer and the committed ``docs/results/gpu_layouts.json``."""

import json
from pathlib import Path

from typer.testing import CliRunner

from scaledl.cli import app
from scaledl.evaluation.gpu_layouts import layout_summary, layout_targets
from scaledl.report.blocks.gpu_layouts import gpu_layouts_markdown
from scaledl.report.gpu_report import gpu_markdown

ROOT = Path(__file__).resolve().parents[3]
RESULT = ROOT / "docs" / "results" / "gpu_layouts.json"


def _row(layout: str, true: float, ours: float, theirs: float | None) -> dict:
    return {"gpu": "G", "model": "m", "layout": layout, "global_batch_size": 4,
            "true_ms": true, "scaledl_ms": ours, "compute_ms": ours - 2, "tp_allreduce_ms": 1.0,
            "p2p_ms": 0.0, "step_ms": 1.0, "neusight_ms": theirs,
            "scaledl_re": abs(ours - true) / true,
            "neusight_re": None if theirs is None else abs(theirs - true) / true,
            "device_seen": layout != "dp4"}  # fmt: skip


def _example() -> dict:
    rows = [_row("dp4", 100, 110, 105), _row("dp4", 100, 95, 120), _row("tp4", 200, 210, None)]
    summary = layout_summary(rows)
    return {"label_source": "labels", "peer_source": "peer", "n_training_workloads": 5,
            "rows": rows, "summary": summary,
            "targets": [t.to_dict() for t in layout_targets(summary)],
            "not_modelled": ["X y: no Vidur measurements of its system"],
            "unmatched": ["G m-train-1-4-tp4"]}  # fmt: skip


def test_block_renders_rows_kinds_and_targets():
    text = gpu_layouts_markdown(_example())
    assert "| G (never trained on) | m | dp4 | 4 | 100 | 110 | 108 | 1.0 | 0.0 | 1.0 | 105 |" in (
        text
    )
    assert "| G | m | tp4 | 4 | 200 | 210 | 208 | 1.0 | 0.0 | 1.0 | n/a | 5.0% | n/a |" in text
    assert "| dp4 | 2 | 7.5% | 12.5% | -5.0 pt |" in text
    assert "| tp4 | 0 | n/a | n/a | | | 0 paired row(s); an interval needs 2 |" in text
    assert "ScaleDL MRE <= NeuSight's own | no paired row | n/a |" in text
    assert "Not predicted: X y: no Vidur measurements of its system." in text
    assert "No NeuSight prediction: G m-train-1-4-tp4." in text


def test_the_gpu_block_carries_the_summary_line_only_when_evaluated():
    gpu = {"source": "s", "n_workloads": 1, "targets": [],
           "leave_one_model_out": {"per_gpu": {"G": {"scaledl": {"mre": 0.1, "n": 1}}},
                                   "mean_over_gpus": {"scaledl": 0.1},
                                   "max_over_gpus": {"scaledl": 0.1}}}  # fmt: skip
    assert "4-GPU rows" not in gpu_markdown(gpu)
    text = gpu_markdown({**gpu, "parallel_layouts": _example()})
    assert "ScaleDL vs NeuSight MRE: dp4 7.5% vs 12.5% (2 rows); tp4 n/a; all" in text


def test_the_committed_result_pairs_every_neusight_row():
    result = json.loads(RESULT.read_text())
    assert result["summary"]["overall"]["n"] == len(result["rows"]) == 11


def test_cli_names_missing_parallel_labels(tmp_path):
    missing = tmp_path / "parallel_labels.parquet"
    result = CliRunner().invoke(
        app,
        ["evaluate-gpu-layouts", "--profiles", str(tmp_path), "--parallel-labels", str(missing),
         "--out", str(tmp_path / "o.json")],
    )  # fmt: skip
    assert result.exit_code == 2
    assert str(missing) in result.output


def test_the_html_report_section_tables_the_4_gpu_rows():
    from scaledl.report.gpu_report import gpu_report_html

    gpu = {"source": "s", "n_workloads": 1, "gpus": ["G"], "models": ["m"], "targets": [],
           "leave_one_model_out": {"per_gpu": {"G": {"scaledl": {"mre": 0.1, "n": 1}}},
                                   "mean_over_gpus": {"scaledl": 0.1},
                                   "max_over_gpus": {"scaledl": 0.1}}}  # fmt: skip
    assert "4-GPU rows" not in gpu_report_html(gpu)
    html = gpu_report_html({**gpu, "parallel_layouts": _example()})
    assert "4-GPU rows (Megatron-LM" in html and "<td>dp4</td>" in html and "12.5%" in html
