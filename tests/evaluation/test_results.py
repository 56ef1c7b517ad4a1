import json

import pytest
from metrics_factory import make_metrics, metrics_dict

from scaledl.evaluation.results import LearningCurvesByMethod, Metrics, MetricsError, OODErrors


def _write(path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_write_then_read_round_trips(tmp_path):
    metrics = make_metrics()
    path = metrics.write(tmp_path / "reports" / "metrics.json")
    again = Metrics.read(path)
    assert again.to_dict() == metrics.to_dict()
    assert again.source == str(path)
    assert json.loads(path.read_text()) == metrics_dict()
    assert not list(path.parent.glob(".*.tmp"))


def test_typed_access_to_splits_and_sections():
    metrics = make_metrics(scaledl_ood=0.07)
    assert metrics.mre("id") == 0.025
    assert metrics.mre("ood") == 0.07 and metrics.mre("ood", "additive") == 0.5
    assert metrics.method_errors("extrapolation").rmse_s == 0.05
    assert isinstance(metrics.split("ood"), OODErrors)
    assert isinstance(metrics.require("learning_curves"), LearningCurvesByMethod)
    assert metrics.methods == ["scaledl", "additive"]
    reproducibility = metrics.require("label_reproducibility")
    assert reproducibility.mre == 0.02 and reproducibility.per_world_size["2"].n_workloads == 4


def test_unknown_key_names_the_file_and_the_key(tmp_path):
    data = metrics_dict()
    data["splits"]["id"]["methods"]["scaledl"]["iteration"]["mape"] = 0.1
    data["coverage"] = {}
    path = _write(tmp_path / "metrics.json", data)
    with pytest.raises(MetricsError) as err:
        Metrics.read(path)
    message = str(err.value)
    assert f"{path}: key 'splits.id.methods.scaledl.iteration.mape': unknown key" in message
    assert f"{path}: key 'coverage': unknown key" in message


def test_missing_section_names_the_file_and_the_key(tmp_path):
    data = metrics_dict()
    del data["learning_curves"]
    del data["splits"]["ood"]["mean"]
    path = _write(tmp_path / "metrics.json", data)
    with pytest.raises(MetricsError) as err:
        Metrics.read(path)
    assert f"{path}: key 'learning_curves': missing" in str(err.value)
    assert f"{path}: key 'splits.ood.mean': missing" in str(err.value)


def test_skipped_section_is_an_error_when_required():
    metrics = make_metrics()
    with pytest.raises(MetricsError, match="section 'external' was skipped: include_external"):
        metrics.require("external")
    with pytest.raises(MetricsError, match="no section 'label_noise'"):
        metrics.require("label_noise")


def test_method_not_evaluated_is_an_error_naming_the_key():
    with pytest.raises(MetricsError, match="'splits.id.methods.graph_only'.*not evaluated"):
        make_metrics().mre("id", "graph_only")


def test_old_layout_or_wrong_values_are_errors(tmp_path):
    old = {"splits": {"id": {"scaledl": {"mre": 0.1}}}, "noise_floor_cv": 0.1}
    with pytest.raises(MetricsError, match="'schema_version' is None.*re-run the evaluation"):
        Metrics.read(_write(tmp_path / "old.json", old))
    data = metrics_dict()
    data["label_reproducibility"]["mre"] = "high"
    with pytest.raises(MetricsError, match="key 'label_reproducibility.mre'.*'high'"):
        Metrics.from_dict(data, source="x.json")


def test_non_finite_values_cannot_be_built():
    data = metrics_dict()
    data["splits"]["id"]["methods"]["scaledl"]["iteration"]["mre"] = float("nan")
    with pytest.raises(MetricsError, match="splits.id.methods.scaledl.iteration.mre"):
        Metrics.from_dict(data)


def test_unreadable_file_is_an_error_naming_it(tmp_path):
    with pytest.raises(MetricsError, match="missing.json: cannot read metrics"):
        Metrics.read(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(MetricsError, match="bad.json: not valid JSON"):
        Metrics.read(bad)


def test_a_section_is_validated_by_its_field_type():
    from scaledl.evaluation.results import Skipped, Sweep

    assert isinstance(Metrics.section("gnn_diagnosis", {"skipped": "none"}), Skipped)
    sweep = {"family": "bert", "base_workload": "w", "sweeps": {}}
    assert isinstance(Metrics.section("sweep", sweep), Sweep)
    with pytest.raises(MetricsError, match=r"out/metrics.json: key 'sweep.family'"):
        Metrics.section("sweep", {**sweep, "family": 1}, "out/metrics.json")
    with pytest.raises(MetricsError, match="no section 'nope'"):
        Metrics.section("nope", {})
