"""Workload files (CSV, YAML) and JSON workloads: regular files only, a field's type strict."""

import json
import os

import pytest
import yaml

from scaledl.design import load_preset, read_design
from scaledl.design.errors import DesignError
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.files import read_workloads_file
from scaledl.workloads.spec import Workload

FIELDS = {
    "family": "bert",
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 100,
    "seq_len": 16,
    "batch_size": 2,
    "world_size": 2,
}


def parse_file(path):
    """Every row of a workload file parsed as the commands parse it, naming file and row."""
    table = path.suffix == ".csv"
    return [
        Workload.from_record(row, source=f"{path}: row {i + 1}", table=table)
        for i, row in enumerate(read_workloads_file(path))
    ]


def yaml_file(path, field: str, text: str):
    """Two YAML entries, the second giving ``field`` as ``text`` (YAML as written)."""
    rows = [FIELDS, {k: v for k, v in FIELDS.items() if k != field}]
    path.write_text(yaml.safe_dump(rows, sort_keys=False) + f"  {field}: {text}\n")
    return path


def csv_file(path, field: str, cells: list[str]):
    """A CSV of one row per cell, each giving ``field`` as that cell (text as written)."""
    other = {k: v for k, v in FIELDS.items() if k != field}
    row = ",".join(str(v) for v in other.values())
    lines = [",".join([*other, field]), *(f"{row},{cell}" for cell in cells)]
    path.write_text("\n".join(lines) + "\n")
    return path


def refused(path, row: int, field: str, value: str, message: str) -> None:
    with pytest.raises(WorkloadError) as info:
        parse_file(path)
    text = str(info.value)
    assert text.startswith(f"{path}: row {row}: invalid workload: field '{field}' (value {value})")
    assert message in text


BOOL = "a boolean where an integer is expected"
FRACTION = "got a number with a fractional part"
INFINITE = "not a finite number"


@pytest.mark.parametrize(
    ("field", "text", "value", "message"),
    [
        ("tp_size", "true", "True", BOOL),
        ("batch_size", "false", "False", BOOL),
        ("world_size", "2.5", "2.5", FRACTION),
        ("batch_size", ".inf", "inf", INFINITE),
        ("dataset_size", ".nan", "nan", INFINITE),
    ],
)
def test_yaml_gives_no_boolean_fraction_or_non_finite_number_for_an_integer(
    tmp_path, field, text, value, message
):
    refused(yaml_file(tmp_path / "w.yaml", field, text), 2, field, value, message)


@pytest.mark.parametrize(
    ("field", "cells", "row", "value", "message"),
    [
        ("tp_size", ["true", "true"], 1, "True", BOOL),  # a boolean column
        ("tp_size", ["1", "true"], 2, "'true'", "unable to parse string as an integer"),
        ("world_size", ["2", "2.5"], 2, "2.5", FRACTION),
        ("batch_size", ["2", "inf"], 2, "inf", INFINITE),
        ("dataset_size", ["64", "nan"], 2, "'nan'", "unable to parse string"),  # text, not NaN
    ],
)
def test_csv_gives_no_boolean_fraction_or_non_finite_number_for_an_integer(
    tmp_path, field, cells, row, value, message
):
    refused(csv_file(tmp_path / "w.csv", field, cells), row, field, value, message)


def test_an_integral_float_cell_is_an_integer(tmp_path):
    # an integer column with an empty cell is read as floats: 2.0 is 2, the empty cell a default
    path = csv_file(tmp_path / "w.csv", "tp_size", ["2", ""])
    assert [w.tp_size for w in parse_file(path)] == [2, 1]


@pytest.mark.parametrize(
    ("field", "text", "message"),
    [
        ("tp_size", "true", BOOL),
        ("num_heads", "2.5", FRACTION),
        ("batch_size", "NaN", INFINITE),
        ("world_size", "Infinity", INFINITE),
    ],
)
def test_a_json_workload_is_as_strict(field, text, message):
    record = json.loads(json.dumps({**FIELDS, field: "X"}).replace('"X"', text))
    with pytest.raises(WorkloadError, match=rf"^--workload: invalid workload: field '{field}' "
                       rf"\(value [^)]*\): .*{message}"):  # fmt: skip
        Workload.parse(record, source="--workload")


def _special(path, kind):
    if kind == "fifo":
        os.mkfifo(path)  # an open() of it would block for ever
    else:
        path.symlink_to("/dev/zero")  # a read() of it would never end
    return path


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
@pytest.mark.parametrize("suffix", [".csv", ".yaml", ".parquet"])
def test_a_workloads_file_that_is_not_regular_is_refused(tmp_path, kind, suffix):
    path = _special(tmp_path / f"w{suffix}", kind)
    with pytest.raises(ValueError, match=rf"w\{suffix}: is a (FIFO|device), not a regular file"):
        read_workloads_file(path)


def test_a_missing_workloads_file_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"nowhere\.csv: cannot read workloads"):
        read_workloads_file(tmp_path / "nowhere.csv")


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_design_or_preset_that_is_not_regular_is_refused(tmp_path, kind):
    with pytest.raises(DesignError, match=r"design\.parquet: is a"):
        read_design(_special(tmp_path / "design.parquet", kind))
    with pytest.raises(DesignError, match=r"preset\.yaml: is a"):
        load_preset(_special(tmp_path / "preset.yaml", kind))
