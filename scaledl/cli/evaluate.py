"""``scaledl evaluate`` (``evaluate published-runs``), ``evaluate-gpu(-layouts)``: evaluation."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from scaledl.cli.common import (
    check_readme,
    fail,
    layout,
    output_path,
    refuse_overwrite,
    render_readme,
)

app = typer.Typer()
#: ``scaledl evaluate``: the evaluation itself when called alone, a group for its sub-commands.
evaluate_app = typer.Typer()
app.add_typer(evaluate_app, name="evaluate")


def _stderr(line: str) -> None:
    """A progress line on stderr (stdout keeps the results)."""
    typer.echo(line, err=True)


@evaluate_app.callback(invoke_without_command=True)
def evaluate(
    ctx: typer.Context,
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
    """Evaluate ScaleDL and the baselines (ID, leave-one-family-out, extrapolation, GPU, ...).

    Progress goes to stderr; the GPU evaluation is cached under <data>/.cache/gpu_evaluation.
    ``scaledl evaluate published-runs`` evaluates published LLM training step times instead.
    """
    if ctx.invoked_subcommand is not None:
        return
    from scaledl.evaluation import EvaluationConfig
    from scaledl.evaluation import evaluate as run_evaluation
    from scaledl.models.data import ProfileDataError
    from scaledl.report.presenter import HtmlReport

    profiles = profiles or layout().validated_dir
    out = out or layout().reports_dir
    try:
        sources = {"--profiles": profiles, "--gpu-profiles": gpu_profiles,
                   "--gpu-parallel-labels": gpu_parallel_labels}  # fmt: skip
        refuse_overwrite({"--out": out}, sources)
    except ValueError as exc:
        fail(str(exc))
    config = EvaluationConfig(
        gpu_profiles=gpu_profiles,
        gpu_parallel_labels=gpu_parallel_labels,
        gpu_cache_dir=layout().gpu_evaluation_cache_dir,
    )
    try:
        metrics = run_evaluation(profiles, out, config, _stderr, HtmlReport())
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
    cache: Annotated[
        bool, typer.Option(help="Read / store the result in <data>/.cache/gpu_evaluation")
    ] = True,
) -> None:
    """Evaluate the device-aware predictor on imported GPU profiles only (LOMO, LOGO, -dp4).

    The defaults are where ``scaledl import neusight`` and ``scaledl validate
    <data>/imported/neusight`` write (:class:`scaledl.layout.DataLayout`). Progress goes to
    stderr; the result is computed once per content of the inputs and code (``--no-cache``:
    always computed).
    """
    from scaledl.evaluation.gpu import GpuEvaluationConfig, evaluate_gpu
    from scaledl.evaluation.gpu_calibration import GPU_CALIBRATION_FILE, write_gpu_calibration
    from scaledl.evaluation.progress import EvaluationProgress
    from scaledl.io.atomic import atomic_file, write_atomic
    from scaledl.layout import neusight_peer_root, vidur_network_root
    from scaledl.models.data import ProfileDataError

    profiles = profiles or layout().imported_validated_dir()
    parallel_labels = parallel_labels or layout().imported_parallel_labels()
    out = out or layout().reports_dir
    try:
        sources = {"--profiles": profiles, "--parallel-labels": parallel_labels}
        refuse_overwrite({"--out": out}, sources)
    except ValueError as exc:
        fail(str(exc))
    if not profiles.is_dir():
        fail(f"{profiles}: validated GPU profiles not found (scaledl import neusight, validate)")
    labels = parallel_labels if parallel_labels is not None and parallel_labels.is_file() else None
    config = GpuEvaluationConfig(
        parallel_labels=labels,
        vidur_root=vidur_network_root(),
        peer_root=neusight_peer_root(),
        n_jobs=-1,
    )
    cache_dir = layout().gpu_evaluation_cache_dir if cache else None
    progress = EvaluationProgress(_stderr)
    try:
        with progress.stage("gpu"):
            metrics, pred = evaluate_gpu(profiles, config, progress, cache_dir)
    except (ProfileDataError, ValueError) as exc:
        fail(str(exc))
    write_atomic(out / "gpu_metrics.json", json.dumps(metrics, indent=2, default=str))
    with atomic_file(out / "gpu_predictions.parquet") as tmp:
        pred.to_parquet(tmp, index=False)
    write_gpu_calibration(pred, profiles, out / GPU_CALIBRATION_FILE)
    for target in metrics["targets"]:
        typer.echo(f"{target['target']}: {target['measured']} (reached: {target['reached']})")
    typer.echo(f"metrics: {out / 'gpu_metrics.json'}")


@app.command("evaluate-gpu-layouts")
def evaluate_gpu_layouts_command(
    profiles: Annotated[
        Path | None,
        typer.Option(help="Validated imported GPU profiles [<data>/imported/validated/neusight]"),
    ] = None,
    parallel_labels: Annotated[
        Path | None,
        typer.Option(help="The import's parallel_labels.parquet [<data>/imported/neusight/...]"),
    ] = None,
    out: Annotated[Path, typer.Option(help="Result JSON")] = Path("docs/results/gpu_layouts.json"),
    readme: Annotated[
        Path | None, typer.Option(help="Also rewrite this README's gpu-layouts block")
    ] = None,
) -> None:
    """Predict NeuSight's 4-GPU rows (dp4, tp4, pp4_1) and compare with NeuSight's own.

    The GPU predictor is fitted on the single-GPU profiles only; the rows are composed by
    :mod:`scaledl.parallel.megatron` with collectives fitted on Vidur's measurements and
    compared by :mod:`scaledl.evaluation.gpu_layouts`.
    Bad input exits 2 naming the file and field.
    """
    import pandas as pd

    from scaledl.evaluation.envelope import EvaluationResult
    from scaledl.evaluation.gpu import fit_scaledl
    from scaledl.evaluation.gpu_layouts import evaluate_layout_rows
    from scaledl.external.neusight import NeusightFormatError
    from scaledl.external.neusight_peer import load_peer_layout_predictions
    from scaledl.external.vidur import load_vidur_allreduce
    from scaledl.layout import neusight_peer_root, vidur_network_root
    from scaledl.models.data import ProfileDataError, load_profile_data
    from scaledl.report.blocks.registry import BLOCKS

    profiles = profiles or layout().imported_validated_dir()
    parallel_labels = parallel_labels or layout().imported_parallel_labels()
    try:
        refuse_overwrite(
            {"--out": out, "--readme": readme},
            {"--profiles": profiles, "--parallel-labels": parallel_labels},
        )
        out = output_path(out, (".json",), "--out")
        check_readme(readme, BLOCKS["gpu-layouts"])
    except ValueError as exc:
        fail(str(exc))
    if not parallel_labels.is_file():
        fail(f"{parallel_labels}: no parallel labels (scaledl import neusight)")
    started = time.perf_counter()
    try:
        data = load_profile_data(profiles)
        peer = load_peer_layout_predictions(neusight_peer_root())
        result = evaluate_layout_rows(
            fit_scaledl(data), pd.read_parquet(parallel_labels),
            load_vidur_allreduce(vidur_network_root()), peer,
        )  # fmt: skip
    except (ProfileDataError, NeusightFormatError, ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    result = {"profiles": _shown(profiles), "n_training_workloads": len(data.ids), **result}
    envelope = EvaluationResult.of(
        "gpu_layouts", result, seconds={"total": time.perf_counter() - started}
    )
    envelope.write(out)
    for target in envelope.targets:
        typer.echo(f"{target.text}: {target.measured} (met: {target.met})")
    typer.echo(f"{out}: written")
    render_readme(readme, BLOCKS["gpu-layouts"], out)


@evaluate_app.command("published-runs")
def evaluate_published_runs_command(
    csv: Annotated[
        list[Path] | None,
        typer.Argument(help="Published-runs CSV files (default: the six of <external>/scale_runs)"),
    ] = None,
    out: Annotated[Path, typer.Option(help="Result JSON")] = Path(
        "docs/results/published_runs.json"
    ),
    readme: Annotated[
        Path | None,
        typer.Option(help="Also rewrite the published-runs block of this page (docs/results/...)"),
    ] = None,
    report: Annotated[
        Path | None, typer.Option(help="Also write the HTML report section to this file")
    ] = None,
) -> None:
    """Predict published LLM training step times, held out by source, GPU generation and size.

    Fixed-MFU, roofline, composed, ScaleDL and its no-edges ablation on the same held-out rows
    (:mod:`scaledl.evaluation.published_runs`), also with a few rows of the held-out source
    known (``few_shot_source``). Progress goes to stderr. Bad input exits 2
    naming the file, row and field.
    """
    from scaledl.evaluation.published_runs import evaluate_published_runs
    from scaledl.io.atomic import write_atomic
    from scaledl.report.blocks.registry import BLOCKS
    from scaledl.report.published_runs import published_runs_html

    try:
        refuse_overwrite({"--out": out, "--readme": readme, "--report": report}, {"CSV": csv})
        out = output_path(out, (".json",), "--out")
        report = output_path(report, (".html",), "--report")
        # a page without the block is refused before minutes of work
        check_readme(readme, BLOCKS["published-runs"])
        result = evaluate_published_runs(csv or None, progress=_stderr)
    except (ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    result.write(out)
    for target in result.targets:
        reached = {True: "yes", False: "no", None: "not measured"}[target.met]
        typer.echo(f"{target.text}: {target.measured} (reached: {reached})")
    typer.echo(f"{out}: written ({result.seconds['total']:.0f} s)")
    render_readme(readme, BLOCKS["published-runs"], out)
    if report is not None:
        write_atomic(report, published_runs_html(result))
        typer.echo(f"{report}: written")


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


def _shown(path: Path) -> str:
    """A path for a committed result: relative to the data root (``<data>/...``) when below it."""
    root = layout().root.resolve()
    try:
        return f"<data>/{path.resolve().relative_to(root)}"
    except ValueError:
        return str(path)
