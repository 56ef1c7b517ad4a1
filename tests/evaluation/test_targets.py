"""The one table of targets: paths, comparators, thresholds, and the committed results."""

import ast
import json
from pathlib import Path
from typing import get_args

import pytest
from metrics_factory import make_metrics

from scaledl.evaluation.coverage import coverage_targets
from scaledl.evaluation.envelope import EvaluationResult, read_result
from scaledl.evaluation.gpu_layouts import layout_targets as gpu_layout_targets
from scaledl.evaluation.gpu_peer import peer_targets
from scaledl.evaluation.profiled_layouts import layout_targets
from scaledl.evaluation.published_runs import PublishedRunsResult, stronger_fixed_mfu
from scaledl.evaluation.published_runs import targets as published_targets
from scaledl.evaluation.reference import target_checks
from scaledl.evaluation.results import Metrics, Skipped
from scaledl.evaluation.targets import (
    BY_NAME,
    TARGETS,
    Comparator,
    Evaluation,
    Target,
    TargetResult,
    for_evaluation,
    gpu_targets,
    group,
    resolve,
    row_for_text,
    target,
)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"


def _committed(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def test_every_target_has_a_unique_name_and_a_known_comparator():
    assert len(BY_NAME) == len(TARGETS)
    assert {t.comparator for t in TARGETS} <= set(get_args(Comparator))
    assert {t.evaluation for t in TARGETS} == set(get_args(Evaluation))
    assert [t.name for t in for_evaluation("published_runs")][0] == "published_answered"
    assert [t.name for t in group("gpu_")] == [
        "gpu_lomo_mean", "gpu_lomo_worst", "gpu_lomo_vs_analytical", "gpu_logo_mean",
    ]  # fmt: skip
    with pytest.raises(KeyError, match="no target 'nope'"):
        target("nope")


def test_paths_resolve_through_models_dicts_and_comparisons():
    metrics = make_metrics()
    assert (
        resolve(metrics, "splits.id.methods.scaledl.mre")
        == metrics.splits.id.methods["scaledl"].mre
    )
    c = resolve(metrics, "significance.splits.id[scaledl,additive]")
    assert (c.method_a, c.method_b) == ("scaledl", "additive")
    assert resolve(metrics, "significance.splits.extrapolation[scaledl,additive]") is None
    assert isinstance(metrics.gpu, Skipped) and resolve(metrics, "gpu.leave_one_model_out") is None
    assert resolve({"a": {"skipped": "why"}}, "a.b") is None
    assert resolve({"a": {"b": 2}}, "a.b") == 2 and resolve({"a": {}}, "a.b") is None


def test_comparators_and_thresholds():
    le = Target("x", "x", "v", "<=", 0.03)
    assert le.check(0.03) is True and le.check(0.031) is False and le.check(None) is None
    noise = Target("x", "x", "v", "<=", 0.03, noise_factor=1.5)
    assert noise.limit(0.04) == pytest.approx(0.06) and noise.check(0.05, noise=0.04)
    assert noise.check(0.05, noise=0.01) is False and noise.check(0.01) is None
    ratio = Target("x", "x", "b", ">=", 6.0, over="a")
    assert ratio.value({"a": 0.1, "b": 0.6}) == pytest.approx(6.0)
    assert ratio.value({"b": 0.6}) is None
    band = Target("x", "{low}-{high} {name}", "v", "within", (0.85, 0.95))
    assert band.check(0.85) and not band.check(0.96) and band.wording(name="ID") == "85%-95% ID"


def test_comparison_targets_read_the_verdict():
    metrics = make_metrics()
    beats = target("beats_additive_id")
    assert beats.check(beats.value(metrics)) is True
    halving = target("doptimal_halving")
    c = halving.value(metrics)
    assert c.method_a == "doptimal@20" and halving.check(c) is True
    worse = c.model_copy(update={"verdict": "worse"})
    assert halving.check(worse) is False


def test_comparison_comparators_read_dicts_and_models_and_against_scales_the_base():
    c = {
        "mre_difference": -0.01,
        "ci_low": -0.02,
        "ci_high": 0.001,
        "verdict": "not distinguishable",
    }
    assert Target("x", "x", "v", "ci_high<", 0.0).check(c) is False
    assert Target("x", "x", "v", "ci_low<=", 0.0).check(c) is True
    assert Target("x", "x", "v", "not_worse", 0.0).check(c) is True
    own = Target("x", "x", "a", "<=", 1.0, against="b")
    assert own.judge({"a": 0.2, "b": 0.2}) == (0.2, True)
    assert own.judge({"a": 0.21, "b": 0.2}) == (0.21, False)
    assert own.judge({"a": 0.2}) == (0.2, None)
    listed = {"cs": [{"method_a": "a", "method_b": "b", "ci_high": -1.0}]}
    assert resolve(listed, "cs[a,b]")["ci_high"] == -1.0 and resolve(listed, "cs[b,a]") is None
    models = {"m": [{"tau": 0.9}, {"tau": None}, {"tau": 0.7}]}
    assert resolve(models, "m.min(tau)") == 0.7 and resolve({"m": []}, "m.min(tau)") is None
    assert Target("x", "{threshold:.1%} {scale:g}x", "v", "<=", 0.95, scale=0.5).wording() == (
        "95.0% 0.5x"
    )


def _numbers(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Constant) and type(n.value) in (int, float) for n in ast.walk(node)
    )


