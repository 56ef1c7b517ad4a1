"""The ``scaledl`` command line (Typer): design, profile, validate, train, predict, evaluate.

Every command is a thin wrapper over the library; ``scaledl COMMAND --help`` lists the options.
Errors in user input (files, fields, values) end the command with exit code 2 and a one-line
message naming the file, field and value.

One module per command group, each a Typer sub-app merged into :data:`app` (no group name, so
the commands stay top-level: ``scaledl predict``, not ``scaledl predict predict``).
"""

from __future__ import annotations

import typer

from scaledl.cli import (
    data,
    design,
    devices,
    evaluate,
    predict,
    predictors,
    profile,
    reference,
    summary,
)
from scaledl.cli.common import output_path
from scaledl.workloads.files import read_workloads_file

__all__ = ["app", "main", "output_path", "read_workloads_file"]

HELP = (
    f"{__doc__.splitlines()[0]}\n\n<data> in the defaults of paths is $SCALEDL_DATA_DIR (else "
    "data), <external> is $SCALEDL_EXTERNAL_DIR (else the checkout's external/)."
)
app = typer.Typer(add_completion=False, no_args_is_help=True, help=HELP)
for _group in (design, profile, data, predictors, predict, devices, evaluate, reference, summary):
    app.add_typer(_group.app)


def main() -> None:
    """Console entry point."""
    app()
