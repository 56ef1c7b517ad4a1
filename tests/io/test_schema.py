import pytest
from pydantic import NonNegativeFloat

from scaledl.io.schema import Artefact, parse_artefact


class Point(Artefact):
    x_ms: NonNegativeFloat
    label: str = ""


def test_a_valid_mapping_is_parsed_and_frozen():
    point = parse_artefact(Point, {"x_ms": 1.5}, "point.json")
    assert point == Point(x_ms=1.5, label="")
    with pytest.raises(ValueError, match="frozen"):
        point.x_ms = 2.0


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"x_ms": -1.0}, "point.json: field 'x_ms' (value -1.0): Input should be greater than"),
        ({"x_ms": float("nan")}, "point.json: field 'x_ms' (value nan): Input should be a finite"),
        ({}, "point.json: field 'x_ms': missing"),
        ({"x_ms": 1.0, "y": 2}, "point.json: field 'y' (value 2): unknown field"),
    ],
)
def test_each_problem_is_one_line_naming_source_field_and_value(data, line):
    with pytest.raises(ValueError) as info:
        parse_artefact(Point, data, "point.json")
    assert str(info.value).startswith(line)
    assert len(str(info.value).splitlines()) == 1
