"""``scaledl docs render``: the generated blocks of the docs pages, from their committed results."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scaledl.cli.common import fail

app = typer.Typer()
#: ``scaledl docs``: a group for the documentation's commands.
docs_app = typer.Typer(help="The documentation's generated blocks.", no_args_is_help=True)
app.add_typer(docs_app, name="docs")


@docs_app.command("render")
def render_command(
    check: Annotated[
        bool, typer.Option("--check", help="Name the stale blocks and exit 1; write nothing")
    ] = False,
    block: Annotated[
        list[str] | None, typer.Option(help="Only this block (repeatable; default: every block)")
    ] = None,
    root: Annotated[
        Path, typer.Option(help="Repository root the registry's paths are relative to")
    ] = Path("."),
) -> None:
    """Render every registered block from its committed result file into its page.

    The registry (:data:`scaledl.report.blocks.registry.BLOCKS`) names each block's page, its
    markers and its result file; only the text between the markers changes, each page is
    written atomically, and nothing is written unless every block renders. ``--check`` writes
    nothing and exits 1 naming each stale block (page, block). A missing page, missing markers
    or an unreadable result exits 2 naming the file.
    """
    from scaledl.report.blocks.registry import BLOCKS, render_pages, write_pages

    names = list(dict.fromkeys(block or BLOCKS))
    for name in names:
        if name not in BLOCKS:
            fail(f"--block {name}: no such block (one of {', '.join(BLOCKS)})")
    try:
        pages = render_pages([BLOCKS[name] for name in names], root)
    except ValueError as exc:
        fail(str(exc))
    stale = [(page.path, name) for page in pages for name in page.stale]
    if check:
        for path, name in stale:
            typer.echo(f"{path}: block {name} is stale (scaledl docs render --block {name})")
        if stale:
            raise typer.Exit(1)
        typer.echo(f"{len(names)} block(s) up to date")
        return
    try:
        write_pages(pages)
    except OSError as exc:
        fail(f"{exc.filename}: cannot write the page: {exc.strerror or exc}")
    for path, name in stale:
        typer.echo(f"{path}: block {name} rendered")
    typer.echo(f"{len(stale)} of {len(names)} block(s) changed")
