import math

import numpy as np
import pytest
from tiny_specs import tiny_spec

from scaledl.prediction.rows import parse_rows
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.spec import Workload


def parse_one(table):
    calls = []

    def parse(record, where):
        calls.append(where)
        if isinstance(record, Workload):
            return record
        return Workload.from_record(record, where, table=table)

    parse.calls = calls
    return parse


def one_by_one(records, table, source="f.csv"):
    """What parsing each row alone gives: the workloads, or the first error's message."""
    try:
        return [
            Workload.from_record(r, f"{source}: row {i + 1}", table=table)
            for i, r in enumerate(records)
        ]
    except WorkloadError as exc:
        return str(exc)


def test_rows_differing_only_in_dataset_size_are_parsed_once():
    records = [tiny_spec("bert", dataset_size=d) for d in (8, 100, 12345)]
    records += [tiny_spec("vit", dataset_size=9.0), tiny_spec("bert", dataset_size=77)]
    parse = parse_one(table=True)
    parsed = parse_rows(records, parse, "f.csv", table=True)
    assert len(parse.calls) == 2 and len(parsed.workloads) == 2
    assert parsed.group.tolist() == [0, 0, 0, 1, 0]
    want = one_by_one(records, table=True)
    assert parsed.workload_ids == [w.workload_id for w in want]
    assert parsed.dataset_size.tolist() == [w.dataset_size for w in want]
    assert parsed.steps_per_epoch.tolist() == [w.steps_per_epoch for w in want]


@pytest.mark.parametrize(
    ("bad", "table"),
    [
        ({"dataset_size": -5}, True),
        ({"dataset_size": math.nan}, True),  # an empty cell of a field every workload has
        ({"dataset_size": 2.5}, True),
        ({"dataset_size": "many"}, False),
        ({"dataset_size": None}, False),
        ({"batch_size": 0}, True),
        ({"hidden_size": 33}, False),  # heads do not divide it
        ({"no_such_field": 1}, True),
    ],
)
@pytest.mark.parametrize("at", [0, 3, 5])
def test_the_first_bad_row_raises_its_own_error(bad, table, at):
    records = [tiny_spec("bert", dataset_size=10 + i) for i in range(6)]
    records[at] = {**records[at], **bad}
    records.append({**records[-1], "batch_size": -1})  # a later bad row never wins
    want = one_by_one(records, table)
    assert isinstance(want, str) and f"row {at + 1}:" in want
    with pytest.raises(WorkloadError) as info:
        parse_rows(records, parse_one(table), "f.csv", table=table)
    assert str(info.value) == want


def test_rows_are_numbered_from_the_chunk_offset():
    records = [tiny_spec("bert"), {**tiny_spec("bert"), "dataset_size": 0}]
    with pytest.raises(WorkloadError, match=r"^f.csv: row 1001: invalid workload: field 'data"):
        parse_rows(records, parse_one(True), "f.csv", table=True, first_row=1000)


def test_workload_objects_and_unhashable_rows():
    w = Workload.parse(tiny_spec("t5"))
    records = [w, w.model_copy(update={"dataset_size": 99}), {**tiny_spec("bert"), "x": [1]}]
    with pytest.raises(WorkloadError, match="row 3: .*'x'"):
        parse_rows(records, parse_one(False), table=False)
    parsed = parse_rows(records[:2], parse_one(False), table=False)
    assert len(parsed.workloads) == 1
    assert parsed.workload_ids == [w.workload_id, records[1].workload_id]
    assert np.array_equal(parsed.dataset_size, [w.dataset_size, 99])
