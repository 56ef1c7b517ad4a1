from importlib.resources import files

import jinja2
import pytest

from scaledl.io.render import environment, render


def test_templates_are_package_data_and_escape_values():
    templates = {p.name for p in (files("scaledl.io") / "templates").iterdir()}
    assert {"evaluation_report.html.j2", "summary.html.j2", "paired.html.j2",
            "validation.html.j2", "_macros.html.j2"} <= templates  # fmt: skip
    assert environment().from_string("{{ v }}").render(v="<b>") == "&lt;b&gt;"


def test_an_undefined_variable_is_an_error():
    with pytest.raises(jinja2.UndefinedError):
        render("summary.html.j2")
