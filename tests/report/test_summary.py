from pathlib import Path

import pytest
from metrics_factory import make_metrics, metrics_dict

from scaledl.evaluation.results import Metrics
from scaledl.report.blocks.markers import (
    BEGIN,
    END,
    ReadmeBlockError,
    markers,
    read_block,
)
from scaledl.report.summary import gpu_block, results_markdown, write_readme_block

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS = "docs/results/metrics.json"
RESULTS_PAGE = "docs/results/metrics.md"


def test_results_page_blocks_are_generated_from_the_committed_results_file():
    """The results page's numbers are exactly those of docs/results/metrics.json (no drift)."""
    metrics = Metrics.read(REPO_ROOT / RESULTS)
    page = (REPO_ROOT / RESULTS_PAGE).read_text()
    assert read_block(page, RESULTS_PAGE) == results_markdown(metrics, RESULTS), (
        f"{RESULTS_PAGE}'s results block differs from {RESULTS}: regenerate it with "
        "`scaledl summary --markdown` (after `make run`) and commit both files"
    )
    assert read_block(page, RESULTS_PAGE, markers("gpu")) == gpu_block(metrics), (
        f"{RESULTS_PAGE}'s GPU block differs from docs/results/metrics.json: regenerate it with "
        "`scaledl summary --markdown`"
    )


def test_markdown_holds_every_split_and_target():
    text = results_markdown(make_metrics(scaledl_ood=0.07), "x.json")
    assert text.startswith("Generated from `x.json`: 10 validated workloads")
    assert "| in-distribution (iteration MRE / RMSE) | 2.5% / 10.0 ms | 20.0% / 100.0 ms |" in text
    assert "| **leave-one-family-out mean** | 7.0% / 10.0 ms | 50.0% / 100.0 ms |" in text
    assert "| extrapolation (largest tokens/step) | 10.0% / 50.0 ms | n/a |" in text
    assert "| doptimal | 20.0% ± 1.0% |" in text
    assert "| doptimal: prior | 25.0% |" in text
    assert (
        "Halving (paired by seed): doptimal@20 vs random@40 -2.0 points [-3.0, -1.0]: better."
        in text
    )
    assert "| in-distribution | -17.5 points [-18.5, -16.5] better | n/a | n/a | n/a |" in text
    assert "Real GPU data (imported profiles): skipped (no imported GPU profiles" in text
    assert "Vidur all-reduce: skipped (include_external is false)." in text
    assert "| OOD MRE <= 8% (ScaleDL, mean over families) | 7.00% | yes |" in text


def test_interval_line_says_how_left_out_families_were_calibrated():
    pooled = results_markdown(make_metrics(), "x.json")
    assert "one score per family" not in pooled  # a metrics file of the pooled calibration
    data = metrics_dict()
    for by in data["intervals"]["ood"]["per_family"].values():
        by["scaledl"]["iteration"]["calibration_families"] = 4
    text = results_markdown(Metrics.from_dict(data), "x.json")
    assert "each left-out family calibrated on the other families, one score per family" in text


def test_write_readme_block(tmp_path):
    results = make_metrics().write(tmp_path / "metrics.json")
    readme = tmp_path / "README.md"
    gpu_begin, gpu_end = markers("gpu")
    readme.write_text(f"intro\n{BEGIN}\n{END}\nmiddle\n{gpu_begin}\nold\n{gpu_end}\n")
    block = write_readme_block(results, readme, "docs/results/metrics.json")
    assert read_block(readme.read_text()) == block
    assert "docs/results/metrics.json" in block
    gpu = read_block(readme.read_text(), bounds=(gpu_begin, gpu_end))
    assert gpu == "The GPU evaluation was skipped: no imported GPU profiles (gpu_profiles)."


def test_a_readme_without_the_gpu_block_is_named(tmp_path):
    results = make_metrics().write(tmp_path / "metrics.json")
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{BEGIN}\n{END}\n")
    with pytest.raises(ReadmeBlockError, match="README.md.*gpu:begin"):
        write_readme_block(results, readme, "docs/results/metrics.json")
