"""``scaledl summary`` and ``scaledl reproducibility``: results of a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from scaledl.cli.common import check_readme, fail, layout, output_path, refuse_overwrite
from scaledl.cli.evaluate import headline
from scaledl.io.atomic import write_atomic
from scaledl.layout import DataLayout

app = typer.Typer()


@app.command()
def summary(
    data: Annotated[
        Path | None, typer.Option(help="Data root [$SCALEDL_DATA_DIR, else data]")
    ] = None,
    markdown: Annotated[
        bool,
        typer.Option(
            "--markdown",
            help="Copy the metrics to --results and write the README's results block from it",
        ),
    ] = False,
    readme: Annotated[Path, typer.Option(help="Page with the results and gpu markers")] = Path(
        "docs/results/metrics.md"
    ),
    results: Annotated[Path, typer.Option(help="Committed results file (--markdown)")] = Path(
        "docs/results/metrics.json"
    ),
) -> None:
    """Print where the report and the predictor are, and the headline MRE/RMSE.

    With ``--markdown``, ``<data>/reports/metrics.json`` is validated and copied to ``--results``
    (commit it), and the ``results`` and ``gpu`` blocks of ``--readme`` are rendered from that
    copy (the block registry's renderers, as ``scaledl docs render``); a test keeps the two in
    step.
    """
    from scaledl.evaluation.results import Metrics, MetricsError
    from scaledl.registry import BundleError, latest_bundle
    from scaledl.report.blocks.registry import BLOCKS, write_page
    from scaledl.report.evaluation_report import reproducibility_text

    paths = layout() if data is None else DataLayout(data)
    metrics_path = paths.metrics_path
    if not metrics_path.exists():
        fail(f"{metrics_path}: no evaluation yet (run `make run`)")
    try:
        blocks = [BLOCKS["results"], BLOCKS["gpu"]]
        if markdown:
            outputs = {"--results": results, "--readme": readme}
            refuse_overwrite(outputs, {"the metrics of --data": metrics_path})
            for block in blocks:
                check_readme(readme, block)
        metrics = Metrics.read(metrics_path)
        if markdown:
            metrics.write(results)
            write_page(readme, blocks, [results] * len(blocks))
    except (MetricsError, ValueError) as exc:
        fail(str(exc))
    if markdown:
        typer.echo(f"{results}: written from {metrics_path}")
        typer.echo(f"{readme}: results and gpu blocks rendered from {results}")
        return
    try:
        bundle = latest_bundle(paths.predictor_dir())
    except BundleError as exc:
        fail(str(exc))
    if bundle is None:
        fail(f"{paths.predictor_dir() / 'latest'}: no registered predictor yet (run `make run`)")
    typer.echo(f"report:    {paths.report_path}")
    typer.echo(f"metrics:   {metrics_path}")
    typer.echo(f"predictor: {bundle}")
    typer.echo(
        "label reproducibility (MRE between launches, the noise floor): "
        + reproducibility_text(metrics)
    )
    typer.echo(headline(metrics))
    _echo_label_quality(paths.profiles_dir)


def _echo_label_quality(profiles: Path) -> None:
    """The profile's kept share and drift verdict (a warning when the labels did not absorb it)."""
    from scaledl.evaluation.reproducibility import label_quality
    from scaledl.models.data import ProfileDataError, read_tables

    try:
        quality = label_quality(read_tables(profiles))
    except (ProfileDataError, ValueError) as exc:
        typer.echo(f"labels:    not assessed ({exc})")
        return
    if quality["absorbed"]:
        typer.echo(f"labels:    {quality['message']}")
    else:
        typer.secho(f"warning:   {quality['message']}", fg=typer.colors.YELLOW, err=True)


@app.command()
def reproducibility(
    run_a: Annotated[Path, typer.Argument(help="Profiles directory of run A")],
    run_b: Annotated[Path, typer.Argument(help="Profiles directory of run B (same design)")],
    out: Annotated[Path | None, typer.Option(help="Write the figures as JSON")] = None,
) -> None:
    """Label MRE between two independent profiles of one design: raw vs host-drift corrected.

    Each label candidate (raw and corrected launch labels, median or fastest launch) is scored
    by its MRE between the two runs, and compared with the raw label paired over workloads
    (BCa bootstrap): :func:`scaledl.evaluation.reproducibility.cross_run_reproducibility`.
    """
    from scaledl.evaluation.reproducibility import cross_run_reproducibility
    from scaledl.models.data import ProfileDataError, read_tables

    try:
        refuse_overwrite({"--out": out}, {"RUN_A": run_a, "RUN_B": run_b})
        out = output_path(out, (".json",), "--out")
    except ValueError as exc:
        fail(str(exc))
    try:
        result = cross_run_reproducibility(read_tables(run_a), read_tables(run_b))
    except (ProfileDataError, ValueError) as exc:
        fail(str(exc))
    typer.echo(f"{result['n_workloads']} workloads profiled in both runs")
    for name, c in result["candidates"].items():
        per_ws = ", ".join(
            f"world size {k}: {v['mre']:.2%}" for k, v in c["per_world_size"].items()
        )
        typer.echo(f"{name:>22}: label MRE between runs {c['mre']:.2%} ({per_ws})")
    for name, comparison in result["comparisons"].items():
        typer.echo(
            f"{name} vs raw: {100 * comparison['mre_difference']:+.2f} points (95% CI "
            f"{100 * comparison['ci_low']:+.2f} to {100 * comparison['ci_high']:+.2f}): "
            f"{comparison['verdict']}"
        )
    if out is not None:
        write_atomic(out, json.dumps(result, indent=2))
        typer.echo(f"{out}: written")
