"""The ``scaledl`` command line (Typer): design, profile, validate, train, predict, evaluate.

Every command is a thin wrapper over the library; ``scaledl COMMAND --help`` lists the options.
Errors in user input (files, fields, values) end the command with exit code 2 and a one-line
message naming the file, field and value.

One module per command group, each a Typer sub-app merged into :data:`app` (no group name, so
the commands stay top-level: ``scaledl predict``, not ``scaledl predict predict``).

Commands import the library inside their bodies, on purpose: ``scaledl --help`` and a command
that needs no model do not pay for torch, PyTorch Geometric, transformers and scikit-learn
(seconds of imports). That is the one reason for the function-level imports in this package.
"""

from __future__ import annotations

import signal

import typer

from scaledl.cli import (
    data,
    design,
    devices,
    docs,
    evaluate,
    plan_job,
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
for _group in (design, profile, data, predictors, predict, plan_job, devices, evaluate, reference,
               summary, docs):  # fmt: skip
    app.add_typer(_group.app)


def _terminated(signum: int, frame) -> None:
    """SIGTERM handler: unwind the command like Ctrl-C does, exiting ``128 + signum`` (143)."""
    signal.signal(signum, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
    typer.echo(f"scaledl: stopped by {signal.Signals(signum).name}", err=True)
    raise SystemExit(128 + signum)


def main() -> None:
    """Console entry point (``scaledl`` and ``python -m scaledl.cli``).

    By default SIGTERM ends a Python process without running ``finally`` blocks, so a command
    stopped by ``kill``, a scheduler or a container runtime would leave the hidden temporary of
    an atomic write (:mod:`scaledl.io.atomic`) beside its output. Here SIGTERM raises
    ``SystemExit(143)`` instead, as SIGINT raises ``KeyboardInterrupt``: every ``with`` block
    unwinds (the temporary is removed, the output is left as it was) and the exit code is the
    shell's ``128 + 15``. Further SIGTERMs are ignored while it unwinds. The handler is
    installed by this entry point only (the previous one restored on return), never on
    import: Dagster and ``torchrun`` workers keep their own; ``scaledl profile`` replaces it
    while it profiles (:mod:`scaledl.profiling.interrupt`).
    """
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        app()
    finally:
        signal.signal(signal.SIGTERM, previous)