def test_no_module_outside_the_table_holds_a_threshold_constant():
    """A module-level ``*TARGET*`` / ``*THRESHOLD*`` name bound to numbers belongs in the table."""
    found = []
    for path in sorted((ROOT / "scaledl").rglob("*.py")):
        if path == ROOT / "scaledl" / "evaluation" / "targets.py":
            continue
        for node in ast.parse(path.read_text()).body:
            names = [t for t in getattr(node, "targets", [getattr(node, "target", None)]) if t]
            value = getattr(node, "value", None)
            for name in names:
                if (
                    isinstance(name, ast.Name)
                    and any(w in name.id for w in ("TARGET", "THRESHOLD"))
                    and value is not None
                    and _numbers(value)
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name.id}")
    assert found == []


# The committed results: each evaluation's targets, judged again from its result, are the
# entries the file holds.

COMMITTED = {
    "metrics": "metrics.json",
    "gpu_layouts": "gpu_layouts.json",
    "layouts": "layouts.json",
    "published_runs": "published_runs.json",
    "reference": "reference.json",
}


def _read(evaluation: str) -> EvaluationResult:
    return read_result(RESULTS / COMMITTED[evaluation], evaluation)


def test_every_path_without_placeholders_resolves_in_its_committed_result():
    results = {e: _read(e).sections for e in COMMITTED}
    results["metrics"] = Metrics.read(RESULTS / COMMITTED["metrics"])  # the paths of the model
    fixed = [t for t in TARGETS if t.evaluation in results and "{" not in t.path + (t.over or "")]
    assert len(fixed) >= 20
    missing = [t.name for t in fixed if t.value(results[t.evaluation]) is None]
    assert missing == []


@pytest.mark.parametrize("evaluation", sorted(COMMITTED))
def test_every_committed_entry_is_a_row_of_its_evaluation(evaluation):
    result = _read(evaluation)
    assert result.evaluation == evaluation and result.targets
    # metrics.json holds the gpu_layouts rows of its gpu.parallel_layouts section too.
    rows = {evaluation, "gpu_layouts"} if evaluation == "metrics" else {evaluation}
    assert {BY_NAME[t.name].evaluation for t in result.targets} == rows


def _dicts(entries: list[TargetResult]) -> list[dict]:
    return [t.to_dict() for t in entries]


