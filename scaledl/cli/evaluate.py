"""``scaledl evaluate`` and ``scaledl evaluate-gpu``: the evaluation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from scaledl.cli.common import fail, layout

app = typer.Typer()


@app.command()
def evaluate(
    profiles: Annotated[
        Path | None, typer.Option(help="Validated profile tables [<data>/validated]")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Report directory [<data>/reports]")] = None,
    gpu_profiles: Annotated[
        Path | None, typer.Option(help="Validated imported GPU profiles (GPU evaluation)")
    ] = None,
    gpu_parallel_labels: Annotated[
        Path | None, typer.Option(help="The import's parallel_labels.parquet")
    ] = None,
) -> None:
    """Evaluate ScaleDL and the baselines (ID, leave-one-family-out, extrapolation, GPU, ...)."""
    from scaledl.evaluation import EvaluationConfig
    from scaledl.evaluation import evaluate as run_evaluation
    from scaledl.models.data import ProfileDataError

    profiles = profiles or layout().validated_dir
    out = out or layout().reports_dir
    config = EvaluationConfig(gpu_profiles=gpu_profiles, gpu_parallel_labels=gpu_parallel_labels)
    try:
        metrics = run_evaluation(profiles, out, config)
    except ProfileDataError as exc:
        fail(str(exc))
    typer.echo(headline(metrics))
    typer.echo(f"report: {out / 'report.html'}")


@app.command("evaluate-gpu")
def evaluate_gpu_command(
    profiles: Annotated[
        Path | None,
        typer.Option(help="Validated imported GPU profiles [<data>/imported/validated/neusight]"),
    ] = None,
    parallel_labels: Annotated[
        Path | None,
        typer.Option(
            help="The import's parallel_labels.parquet "
            "[<data>/imported/neusight/parallel_labels.parquet]"
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Output directory [<data>/reports]")] = None,
) -> None:
    """Evaluate the device-aware predictor on imported GPU profiles only (LOMO, LOGO, -dp4).

    The defaults are where ``scaledl import neusight`` and ``scaledl validate
    <data>/imported/neusight`` write (:class:`scaledl.layout.DataLayout`).
    """
    from scaledl.evaluation.gpu import GpuEvaluationConfig, evaluate_gpu
    from scaledl.evaluation.gpu_calibration import GPU_CALIBRATION_FILE, write_gpu_calibration
    from scaledl.io.atomic import atomic_file, write_atomic
    from scaledl.layout import neusight_peer_root, vidur_network_root
    from scaledl.models.data import ProfileDataError

    profiles = profiles or layout().imported_validated_dir()
    parallel_labels = parallel_labels or layout().imported_parallel_labels()
    out = out or layout().reports_dir
    if not profiles.is_dir():
        fail(f"{profiles}: validated GPU profiles not found (scaledl import neusight, validate)")
    labels = parallel_labels if parallel_labels is not None and parallel_labels.is_file() else None
    config = GpuEvaluationConfig(
        parallel_labels=labels, vidur_root=vidur_network_root(), peer_root=neusight_peer_root()
    )
    try:
        metrics, pred = evaluate_gpu(profiles, config)
    except (ProfileDataError, ValueError) as exc:
        fail(str(exc))
    write_atomic(out / "gpu_metrics.json", json.dumps(metrics, indent=2, default=str))
    with atomic_file(out / "gpu_predictions.parquet") as tmp:
        pred.to_parquet(tmp, index=False)
    write_gpu_calibration(pred, profiles, out / GPU_CALIBRATION_FILE)
    for target in metrics["targets"]:
        typer.echo(f"{target['target']}: {target['measured']} (reached: {target['reached']})")
    typer.echo(f"metrics: {out / 'gpu_metrics.json'}")


def headline(metrics) -> str:
    """The headline MRE/RMSE of ScaleDL and the baselines, one line per split and method.

    Args:
        metrics: a :class:`~scaledl.evaluation.results.Metrics`.

    Returns:
        The lines (skipped splits are named with the reason).
    """
    from scaledl.evaluation.results import Skipped

    lines = []
    for split in ("id", "extrapolation", "ood"):
        label = "ood (mean)" if split == "ood" else split
        body = getattr(metrics.splits, split)
        if isinstance(body, Skipped):
            lines.append(f"{label:>13} skipped: {body.skipped}")
            continue
        for method in metrics.methods:
            if split != "ood" and method not in body.methods:
                continue
            m = metrics.method_errors(split, method)
            lines.append(f"{label:>13} {method:<12} MRE {m.mre:.1%}  RMSE {m.rmse_s:.4f} s")
    return "\n".join(lines)
