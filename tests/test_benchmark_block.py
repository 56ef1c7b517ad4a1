"""The benchmark block (``benchmarks/readme_block.py``) against the committed results."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location(
        "readme_block", REPO_ROOT / "benchmarks" / "readme_block.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


readme_block = _module()


def test_benchmark_page_block_is_generated_from_the_committed_benchmark_results():
    text = readme_block.README.read_text()
    block = readme_block.read_block(text, str(readme_block.README), readme_block.BOUNDS)
    assert readme_block.README == REPO_ROOT / "docs" / "results" / "benchmarks.md"
    assert block == readme_block.benchmark_markdown(), (
        "docs/results/benchmarks.md's benchmark block differs from benchmarks/results/*.json: "
        "run `make bench` "
        "(or `python benchmarks/readme_block.py`) and commit both"
    )


def test_every_committed_result_is_rendered_not_listed_as_missing():
    block = readme_block.benchmark_markdown()
    for name in readme_block.SECTIONS:
        assert f"`{name}`: not run yet" not in block, f"benchmarks/results/{name} is missing"


def test_missing_file_is_listed_and_missing_field_named(tmp_path):
    shutil.copy(REPO_ROOT / "benchmarks" / "results" / "design.json", tmp_path / "design.json")
    block = readme_block.benchmark_markdown(tmp_path)
    assert block.startswith("* D-optimal exchange (`bench_design.py`)")
    assert "* `plan.json`: not run yet (`make bench` writes it)." in block
    data = json.loads((tmp_path / "design.json").read_text())
    del data["quick_preset"]["lhs_log_det"]
    (tmp_path / "design.json").write_text(json.dumps(data))
    with pytest.raises(readme_block.BenchmarkResultError, match="design.json.*quick_preset"):
        readme_block.benchmark_markdown(tmp_path)
