"""The one table of accuracy targets: paths, comparators and thresholds."""

import pytest
from metrics_factory import make_metrics

from scaledl.evaluation.results import Skipped
from scaledl.evaluation.targets import BY_NAME, TARGETS, Target, group, resolve, target


def test_every_target_has_a_unique_name_and_a_known_comparator():
    assert len(BY_NAME) == len(TARGETS)
    assert {t.comparator for t in TARGETS} <= {"<=", ">=", "better", "not_worse", "within"}
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
