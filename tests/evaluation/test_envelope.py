"""The envelope of an evaluation's result file (scaledl/evaluation/envelope.py)."""

import json
from pathlib import Path

import pytest
from metrics_factory import make_metrics, metrics_dict

from scaledl.evaluation.envelope import (
    RESULT_EVALUATIONS,
    RESULT_SCHEMA_VERSION,
    SECTIONS,
    EvaluationResult,
    read_result,
)
from scaledl.evaluation.published_runs import PublishedRunsResult
from scaledl.evaluation.results import Metrics
from scaledl.evaluation.targets import TargetResult, target

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
ENTRY = target("reference_lofo").result("7.7%", True, value=0.077)


#: A reference result's sections (their content is not the envelope's concern).
REFERENCE = {"dataset": {"workloads": 3}, "config": {}, "in_distribution": {},
             "out_of_distribution": {}, "learning_curves": {}, "sequential": {}}  # fmt: skip
#: A layouts result's required sections.
LAYOUTS = {k: {} for k in sorted(SECTIONS["layouts"].required)}


def _result(**changes) -> dict:
    return {**REFERENCE, "targets": [ENTRY.to_dict()],
            "seconds": {"stage": 1.5, "total": 1.5}, **changes}  # fmt: skip


def test_the_envelope_round_trips_with_its_sections_at_the_top_level(tmp_path):
    result = EvaluationResult.of("reference", _result())
    assert result.sections == REFERENCE and result.targets == [ENTRY]
    data = result.to_dict()
    assert list(data) == ["evaluation", "schema_version", *REFERENCE, "targets", "seconds"]
    assert data["evaluation"] == "reference" and data["schema_version"] == RESULT_SCHEMA_VERSION
    path = result.write(tmp_path / "reference.json")
    assert json.loads(path.read_text()) == data and path.read_text().endswith("}\n")
    assert EvaluationResult.read(path, "reference") == result


def test_seconds_come_from_the_result_or_the_caller_not_both():
    layouts = {**LAYOUTS, "targets": [], "seconds": {"total": 1.5}}
    timed = EvaluationResult.of("layouts", {**layouts, "seconds": None}, seconds={"total": 2.0})
    assert timed.seconds == {"total": 2.0}
    assert EvaluationResult.of("layouts", {**LAYOUTS, "targets": []}).seconds is None
    with pytest.raises(ValueError, match="seconds given twice"):
        EvaluationResult.of("layouts", layouts, seconds={"total": 2.0})


def test_a_file_from_before_the_envelope_reads_with_its_earlier_entries():
    old = {**REFERENCE, "targets": [{"target": "doptimal@25% better than random@25%",
                                     "measured": "-1.5%", "reached": True}]}  # fmt: skip
    result = EvaluationResult.from_dict(old, "reference", "old.json")
    assert result.seconds is None and result.targets[0].name == "reference_sampler_25"
    assert isinstance(result.targets[0], TargetResult)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], r"f.json: not a JSON object"),
        (_result(evaluation="layouts"), r"f.json: field 'evaluation' is 'layouts', expected"),
        (_result(schema_version=2), r"field 'schema_version' is 2; this ScaleDL reads 1"),
        (REFERENCE, r"f.json: field 'targets' is missing"),
        ({**_result(), "folds": {}}, r"f.json: field 'evaluation' is missing, read as "
         r"'reference', but the file's sections are not a reference result's: unknown 'folds'"),
        ({k: v for k, v in _result().items() if k != "sequential"},
         r"missing, read as 'reference', but .*: missing 'sequential'"),
        (_result(targets=[{**ENTRY.to_dict(), "value": "0.5"}]),
         r"f.json: targets\[0\]: field 'value' is '0.5': Input should be a valid number"),
        (_result(seconds={"total": "1 s"}), r"field 'seconds' is \{'total': '1 s'\}"),
        (_result(seconds=[1.0]), r"field 'seconds' is \[1.0\]"),
        (_result(targets=[{**ENTRY.to_dict(), "met": "no"}]),
         r"f.json: targets\[0\]: field 'met' is 'no'"),
    ],
)  # fmt: skip
def test_a_bad_file_is_an_error_naming_it_the_field_and_value(data, message):
    with pytest.raises(ValueError, match=message):
        EvaluationResult.from_dict(data, "reference", "f.json")