def test_committed_metrics_targets_are_the_tables():
    result = _read("metrics")
    gpu, intervals = result.sections["gpu"], result.sections["intervals"]
    layouts = gpu_layout_targets(gpu["parallel_layouts"]["summary"])
    judged = gpu_targets(gpu) + peer_targets(gpu["peer"]) + layouts
    judged += coverage_targets(intervals, intervals["coverage"])
    assert result.targets == judged
    # The file holds the parallel layouts' entries in their section and in gpu.targets.
    data = _committed("metrics.json")["gpu"]
    assert data["parallel_layouts"]["targets"] == _dicts(layouts) == data["targets"][-4:]


def test_committed_gpu_layouts_targets_are_the_tables():
    result = _read("gpu_layouts")
    assert result.targets == gpu_layout_targets(result.sections["summary"])


def test_committed_layouts_targets_are_the_tables():
    result = _read("layouts")
    assert result.targets == layout_targets(result.sections)
    head = result.sections["variants"][result.sections["headline"]]
    assert layout_targets(head) == result.targets


def test_committed_published_runs_targets_are_the_tables():
    result = PublishedRunsResult.read(RESULTS / "published_runs.json")
    loso = result.protocols["leave_one_source_out"]
    assert result.ratio_baseline == stronger_fixed_mfu(loso)
    judged = published_targets(result.coverage, loso, result.ratio_to_fixed_mfu, result.ranking)
    assert judged == result.targets == _read("published_runs").targets


def test_committed_reference_targets_are_the_tables():
    result = _read("reference")
    assert target_checks(result.sections) == result.targets


# The one entry shape of every result file.

ENTRY = TargetResult(
    name="neusight_layouts", text="NeuSight's 4-GPU rows (all): ScaleDL MRE <= NeuSight's own",
    threshold=1.0, value=0.086, extra={"mre_neusight": 0.077, "n_rows": 11},
    measured="8.6% vs 7.7% (11 rows)", met=False,
)  # fmt: skip


def _target_lists(node, where=""):
    if isinstance(node, dict):
        found = [(f"{where}targets", node["targets"])] if "targets" in node else []
        return found + [x for k, v in node.items() if k != "targets"
                        for x in _target_lists(v, f"{where}{k}.")]  # fmt: skip
    if isinstance(node, list):
        return [x for i, v in enumerate(node) for x in _target_lists(v, f"{where}[{i}].")]
    return []


def test_an_entry_round_trips_through_its_dict_and_json():
    data = ENTRY.to_dict()
    assert list(data) == ["name", "text", "threshold", "value", "ci_low", "ci_high", "extra",
                          "measured", "met"]  # fmt: skip
    assert TargetResult.from_dict(data) == ENTRY
    assert TargetResult.from_dict(json.loads(json.dumps(data))) == ENTRY
    band = target("reference_interval_coverage").result("85.7%", True, value=0.857)
    assert band.to_dict()["threshold"] == [0.8, 1.0]
    assert TargetResult.from_dict(json.loads(json.dumps(band.to_dict()))) == band


def test_target_result_fills_the_row_its_wording_and_threshold():
    entry = target("layouts_mre").result("6.3% (composed 24.1%)", True, value=0.063,
                                         extra={"composed": 0.241}, kind="tp")  # fmt: skip
    assert (entry.name, entry.text) == ("layouts_mre", "leave-one-layout-out MRE, tp held out")
    assert entry.threshold == 0.1 and entry.ci_low is None


