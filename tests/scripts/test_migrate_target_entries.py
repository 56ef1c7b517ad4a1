"""The one-off conversion of result files to the one target-entry shape
(scripts/migrate_target_entries.py)."""

import copy
import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "results"


def _script():
    path = REPO / "scripts" / "migrate_target_entries.py"
    spec = importlib.util.spec_from_file_location("migrate_target_entries", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _text_shape(entry: dict) -> dict:
    return {"target": entry["text"], "measured": entry["measured"], "reached": entry["met"]}


def _layout_shape(entry: dict) -> dict:
    old = {"name": entry["text"], "value": entry["value"]}
    if "composed" in entry["extra"]:
        old["composed"] = entry["extra"]["composed"]
    return old | {"target": entry["threshold"], "met": entry["met"]}


def _reference_shape(entry: dict) -> dict:
    keys = ("value", "ci_low", "ci_high", "threshold", "met")
    return {"name": entry["text"], **{k: entry[k] for k in keys}}


def _earlier(name: str) -> dict:
    """The committed file with its entries written back in the shape they had before."""
    data = json.loads((RESULTS / name).read_text())
    if name in ("gpu_layouts.json", "layouts.json", "reference.json"):  # the envelope's keys
        for key in ("evaluation", "schema_version"):
            data.pop(key)
        if data["seconds"] is None:
            data.pop("seconds")
    if name == "published_runs.json":  # the envelope's keys; its seconds were runtime_s
        for key in ("evaluation", "schema_version"):
            data.pop(key)
        data["runtime_s"] = data.pop("seconds")
    if name == "layouts.json":
        for profile in (data, *data["repeats"], *data["across"]):
            profile["targets"] = [_layout_shape(t) for t in profile["targets"]]
    elif name == "reference.json":
        data["targets"] = [_reference_shape(t) for t in data["targets"]]
    elif name == "metrics.json":
        for section in (data["gpu"], data["gpu"]["parallel_layouts"], data["intervals"]):
            section["targets"] = [_text_shape(t) for t in section["targets"]]
    else:
        data["targets"] = [_text_shape(t) for t in data["targets"]]
    return data


@pytest.mark.parametrize(
    "name",
    ["gpu_layouts.json", "layouts.json", "metrics.json", "published_runs.json", "reference.json"],
)
def test_earlier_files_convert_to_the_committed_ones(tmp_path, name):
    module = _script()
    old = tmp_path / name
    old.write_text(json.dumps(_earlier(name), indent=2))
    assert module.migrate(old) == json.loads((RESULTS / name).read_text())


def test_the_check_refuses_a_moved_number_and_a_changed_verdict():
    module = _script()
    new = json.loads((RESULTS / "reference.json").read_text())
    old = _earlier("reference.json")
    module.check(old, new, "reference.json")
    moved = copy.deepcopy(new)
    moved["seconds"]["total"] += 1.0
    with pytest.raises(ValueError, match="outside the targets lists changed"):
        module.check(old, moved, "reference.json")
    flipped = copy.deepcopy(new)
    flipped["targets"][0]["met"] = not flipped["targets"][0]["met"]
    with pytest.raises(ValueError, match=r"targets\[0\] field 'met'"):
        module.check(old, flipped, "reference.json")
    lost = copy.deepcopy(new)
    lost["targets"][1]["value"] = 0.5
    with pytest.raises(ValueError, match=r"targets\[1\] field 'value'"):
        module.check(old, lost, "reference.json")


def test_the_check_refuses_published_runs_seconds_that_are_not_its_runtime():
    module = _script()
    new = json.loads((RESULTS / "published_runs.json").read_text())
    old = _earlier("published_runs.json")
    module.check(old, new, "published_runs.json")
    moved = copy.deepcopy(new)
    moved["seconds"]["total"] += 1.0
    with pytest.raises(ValueError, match="field 'seconds' is not the old 'runtime_s'"):
        module.check(old, moved, "published_runs.json")


def test_an_unknown_file_exits_2(tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text("{}")
    assert _script().main([str(other)]) == 2
    assert "not a result file with targets" in capsys.readouterr().err
