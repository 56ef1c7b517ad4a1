"""``scaledl train``, ``list-predictors``, ``fit-layouts``: the predictor registry."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scaledl.cli.common import fail, layout, refuse_overwrite

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
    from scaledl.profiles.fingerprint import tables_sha256
    from scaledl.registry import save_bundle
    from scaledl.registry.bundle import check_calibration_data

    validated = validated or layout().validated_dir
    registry = registry or layout().predictors_dir
    try:
        refuse_overwrite(
            {"--registry": registry}, {"--validated": validated, "--calibration": calibration}
        )
    except ValueError as exc:
        fail(str(exc))
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
    from scaledl.registry import BundleError, list_predictors

    registry = registry or layout().predictors_dir
    try:
        table = list_predictors(registry)
    except BundleError as exc:
        fail(str(exc))
    if not len(table):
        typer.echo(f"{registry}: no predictor{_why_empty(registry)}")
        return
    typer.echo(table.drop(columns=["problem"]).to_string(index=False))
    for row in table[table["status"] != "ok"].itertuples(index=False):
        typer.secho(f"{row.name} {row.version}: {row.status}: {row.problem}", err=True)


def _why_empty(registry: Path) -> str:
    """Why a registry lists nothing when it is not an empty root: `` (...)`` or ``""``."""
    if not registry.exists():
        return " (the folder does not exist)"
    if (registry / "manifest.json").exists():
        return " (it is a bundle: --registry takes the folder two levels above it)"
    if any((p / "manifest.json").exists() for p in registry.iterdir() if p.is_dir()):
        return " (it holds bundle versions, a name directory: --registry takes its parent)"
    return ""


@app.command("fit-layouts")
def fit_layouts(
    profiles: Annotated[
        Path,
        typer.Option(help="Validated layout profiles of the host (datasets/layouts-cpu/validated)"),
    ],
    predictor: Annotated[
        Path | None, typer.Option(help="Bundle or name directory [<data>/predictors/scaledl]")
    ] = None,
) -> None:
    """Fit the layout calibration of a host and save it beside a predictor.

    Fits the product's layout recipe
    (``scaledl.parallel.recipe.RECIPE``) on every profiled workload and saves it as a new
    version in ``<bundle>/layouts/<device>/``
    (:mod:`scaledl.parallel.calibration`, :mod:`scaledl.registry.layouts`); ``scaledl
    predict`` and ``scaledl plan --layouts`` then compose that device's layouts with it. The
    in-sample figures printed are not an accuracy claim: that is ``scaledl evaluate-layouts``.
    Bad input (no bundle, a GPU predictor, unreadable profiles, profiles without layouts or of
    another device) exits 2 naming the file, field and value.
    """
    from scaledl.models.data import ProfileDataError
    from scaledl.parallel.calibration import fit_layout_calibration
    from scaledl.registry import BundleError
    from scaledl.registry.layouts import (
        calibration_target,
        check_calibration_device,
        save_layout_calibration,
    )

    try:
        bundle, manifest, devices = calibration_target(predictor or layout().predictor_dir())
        if not profiles.is_dir():
            raise ValueError(f"--profiles {profiles}: not a directory of validated profiles")
        calibration = fit_layout_calibration(profiles)
        check_calibration_device(calibration.device_name, manifest, devices)
    except (BundleError, ProfileDataError, ValueError) as exc:
        fail(str(exc))
    try:
        path = save_layout_calibration(calibration, bundle)
    except (BundleError, ValueError, OSError) as exc:
        fail(f"{bundle}: cannot save the layout calibration: {exc}")
    for line in calibration_lines(calibration):
        typer.echo(line)
    typer.echo(f"saved {path}")


def calibration_lines(calibration) -> list[str]:
    """What a layout calibration chose and its figures, in words (``scaledl fit-layouts``)."""
    data = calibration.training_data
    kinds = ", ".join(f"{n} {k}" for k, n in data["by_kind"].items())
    lines = [
        f"device {calibration.device_name}: {data['workloads']} profiled workloads ({kinds})",
        f"recipe: {calibration.recipe.name} (the product's layout recipe, fixed)",
    ]
    in_sample = calibration.in_sample
    parts = ", ".join(f"{k} {v:.1%}" for k, v in in_sample["mre_by_kind"].items())
    taus = ", ".join(
        f"{r['model']} {r['tau_calibrated']:.2f}" if r["tau_calibrated"] is not None
        else f"{r['model']} -" for r in in_sample["ranking"]
    )  # fmt: skip
    lines += [
        f"in-sample (NOT an accuracy claim): MRE {parts}; Kendall tau {taus}",
        "accuracy of the recipe: leave-one-layout-out, `scaledl evaluate-layouts` (README)",
    ]
    return lines