def test_entries_of_the_three_earlier_shapes_read_with_their_numbers():
    text_only = TargetResult.from_dict({
        "target": "NeuSight's 4-GPU rows (dp4 rows): ScaleDL MRE <= NeuSight's own",
        "measured": "7.2% vs 8.0% (3 rows)", "reached": True,
    })  # fmt: skip
    assert (text_only.name, text_only.met, text_only.value) == ("neusight_layouts", True, None)
    assert text_only.measured == "7.2% vs 8.0% (3 rows)" and text_only.threshold == 1.0
    layout = TargetResult.from_dict({
        "name": "leave-one-layout-out MRE, fsdp held out", "value": 0.0626,
        "composed": 0.2408, "target": 0.1, "met": True,
    })  # fmt: skip
    assert (layout.name, layout.value, layout.threshold) == ("layouts_mre", 0.0626, 0.1)
    assert layout.extra == {"composed": 0.2408} and layout.text.endswith("fsdp held out")
    reference = TargetResult.from_dict({
        "name": "doptimal@25% better than random@25%", "value": -0.009, "ci_low": -0.05,
        "ci_high": 0.013, "threshold": 0.0, "met": False,
    })  # fmt: skip
    assert reference.name == "reference_sampler_25"
    assert (reference.value, reference.ci_low, reference.ci_high) == (-0.009, -0.05, 0.013)
    band = TargetResult.from_dict({
        "name": "unseen-family interval coverage of ScaleDL, every left-out family (lowest)",
        "value": None, "ci_low": None, "ci_high": None, "threshold": [0.8, 1.0], "met": None,
    })  # fmt: skip
    assert band.threshold == (0.8, 1.0) and band.measured == "not evaluated"
    joined = row_for_text(
        "<= 0.5x the stronger fitted fixed-MFU rule's MRE (fixed_mfu), paired interval below 0"
    )
    assert joined.name == "published_ratio"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({**ENTRY.to_dict(), "met": "yes"}, r"targets\[3\]: field 'met' is 'yes'"),
        ({**ENTRY.to_dict(), "value": "0.1x"}, r"field 'value' is '0.1x'"),
        ({k: v for k, v in ENTRY.to_dict().items() if k != "measured"},
         r"field 'measured' is missing"),
        ({**ENTRY.to_dict(), "reached": True}, r"field 'reached' is unknown"),
        ({**ENTRY.to_dict(), "threshold": [0.1, 0.2, 0.3]}, r"field 'threshold"),
        ({**ENTRY.to_dict(), "name": "nope"}, r"field 'name' is 'nope': .*not a row"),
        ({"target": "no such target", "measured": "1%", "reached": True},
         r"target text 'no such target': matches none"),
        ("met", r"targets\[3\]: not a JSON object"),
    ],
)  # fmt: skip
def test_a_bad_entry_is_an_error_naming_the_field_and_value(entry, message):
    with pytest.raises(ValueError, match=message):
        TargetResult.from_dict(entry, "targets[3]")


@pytest.mark.parametrize(
    ("field", "bad"),
    [("value", "0.5"), ("ci_low", "0.1"), ("ci_high", True), ("threshold", "0.08"),
     ("threshold", ["0.8", 1.0]), ("extra", {"gpus": "3"}), ("extra", {"gpus": False})],
)  # fmt: skip
def test_a_number_that_is_not_a_json_number_is_refused_not_coerced(field, bad):
    with pytest.raises(ValueError, match=rf"targets\[3\]: field '{field}"):
        TargetResult.from_dict({**ENTRY.to_dict(), field: bad}, "targets[3]")


def test_an_int_is_a_number_and_an_extra_count_stays_an_int():
    entry = TargetResult.from_dict({**ENTRY.to_dict(), "value": 1, "extra": {"gpus": 3}})
    assert entry.value == 1.0 and entry.extra == {"gpus": 3}
    assert isinstance(entry.extra["gpus"], int)


def test_a_non_finite_value_is_refused():
    with pytest.raises(ValueError, match="field 'value' is inf"):
        TargetResult.from_dict({**ENTRY.to_dict(), "value": float("inf")})


@pytest.mark.parametrize("name", sorted(COMMITTED.values()))
def test_every_committed_entry_is_of_the_one_shape(name):
    lists = _target_lists(_committed(name))
    assert lists
    for where, entries in lists:
        for i, data in enumerate(entries):
            assert set(data) == set(TargetResult.model_fields), f"{name}: {where}[{i}]"
            entry = TargetResult.from_dict(data, f"{name}: {where}[{i}]")
            assert entry.to_dict() == data
            assert entry.name in BY_NAME and row_for_text(entry.text).name == entry.name
            assert entry.met is None or entry.value is not None, f"{where}[{i}] unmeasured"
