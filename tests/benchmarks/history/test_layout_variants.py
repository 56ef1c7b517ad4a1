"""The history script of the layout variants (benchmarks/history/layout_variants.py).

The whole committed ``docs/results/layouts.json`` is reproduced by running the script with
``--check`` (several minutes; not in ``make test``). Here: on a small profile its output has the
committed file's format and its recipe part is exactly what the product writes (its page block:
tests/report/blocks/test_registry.py).
"""

import importlib.util
import json
from pathlib import Path

import pytest
from layout_results import product_part
from scaledl_fixtures import layout_slice

from scaledl.evaluation.profiled_layouts import HEADLINE, evaluate_layouts
from scaledl.parallel.recipe import CANDIDATES

REPO = Path(__file__).resolve().parents[3]
RESULT = REPO / "docs" / "results" / "layouts.json"


def _script():
    path = REPO / "benchmarks" / "history" / "layout_variants.py"
    spec = importlib.util.spec_from_file_location("layout_variants", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _script()


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
    for key in ("evaluation", "schema_version", "seconds"):  # the envelope, added by main
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
