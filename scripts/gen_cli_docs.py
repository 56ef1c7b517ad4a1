"""Generate the CLI reference page from the Typer app (run by mkdocs-gen-files at build time).

Writes ``reference/cli.md`` into the site being built (never into ``docs/``), so the page is
always the ``--help`` of the code being documented.
"""

from __future__ import annotations

import re

import click
import mkdocs_gen_files
import typer
from typer.cli import get_docs_for_click

from scaledl.cli import app

#: Angle-bracket placeholders outside code spans (``<data>``) would be read as HTML tags.
_PLACEHOLDER = re.compile(r"<([A-Za-z_][\w-]*)>")


def _escape_placeholders(markdown: str) -> str:
    """``markdown`` with ``<name>`` outside code spans and fences written as text."""
    lines, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced:
            parts = line.split("`")
            # Even-numbered parts lie outside inline code spans.
            parts[::2] = [_PLACEHOLDER.sub(r"&lt;\1&gt;", part) for part in parts[::2]]
            line = "`".join(parts)
        lines.append(line)
    return "\n".join(lines) + "\n"


command = typer.main.get_command(app)
docs = get_docs_for_click(
    obj=command,
    ctx=click.Context(command, info_name="scaledl"),
    name="scaledl",
    title="CLI reference",
)
with mkdocs_gen_files.open("reference/cli.md", "w") as page:
    page.write(_escape_placeholders(docs))
