"""``scaledl validate`` and ``scaledl import``: profile tables checked, and imported from others."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from scaledl.cli.common import fail, layout, refuse_overwrite, writable_folder

#: The files ``scaledl import published-runs`` writes into ``--out``.
IMPORT_OUTPUTS = ("runs.csv", "quarantine.csv", "summary.json")

app = typer.Typer()
import_app = typer.Typer(no_args_is_help=True, help="Import measurements of others as profiles.")
app.add_typer(import_app, name="import")


@app.command()
def validate(
    path: Annotated[
        Path | None, typer.Argument(help="Profiles directory [<data>/profiles]", show_default=False)
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Validated tables [PATH/../validated]")] = None,
    quarantine: Annotated[Path | None, typer.Option(help="Quarantine [PATH/../quarantine]")] = None,
    report: Annotated[
        Path | None, typer.Option(help="HTML report dir [PATH/../reports/validation]")
    ] = None,
) -> None:
    """Validate profile tables (great-expectations); quarantine bad rows with reasons.

    Outputs go beside the profiles directory (``data/profiles`` -> ``data/validated``,
    ``data/quarantine``, ``data/reports/validation``), so validating a scratch directory never
    overwrites the project's own report; an import's (``data/imported/neusight``) go to
    ``data/imported/validated/neusight``, ``data/imported/quarantine/neusight`` and
    ``data/reports/validation/imported/neusight``, where the pipeline and ``evaluate-gpu`` read
    them (:meth:`scaledl.layout.DataLayout.validation_outputs`).

    The profiles are only read, never written: a read-only profiles folder is validated when
    the three outputs can be written (give ``--out``, ``--quarantine`` and ``--report`` on a
    writable file system when the defaults beside it are read-only). Each output folder is
    created and proven writable before the validation starts; one that is not ends the
    command with exit code 2 naming the option, the folder and what it holds.
    """
    from scaledl.validation import ValidationError, validate_profiles

    path = path or layout().profiles_dir
    if not path.is_dir():
        fail(f"{path}: profiles directory not found")
    beside = layout().validation_outputs(path.resolve())
    out = out or beside.validated
    quarantine = quarantine or beside.quarantine
    report = report or beside.report
    try:
        outputs = {"--out": out, "--quarantine": quarantine, "--report": report}
        refuse_overwrite(outputs, {"PATH": path})
        writable_folder(out, "--out", "the validated tables")
        writable_folder(quarantine, "--quarantine", "the quarantined rows")
        writable_folder(report, "--report", "the validation report")
    except ValueError as exc:
        fail(str(exc))
    try:
        result = validate_profiles(path, out, quarantine, report)
    except ValidationError as exc:
        fail(str(exc))
    except OSError as exc:  # a disk that fills up while the outputs are written
        fail(f"{exc.filename or out}: cannot write the validation outputs: {exc.strerror or exc}")
    counts = result.to_dict()
    typer.echo(json.dumps(counts.get("tables", counts), indent=2, default=str)[:4000])
    typer.echo(f"report: {report / 'index.html'}")


@import_app.command("neusight")
def import_neusight_command(
    path: Annotated[
        Path | None,
        typer.Argument(
            help="NeuSight data folder (label/, model_configs/, ...) [<external>/neusight]",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Output profiles folder [<data>/imported/neusight]")
    ] = None,
) -> None:
    """Import NeuSight's GPU traces and labels as standard profile tables (then validate them).

    Any NeuSight-format folder (``label/<GPU>/``, ``model_configs/``, ``device_configs/``) of
    any model type ``family: hf`` reads (OPT, BART, T5, Llama...) is accepted.

    Every label not imported (no trace beside it, a ``-fusion`` label) is counted and named
    with its reason; an unreadable or undecodable file ends the command with exit code 2
    naming it.
    """
    from scaledl.external.neusight import NeusightFormatError
    from scaledl.external.neusight_tables import import_neusight
    from scaledl.layout import neusight_root

    out = out or layout().imported_dir("neusight")
    path = path or neusight_root()
    try:
        refuse_overwrite({"--out": out}, {"PATH": path})
        summary = import_neusight(path, out)
    except (NeusightFormatError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    rows = ", ".join(f"{name} {n}" for name, n in summary.tables.items())
    typer.echo(f"{out}: {rows}")
    typer.echo(f"not carried by the traces: {'; '.join(summary.manifest['not_carried'])}")
    skipped = summary.manifest["skipped_labels"]
    if skipped["count"]:
        typer.secho(f"{skipped['count']} label(s) not imported (all in {out}/import.json):",
                    err=True, fg=typer.colors.YELLOW)  # fmt: skip
        for reason, files in skipped["by_reason"].items():
            names = ", ".join(Path(f).name for f in files[:10])
            more = f" and {len(files) - 10} more" if len(files) > 10 else ""
            typer.secho(f"  {len(files)}: {reason}: {names}{more}", err=True,
                        fg=typer.colors.YELLOW)  # fmt: skip
    typer.echo(f"next: scaledl validate {out}")


@import_app.command("published-runs")
def import_published_runs_command(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Published-runs CSVs (46 columns, plus the optional attention_kernel and "
            "elementwise) [<external>/scale_runs/*.csv]",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Output folder [<data>/imported/published_runs]"),
    ] = None,
) -> None:
    """Import published LLM training step times as training jobs (MoE rows quarantined).

    Writes ``runs.csv`` (one row per accepted CSV row; ``job`` is the TrainingJob as JSON),
    ``quarantine.csv`` (source, row, field, value, reason) and ``summary.json`` (counts per
    source and per reason) to ``--out``. A file that cannot be read or lacks a column ends the
    command with exit code 2 naming it. Mapping decisions:
    :mod:`scaledl.external.published_runs`.
    """
    from scaledl.external.published_runs import PublishedRunsError, read_published_runs

    out = out or layout().imported_dir("published_runs")
    try:
        written = {f"--out ({name})": out / name for name in IMPORT_OUTPUTS}
        refuse_overwrite({"--out": out, **written}, {"PATH": paths})
        writable_folder(out, "--out", "the imported runs")
        result = read_published_runs(paths or None)
    except (PublishedRunsError, ValueError) as exc:
        fail(str(exc))
    runs = result.runs.assign(job=result.runs["job"].map(lambda j: j.model_dump_json()))
    runs["assumed"] = runs["assumed"].map(",".join)
    counts = result.counts()
    try:
        runs.to_csv(out / "runs.csv", index=False)
        result.quarantine.to_csv(out / "quarantine.csv", index=False)
        (out / "summary.json").write_text(json.dumps(counts, indent=2) + "\n")
    except OSError as exc:
        fail(f"{exc.filename or out}: cannot write the imported runs: {exc.strerror or exc}")
    share = counts["accepted_share_of_rows_with_architecture"]
    typer.echo(
        f"{out}: {counts['accepted']} of {counts['rows']} rows accepted "
        f"({counts['accepted_with_iteration_s']} with a step time); "
        f"{share:.1%} of the {counts['rows_with_architecture']} rows with an architecture"
    )
    for reason, n in counts["quarantined_by_reason"].items():
        typer.secho(f"  quarantined {n}: {reason}", err=True, fg=typer.colors.YELLOW)
