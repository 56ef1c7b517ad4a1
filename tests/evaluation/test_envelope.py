"""The envelope of an evaluation's result file (scaledl/evaluation/envelope.py)."""

import json
from pathlib import Path

import pytest

from scaledl.evaluation.envelope import RESULT_SCHEMA_VERSION, EvaluationResult
from scaledl.evaluation.targets import TargetResult, target

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
ENTRY = target("reference_lofo").result("7.7%", True, value=0.077)


def _result(**changes) -> dict:
    return {"dataset": {"workloads": 3}, "targets": [ENTRY.to_dict()],
            "seconds": {"stage": 1.5, "total": 1.5}, **changes}  # fmt: skip


def test_the_envelope_round_trips_with_its_sections_at_the_top_level(tmp_path):
    result = EvaluationResult.of("reference", _result())
    assert result.sections == {"dataset": {"workloads": 3}} and result.targets == [ENTRY]
    data = result.to_dict()
    assert list(data) == ["evaluation", "schema_version", "dataset", "targets", "seconds"]
    assert data["evaluation"] == "reference" and data["schema_version"] == RESULT_SCHEMA_VERSION
    path = result.write(tmp_path / "reference.json")
    assert json.loads(path.read_text()) == data and path.read_text().endswith("}\n")
    assert EvaluationResult.read(path, "reference") == result


def test_seconds_come_from_the_result_or_the_caller_not_both():
    timed = EvaluationResult.of("layouts", _result(seconds=None), seconds={"total": 2.0})
    assert timed.seconds == {"total": 2.0}
    assert EvaluationResult.of("layouts", {"targets": []}).seconds is None
    with pytest.raises(ValueError, match="seconds given twice"):
        EvaluationResult.of("layouts", _result(), seconds={"total": 2.0})


def test_a_file_from_before_the_envelope_reads_with_its_earlier_entries():
    old = {"dataset": {}, "targets": [{"target": "no source above 20.0%",
                                       "measured": "41.5%", "reached": False}]}  # fmt: skip
    result = EvaluationResult.from_dict(old, "published_runs", "old.json")
    assert result.seconds is None and result.targets[0].name == "published_max_mre"
    assert isinstance(result.targets[0], TargetResult)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], r"f.json: not a JSON object"),
        (_result(evaluation="layouts"), r"f.json: field 'evaluation' is 'layouts', expected"),
        (_result(schema_version=2), r"field 'schema_version' is 2; this ScaleDL reads 1"),
        ({"dataset": {}}, r"f.json: field 'targets' is missing"),
        (_result(seconds={"total": "1 s"}), r"field 'seconds' is \{'total': '1 s'\}"),
        (_result(seconds=[1.0]), r"field 'seconds' is \[1.0\]"),
        (_result(targets=[{**ENTRY.to_dict(), "met": "no"}]),
         r"f.json: targets\[0\]: field 'met' is 'no'"),
    ],
)  # fmt: skip
def test_a_bad_file_is_an_error_naming_it_the_field_and_value(data, message):
    with pytest.raises(ValueError, match=message):
        EvaluationResult.from_dict(data, "reference", "f.json")


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
