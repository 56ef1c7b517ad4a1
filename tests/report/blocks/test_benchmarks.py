"""The benchmarks block's renderer (:mod:`scaledl.report.blocks.benchmarks`)."""

import json
import shutil
from pathlib import Path

import pytest

from scaledl.report.blocks.benchmarks import (
    SECTIONS,
    BenchmarkResultError,
    benchmark_markdown,
    read_benchmark_results,
)

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"


def test_every_committed_result_is_rendered_not_listed_as_missing():
    block = benchmark_markdown(read_benchmark_results(RESULTS))
    for name in SECTIONS:
        assert f"`{name}`: not run yet" not in block, f"benchmarks/results/{name} is missing"


def test_missing_file_is_listed_and_missing_field_named(tmp_path):
    shutil.copy(RESULTS / "design.json", tmp_path / "design.json")
    block = benchmark_markdown(read_benchmark_results(tmp_path))
    assert block.startswith("* D-optimal exchange (`bench_design.py`)")
    assert "* `plan.json`: not run yet (`make bench` writes it)." in block
    data = json.loads((tmp_path / "design.json").read_text())
    del data["quick_preset"]["lhs_log_det"]
    (tmp_path / "design.json").write_text(json.dumps(data))
    with pytest.raises(BenchmarkResultError, match="design.json.*quick_preset.lhs_log_det"):
        benchmark_markdown(read_benchmark_results(tmp_path))
