"""``scaledl evaluate-reference`` and ``evaluate-layouts``: evaluations on committed datasets."""

from __future__ import annotations

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


@app.command("evaluate-reference")
def evaluate_reference_command(
    data: Annotated[Path, typer.Option(help="Validated profiles of the reference dataset")] = Path(
        "datasets/reference-cpu/validated"
    ),
    out: Annotated[Path, typer.Option(help="Result JSON")] = Path("docs/results/reference.json"),
    learning_curve_seeds: Annotated[int, typer.Option(help="Seeds per sampler and size")] = 10,
    n_jobs: Annotated[int, typer.Option(help="Parallel processes (-1: every core)")] = -1,
    readme: Annotated[
        Path | None, typer.Option(help="Also rewrite this README's reference block")
    ] = None,
) -> None:
    """Evaluate on the committed reference dataset (fixed labels).

    k-fold, leave-one-family-out, D-optimal against random learning curves and sequential
    design (:func:`scaledl.evaluation.reference.evaluate_reference`). Run from the repository
    root (the dataset's Hugging Face config paths are relative to it).
    """
    from scaledl.evaluation.envelope import EvaluationResult
    from scaledl.evaluation.reference import ReferenceConfig, evaluate_reference
    from scaledl.models.data import ProfileDataError, load_profile_data
    from scaledl.report.blocks.registry import BLOCKS

    try:
        refuse_overwrite({"--out": out, "--readme": readme}, {"--data": data})
        out = output_path(out, (".json",), "--out")
        check_readme(readme, BLOCKS["reference"])
    except ValueError as exc:
        fail(str(exc))
    try:
        profiles = load_profile_data(data)
    except (ProfileDataError, ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    config = ReferenceConfig(learning_curve_seeds=learning_curve_seeds, n_jobs=n_jobs)
    checkpoint = out.with_suffix(".partial.json")
    result = EvaluationResult.of("reference", evaluate_reference(profiles, config, checkpoint))
    for target in result.targets:
        verdict = {True: "met", False: "missed", None: "not evaluated"}[target.met]
        typer.echo(f"{target.text}: {target.measured}: {verdict}")
    result.write(out)
    typer.echo(f"{out}: written")
    render_readme(readme, BLOCKS["reference"], out)


def refuse_variants_file(out: Path) -> None:
    """Refuse an ``--out`` JSON that holds the layout variants of the history script.

    Raises:
        ValueError: ``out`` is a JSON object with a ``variants`` key (unreadable or other
            files are left to the write, which replaces them).
    """
    from scaledl.io.safe import UnsafeInputError, read_json

    if not out.is_file():
        return
    try:
        held = read_json(out)
    except (UnsafeInputError, ValueError):
        return
    if isinstance(held, dict) and "variants" in held:
        raise ValueError(
            f"--out {out}: holds the layout variants of benchmarks/history/layout_variants.py, "
            "which this command does not compute; regenerate that file with the script, or "
            "write elsewhere"
        )


@app.command("evaluate-layouts")
def evaluate_layouts_command(
    data: Annotated[Path, typer.Option(help="Validated profiles of a layout dataset")] = Path(
        "datasets/layouts-cpu/validated"
    ),
    out: Annotated[
        Path | None, typer.Option(help="Result JSON [<data>/reports/layouts.json]")
    ] = None,
    repeat: Annotated[
        list[Path] | None,
        typer.Option(help="Another profile of the same workloads: its targets are added"),
    ] = None,
    across: Annotated[
        list[Path] | None,
        typer.Option(help="A further profile of the same workloads: the headline's targets only"),
    ] = None,
    readme: Annotated[
        Path | None, typer.Option(help="Also rewrite this README's layouts block")
    ] = None,
) -> None:
    """Evaluate the layout recipe on a profiled layout dataset (fixed labels).

    Leave-one-layout-out MRE of the product's layout recipe (sharded, tensor-parallel and
    pipeline layouts held out in turn, the data-parallel ones ranked), composed and corrected,
    and Kendall's tau of the layout ranking per model
    (:func:`scaledl.evaluation.profiled_layouts.evaluate_layouts`). Each ``--repeat`` (a
    profile of the same workloads measured at another time) and each ``--across`` profile is
    evaluated the same way and its targets are stored under ``repeats`` / ``across`` (the host
    drifts: a figure is quoted from more than one profile), with the ranking's tau between its
    measured times and the main profile's
    (:func:`scaledl.evaluation.profiled_layouts.measured_agreement`: the ranking target's
    resolution); the block then tabulates every profile's targets and how
    many profiles meet each. The result records ``evaluated_on``, the processor it was
    computed on (:func:`scaledl.devices.local.local_cpu_name`): the evaluation is
    deterministic on one processor, but another one's floating-point kernels move its MREs in
    the third digit and can swap near-tied layouts in a ranking. The variants the recipe was
    chosen among: ``benchmarks/history/layout_variants.py``, which writes the committed
    ``docs/results/layouts.json`` whole (the recipe's part is this command's); an ``--out`` file
    that holds those variants is refused, so this command never drops them. Bad input exits 2
    naming the file.
    """
    from scaledl.devices.local import local_cpu_name
    from scaledl.evaluation.envelope import EvaluationResult
    from scaledl.evaluation.profiled_layouts import evaluate_headline, evaluate_layouts
    from scaledl.models.data import ProfileDataError
    from scaledl.report.blocks.layouts import layouts_markdown
    from scaledl.report.blocks.registry import BLOCKS

    out = out or layout().reports_dir / "layouts.json"
    try:
        sources = {"--data": data, "--repeat": repeat, "--across": across}
        refuse_overwrite({"--out": out, "--readme": readme}, sources)
        out = output_path(out, (".json",), "--out")
        refuse_variants_file(out)
        check_readme(readme, BLOCKS["layouts"])
    except ValueError as exc:
        fail(str(exc))
    started = time.perf_counter()
    try:
        result = evaluate_layouts(data)
        result["repeats"] = [evaluate_headline(r, result) for r in repeat or []]
        result["across"] = [evaluate_headline(a, result) for a in across or []]
        result["evaluated_on"] = local_cpu_name()
    except (ProfileDataError, ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    envelope = EvaluationResult.of(
        "layouts", result, seconds={"total": time.perf_counter() - started}
    )
    envelope.write(out)
    typer.echo(layouts_markdown(envelope.to_dict()))
    typer.echo(f"{out}: written")
    render_readme(readme, BLOCKS["layouts"], out)
