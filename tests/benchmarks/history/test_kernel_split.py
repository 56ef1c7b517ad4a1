"""The history script of the tensor-parallel kernel split (benchmarks/history/kernel_split.py)."""

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
from gpu_synthetic import fitted_synthetic, synthetic_layout_labels

from scaledl.evaluation.gpu_layouts import evaluate_layout_rows
from scaledl.external.vidur import load_vidur_allreduce
from scaledl.report.blocks.markers import read_block
from scaledl.report.blocks.registry import BLOCKS

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

REPO = Path(__file__).resolve().parents[3]
GPU = "NVIDIA H100 80GB HBM3"
RESULT = REPO / "docs" / "results" / "gpu_layouts.json"
PAGE = "docs/results/gpu-layouts.md"


def _script():
    path = REPO / "benchmarks" / "history" / "kernel_split.py"
    spec = importlib.util.spec_from_file_location("kernel_split", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    return fitted_synthetic(tmp_path_factory.mktemp("kernel_split"))


def test_the_divided_split_differs_on_the_tensor_parallel_row_only(fitted):
    data, method = fitted
    script = _script()
    peer = pd.DataFrame(
        {"gpu": GPU, "stem": ["tiny_b-train-32-4-dp2", "tiny_b-train-32-4-tp2"],
         "peer_ms": [1.1, 0.8], "file": "p"}
    )  # fmt: skip
    vidur = load_vidur_allreduce(REPO / "external" / "vidur" / "network")
    result = script.evaluate_kernel_split(method, synthetic_layout_labels(data), vidur, peer)
    # the product's result, untouched but for the two columns and the comparison
    product = evaluate_layout_rows(method, synthetic_layout_labels(data), vidur, peer)
    assert {k: v for k, v in result.items() if k != "kernel_split"} == {
        **product, "rows": result["rows"]}  # fmt: skip
    divide = ("scaledl_divide_ms", "scaledl_divide_re")
    assert [{k: v for k, v in r.items() if k not in divide} for r in result["rows"]] == (
        product["rows"]
    )
    rows = {r["layout"]: r for r in result["rows"]}
    assert rows["dp2"]["scaledl_divide_ms"] == pytest.approx(rows["dp2"]["scaledl_ms"])
    assert rows["tp2"]["scaledl_divide_ms"] != pytest.approx(rows["tp2"]["scaledl_ms"])
    assert rows["tp2"]["scaledl_divide_ms"] < rows["tp2"]["scaledl_ms"]
    split = result["kernel_split"]
    assert (split["all"]["n"], split["tp_rows"]["n"]) == (3, 1)
    assert "skipped" in split["tp_rows"]["paired"]
    assert split["ranking_operators"]["pairs"] == split["ranking_divide"]["pairs"] == 3
    with pytest.raises(ValueError, match="2 rows for 3 labels"):
        labels = synthetic_layout_labels(data)
        script.with_divided_rows(method, labels, {"rows": result["rows"][:2]}, vidur)


def test_the_results_page_line_is_the_committed_comparison(capsys):
    """The line below the page's block is the committed file's ``kernel_split``, rendered."""
    script = _script()
    committed = json.loads(RESULT.read_text())
    page = (REPO / PAGE).read_text()
    line = script.kernel_split_line(committed["kernel_split"])
    assert line in page and line not in read_block(page, PAGE, BLOCKS["gpu-layouts"].bounds)
    assert script.main(["--line", str(RESULT)]) == 0
    assert capsys.readouterr().out.strip() == line
