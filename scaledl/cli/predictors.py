"""``scaledl train`` and ``scaledl list-predictors``: the predictor registry."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scaledl.cli.common import fail, layout

app = typer.Typer()


@app.command()
def train(
    validated: Annotated[
        Path | None, typer.Option(help="Validated profile tables [<data>/validated]")
    ] = None,
    registry: Annotated[Path | None, typer.Option(help="Registry root [<data>/predictors]")] = None,
    name: Annotated[str, typer.Option(help="Predictor name")] = "scaledl",
    calibration: Annotated[
        Path | None,
        typer.Option(help="Interval calibration to store (calibration.json of scaledl evaluate)"),
    ] = None,
) -> None:
    """Train the ScaleDL predictor and register it as a new bundle version.

    ``--calibration`` stores the interval calibration that ``scaledl evaluate`` wrote for the
    same validated tables (``<out>/calibration.json``), so the bundle predicts with
    ``--coverage``; a calibration of other tables is refused (exit code 2).
    """
    from scaledl.models.data import ProfileDataError
    from scaledl.models.intervals import CalibrationError, IntervalCalibration
    from scaledl.models.train import train_predictor
    from scaledl.registry import save_bundle, tables_sha256
    from scaledl.registry.bundle import check_calibration_data

    validated = validated or layout().validated_dir
    registry = registry or layout().predictors_dir
    try:
        intervals = IntervalCalibration.read(calibration) if calibration is not None else None
        sha = tables_sha256(validated)
        check_calibration_data(intervals, sha, str(calibration))
        method = train_predictor(validated)
    except (ProfileDataError, CalibrationError) as exc:
        fail(str(exc))
    data = {"sha256": sha, "workloads": len(method.training_workload_ids_)}
    path = save_bundle(method, registry, name, training_data=data, calibration=intervals)
    typer.echo(f"registered {path}")


@app.command("list-predictors")
def list_predictors_command(
    registry: Annotated[Path | None, typer.Option(help="Registry root [<data>/predictors]")] = None,
) -> None:
    """List registered predictor bundles; a broken version is listed with its reason."""
    from scaledl.registry import list_predictors

    registry = registry or layout().predictors_dir
    table = list_predictors(registry)
    if not len(table):
        typer.echo(f"{registry}: no predictor")
        return
    typer.echo(table.drop(columns=["problem"]).to_string(index=False))
    for row in table[table["status"] != "ok"].itertuples(index=False):
        typer.secho(f"{row.name} {row.version}: {row.status}: {row.problem}", err=True)
