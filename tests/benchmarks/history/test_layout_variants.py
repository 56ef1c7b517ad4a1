"""The history script of the layout variants (benchmarks/history/layout_variants.py).

The whole committed ``docs/results/layouts.json`` is reproduced by running the script with
``--check`` (several minutes; not in ``make test``). Here: its page block is the committed
file rendered, and on a small profile its output has the committed file's format and its
recipe part is exactly what the product writes.
"""

import importlib.util
import json
from pathlib import Path

import pytest
from layout_results import product_part
from scaledl_fixtures import layout_slice

from scaledl.evaluation.profiled_layouts import HEADLINE, evaluate_layouts
from scaledl.parallel.recipe import CANDIDATES
from scaledl.report.blocks.markers import read_block

REPO = Path(__file__).resolve().parents[3]
RESULT = REPO / "docs" / "results" / "layouts.json"


def _script():
    path = REPO / "benchmarks" / "history" / "layout_variants.py"
    spec = importlib.util.spec_from_file_location("layout_variants", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _script()

FOLD = {"n_workloads": 2, "mre_composed": 0.2, "mre_corrected": 0.05}
PAIRED = {"mre_difference": -0.15, "ci_low": -0.2, "ci_high": -0.1, "verdict": "better"}
RANKING = {"models": [{"model": "bert", "layouts": ["dp2", "tp2", "pp2-1f1b-m2"],
                       "tau_corrected": 1.0, "tau_composed": None}]}  # fmt: skip
EXAMPLE = {
    "dataset": "d",
    "headline": "plain_layers",
    "variants": {
        "current": {"folds": {"tp": {**FOLD, "mre_corrected": 0.2}}, "ranking": RANKING},
        "selected": {
            "folds": {
                "ddp": {**FOLD, "selected": "plain_layers"},
                "tp": {**FOLD, "corrected_vs_current": PAIRED, "selected": "fold_layers"},
            },
            "ranking": RANKING,
        },
    },
    "ranking": RANKING,
}  # fmt: skip


def test_the_block_renders_variants_choices_and_ranking():
    text = script.variants_markdown(EXAMPLE)
    assert "| current | tp | 2 | 20.0% | 20.0% | - |" in text
    assert "| selected | tp | 2 | 20.0% | 5.0% | -15.0 [-20.0, -10.0] (better) |" in text
    assert "| selected | ddp |" not in text  # the data-parallel fold ranks, it has no target
    assert "`selected` per held-out kind: ddp: plain_layers, tp: fold_layers." in text
    assert "| selected (Kendall tau, corrected) | 1.00 |" in text
    assert "gnn_no_edges" not in text


def test_the_block_renders_the_gnn_ablation_of_the_profile_and_its_repeats():
    worse = {**PAIRED, "mre_difference": 0.02, "ci_low": 0.01, "ci_high": 0.03, "verdict": "worse"}
    gnn_fold = {**FOLD, "corrected_vs_gnn_no_edges": PAIRED,
                "corrected_vs_plain_layers_overlap": worse}  # fmt: skip
    variants = {**EXAMPLE["variants"],
                "gnn": {"folds": {"ddp": FOLD, "tp": gnn_fold}, "ranking": RANKING}}  # fmt: skip
    ablation = script.gnn_ablation(variants)
    assert list(ablation) == ["tp"]  # the data-parallel fold has no target
    again = {"dataset": "e", "gnn_ablation": ablation}
    text = script.variants_markdown({**EXAMPLE, "variants": variants, "repeats": [again]})
    expected = ("tp: gnn - gnn_no_edges -15.0 [-20.0, -10.0] (better), "
                "gnn - ridge +2.0 [+1.0, +3.0] (worse).")  # fmt: skip
    assert f"paired per held-out workload (MRE points, 95% CI): {expected}" in text
    assert f"On e: {expected}" in text


def test_the_history_page_block_is_the_committed_result():
    result = json.loads(RESULT.read_text())
    page = str(script.PAGE)
    assert read_block((REPO / page).read_text(), page, script.BOUNDS) == script.variants_markdown(
        result
    )


def test_the_committed_variant_folds_never_trained_on_their_held_out_kind():
    result = json.loads(RESULT.read_text())
    assert list(result["variants"]) == list(script.VARIANTS)
    for name, variant in result["variants"].items():
        for kind, fold in variant["folds"].items():
            if name != "current":
                trained = fold["layer_samples_by_kind"]
                assert kind not in trained and sum(trained.values()) > 0, (name, kind)
            if name == "selected":
                assert fold["selected"] in fold["inner_mre"]
    assert result["folds"] == result["variants"][result["headline"]]["folds"]


def _keys(result: dict) -> dict:
    """The format of a result: its keys, each variant's fold keys, the rows' columns.

    Left out: the paired comparisons (``corrected_vs_*``; none in a fold of one workload) and
    ``selected``'s ``overlap`` (there when the chosen candidate fits overlap factors).
    """

    def kept(name: str, key: str) -> bool:
        return not key.startswith("corrected_vs_") and (name, key) != ("selected", "overlap")

    return {
        "top": set(result),
        "variants": {
            name: {kind: {k for k in f if kept(name, k)} for kind, f in v["folds"].items()}
            for name, v in result["variants"].items()
        },
        "row": set(result["workloads"][0]),
    }


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Every variant evaluated on one model's eight layouts of the committed profile."""
    data = layout_slice(tmp_path_factory.mktemp("layout-variants") / "slice")
    return data, script.evaluate_variants(data)


def test_the_script_writes_the_committed_format(small):
    _, fresh = small
    committed = json.loads(RESULT.read_text())
    for key in ("repeats", "across", "evaluated_on"):  # added by evaluate_all, from the CLI
        committed.pop(key)
    assert _keys(fresh) == _keys(committed)
    for name, variant in fresh["variants"].items():  # the paired comparisons of a larger fold
        for kind in ("fsdp", "pp"):  # three workloads each in the small profile
            got, want = (set(v["folds"][kind]) for v in (variant, committed["variants"][name]))
            if name == "selected":
                got, want = got - {"overlap"}, want - {"overlap"}
            assert got == want, (name, kind)
    for fold in fresh["variants"]["selected"]["folds"].values():
        assert ("overlap" in fold) == CANDIDATES[fold["selected"]][1]


def test_the_recipe_part_of_the_script_is_the_products(small):
    data, fresh = small
    assert evaluate_layouts(data) == product_part(fresh)
    assert fresh["variants"][HEADLINE]["folds"] == fresh["folds"]