@pytest.mark.parametrize("evaluation", sorted(COMMITTED_FILES := {
    "metrics": "metrics.json", "gpu_layouts": "gpu_layouts.json", "layouts": "layouts.json",
    "published_runs": "published_runs.json"}))  # fmt: skip
def test_the_committed_reference_relabelled_as_another_evaluation_is_refused(tmp_path, evaluation):
    data = json.loads((RESULTS / "reference.json").read_text())
    path = _written(tmp_path, {**data, "evaluation": evaluation})
    with pytest.raises(
        ValueError,
        match=(
            rf"result.json: field 'evaluation' is '{evaluation}', but the file's sections are "
            rf"not a {evaluation} result's: missing '.*; unknown '"
        ),
    ):
        read_result(path)
    with pytest.raises(ValueError, match=rf"field 'evaluation' is '{evaluation}'"):
        EvaluationResult.from_dict({**data, "evaluation": evaluation}, evaluation, "f.json")


@pytest.mark.parametrize("evaluation", sorted(COMMITTED_FILES))
def test_another_committed_file_relabelled_as_reference_is_refused(tmp_path, evaluation):
    data = json.loads((RESULTS / COMMITTED_FILES[evaluation]).read_text())
    if evaluation == "metrics":  # its version (2) and no targets are refused before its sections
        data = {**data, "schema_version": RESULT_SCHEMA_VERSION, "targets": []}
    path = _written(tmp_path, {**data, "evaluation": "reference"})
    with pytest.raises(ValueError, match=r"sections are not a reference result's: missing"):
        read_result(path)


def test_a_target_number_given_as_a_string_is_refused_in_a_committed_file(tmp_path):
    data = json.loads((RESULTS / "reference.json").read_text())
    data["targets"][0]["value"] = str(data["targets"][0]["value"])
    with pytest.raises(ValueError, match=r"result.json: targets\[0\]: field 'value' is '"):
        read_result(_written(tmp_path, data))


def test_an_unknown_evaluation_is_refused():
    with pytest.raises(ValueError, match="no evaluation 'nope'"):
        EvaluationResult.from_dict(_result(), "nope")


def test_a_file_that_is_not_json_is_an_error_naming_it(tmp_path):
    path = tmp_path / "reference.json"
    path.write_text("{")
    with pytest.raises(ValueError, match="reference.json"):
        EvaluationResult.read(path, "reference")


@pytest.mark.parametrize(
    ("name", "evaluation"),
    [("reference.json", "reference"), ("layouts.json", "layouts"),
     ("gpu_layouts.json", "gpu_layouts")],
)  # fmt: skip
def test_every_committed_result_file_is_in_its_envelope(name, evaluation):
    data = json.loads((RESULTS / name).read_text())
    result = EvaluationResult.read(RESULTS / name, evaluation)
    assert data["evaluation"] == evaluation and data["schema_version"] == RESULT_SCHEMA_VERSION
    assert result.to_dict() == data and result.targets


# read_result: every evaluation's file as the one result type.

COMMITTED = {
    "metrics": "metrics.json", "gpu_layouts": "gpu_layouts.json", "layouts": "layouts.json",
    "published_runs": "published_runs.json", "reference": "reference.json",
}  # fmt: skip


def test_every_evaluation_with_a_result_file_is_committed():
    assert set(COMMITTED) == set(RESULT_EVALUATIONS)


@pytest.mark.parametrize("evaluation", sorted(COMMITTED))
def test_read_result_reads_every_committed_file_as_its_evaluation(evaluation):
    path = RESULTS / COMMITTED[evaluation]
    result = read_result(path)
    assert result.evaluation == evaluation and result.targets
    assert all(isinstance(t, TargetResult) for t in result.targets)
    assert read_result(path, evaluation) == result
    if evaluation != "metrics":  # written in the envelope: the file is the result's JSON
        assert result.to_dict() == json.loads(path.read_text())


