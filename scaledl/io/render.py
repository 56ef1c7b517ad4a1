"""The jinja2 environment of the HTML pages (templates shipped as package data in ``templates/``).

Autoescaping is on for every template, so a value is HTML-escaped unless a template marks it
``safe`` (only fragments rendered by another template or by
:func:`scaledl.report.gpu_report.gpu_report_html` are).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape


@cache
def environment() -> Environment:
    """The shared environment: package templates, autoescaping, undefined names are errors."""
    return Environment(
        loader=PackageLoader("scaledl.io", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )


def render(template: str, **context: Any) -> str:
    """Render a template of ``scaledl/io/templates``.

    Args:
        template: its file name (``evaluation_report.html.j2``).
        **context: the template's variables.

    Returns:
        The rendered text.

    Raises:
        jinja2.TemplateNotFound: no such template.
        jinja2.UndefinedError: the template uses a variable not in ``context``.
    """
    return environment().get_template(template).render(**context)