def test_the_committed_published_runs_file_is_in_its_envelope():
    data = json.loads((RESULTS / "published_runs.json").read_text())
    assert list(data)[:2] == ["evaluation", "schema_version"] and "runtime_s" not in data
    assert data["schema_version"] == RESULT_SCHEMA_VERSION
    assert PublishedRunsResult.model_fields["schema_version"].default == RESULT_SCHEMA_VERSION
    assert "total" in data["seconds"]


def test_a_published_runs_file_of_the_shape_before_the_envelope_still_reads(tmp_path):
    data = json.loads((RESULTS / "published_runs.json").read_text())
    old = {k: v for k, v in data.items() if k not in ("evaluation", "schema_version", "seconds")}
    old["runtime_s"] = data["seconds"]
    path = tmp_path / "published_runs.json"
    path.write_text(json.dumps(old))
    assert read_result(path) == read_result(RESULTS / "published_runs.json")
    assert PublishedRunsResult.read(path) == PublishedRunsResult.read(RESULTS / path.name)


def test_read_result_of_a_written_metrics_json(tmp_path):
    metrics = make_metrics()
    path = metrics.write(tmp_path / "metrics.json")
    result = read_result(path, "metrics")
    assert result == EvaluationResult.from_metrics(metrics)
    assert result.evaluation == "metrics" and result.schema_version == RESULT_SCHEMA_VERSION
    assert result.targets == metrics.intervals.targets  # the factory's GPU section is skipped
    runtime = metrics.runtime_s.model_dump()
    assert result.seconds == {k: v for k, v in runtime.items() if k != "fit_seconds"}
    assert result.sections["fit_seconds"] == runtime["fit_seconds"]
    assert "targets" not in result.sections["intervals"]
    assert set(result.sections) == (
        set(Metrics.model_fields) - {"schema_version", "runtime_s"} | {"fit_seconds"}
    )


def test_the_committed_metrics_targets_are_gathered_once():
    metrics = Metrics.read(RESULTS / "metrics.json")
    result = EvaluationResult.from_metrics(metrics)
    assert result.targets == metrics.gpu.targets + metrics.intervals.targets
    assert "targets" not in result.sections["gpu"]["parallel_layouts"]
    assert result.seconds["total"] == metrics.runtime_s.total


def _written(tmp_path: Path, data) -> Path:
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("data", "evaluation", "message"),
    [
        ([], None, r"result.json: not a JSON object"),
        ({"dataset": {}, "targets": []}, None, r"result.json: field 'evaluation' is missing"),
        ({"dataset": {}}, "reference", r"result.json: field 'targets' is missing"),
        (_result(evaluation="label_quality"), None,
         r"result.json: field 'evaluation' is 'label_quality': not one of metrics"),
        (_result(evaluation="layouts"), "reference",
         r"result.json: field 'evaluation' is 'layouts', expected 'reference'"),
        (_result(evaluation="reference", seconds="1 s"), None, r"result.json: field 'seconds'"),
        ({**metrics_dict(), "schema_version": 1}, None,
         r"result.json: key 'schema_version' is 1; this ScaleDL reads 2"),
        ({k: v for k, v in metrics_dict().items() if k != "intervals"}, "metrics",
         r"result.json: key 'intervals': missing"),
        ({"evaluation": "published_runs", "targets": []}, None,
         r"result.json: field 'evaluation' is 'published_runs', but the file's sections are "
         r"not a published_runs result's: missing 'command'"),
    ],
)  # fmt: skip
def test_read_result_of_a_bad_file_names_it_and_the_field(tmp_path, data, evaluation, message):
    with pytest.raises(ValueError, match=message):
        read_result(_written(tmp_path, data), evaluation)


def test_read_result_of_a_missing_or_broken_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_result(tmp_path / "metrics.json")
    path = tmp_path / "metrics.json"
    path.write_text("{")
    with pytest.raises(ValueError, match="metrics.json"):
        read_result(path)
