"""``scaledl predict`` and ``scaledl plan``: use a registered predictor."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

from scaledl.cli.common import (
    check_one_source,
    fail,
    int_list,
    layout,
    output_path,
    refuse_overwrite,
    workload_rows,
    write_table,
)

app = typer.Typer()


@app.command()
def predict(
    predictor: Annotated[
        Path | None, typer.Option(help="Bundle or name directory [<data>/predictors/scaledl]")
    ] = None,
    workloads: Annotated[
        Path | None, typer.Option(help="CSV, YAML or parquet of workloads")
    ] = None,
    family: Annotated[str | None, typer.Option(help="Inline workload: family")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Inline field=value (repeat)")
    ] = None,
    detail: Annotated[
        bool,
        typer.Option(
            help="Also print per-layer predictions; with --out X.csv|X.parquet also write them "
            "to X.layers.csv|X.layers.parquet"
        ),
    ] = False,
    out: Annotated[Path | None, typer.Option(help="Write predictions (csv/parquet)")] = None,
    coverage: Annotated[
        float | None,
        typer.Option(help="Add calibrated intervals of this coverage, e.g. 0.9 (*_low, *_high)"),
    ] = None,
    strict: Annotated[
        bool, typer.Option(help="Exit 2 when a workload lies outside the training domain")
    ] = False,
) -> None:
    """Predict iteration and epoch time of workloads from a trained predictor.

    Every row names what answered it (``recipe``: ``predictor``; for a tensor-parallel,
    pipeline or sharded layout the layout calibration of its device, ``calibrated:...``, fitted
    by ``scaledl fit-layouts``, else ``current``; on a GPU predictor Megatron-LM's recipe,
    ``megatron:<system>``, for layouts and data parallelism of several GPUs; said below the
    table); every row says
    whether it lies in the predictor's training domain (``in_domain``) and, if
    not, why (listed below the table; with more than 5 such rows, counted by reason with the
    first 5 rows); ``--strict`` makes that an error (exit code 2 naming the
    row and field). ``--coverage 0.9`` adds 90% conformal intervals; an unbounded one
    (``0`` to ``inf``: a stratum calibrated on too few residuals or families) is explained
    below the table, one line per stratum naming the rows and the reason. A CSV or parquet file
    predicted into ``--out`` is streamed: read, predicted and written in chunks (a progress bar
    on stderr), the output complete or absent; the first rows are printed. ``--detail --out
    X.parquet`` writes the per-node table (one row per layer call, all-reduce bucket and
    optimizer step of each workload) beside it, to ``X.layers.parquet`` (:func:`layers_path`;
    ``.csv`` alike); neither file may be an input (exit code 2). A workloads file and an inline
    ``--family``/``--set`` workload together are refused (exit code 2).
    """
    from scaledl.models.guard import summarise_outside
    from scaledl.prediction.predictor import load_predictor
    from scaledl.registry import BundleError
    from scaledl.workloads.fields import WorkloadError

    layers_out = layers_path(out) if detail and out is not None else None
    try:
        refuse_overwrite(
            {"--out": out, "--out (per-layer table)": layers_out},
            {"--workloads": workloads, "--predictor": predictor},
        )
        check_one_source(workloads, family, set_)
    except ValueError as exc:
        fail(str(exc))
    if workloads is not None and out is not None and not detail:
        if workloads.suffix.lower() in (".csv", ".parquet"):
            _predict_streamed(
                predictor or layout().predictor_dir(), workloads, out, coverage, strict
            )
            return
    try:
        output_path(out, (".csv", ".parquet"), "--out")
        output_path(layers_out, (".csv", ".parquet"), "--out (per-layer table)")
        rows = workload_rows(workloads, family, set_)
        model = load_predictor(predictor or layout().predictor_dir())
        result = model.predict(
            rows, detail=detail, source=str(workloads or "--set"), coverage=coverage,
            strict=strict,
        )  # fmt: skip
    except (ValueError, WorkloadError, BundleError) as exc:
        fail(str(exc))
    table, nodes = result if detail else (result, None)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        typer.echo(table.drop(columns=["extrapolation"]).to_string(index=False))
        if nodes is not None:
            typer.echo(nodes.to_string(index=False))
    from scaledl.prediction.layouts import recipe_lines

    for line in recipe_lines(table["recipe"].value_counts().to_dict()):
        typer.echo(line)
    if coverage is not None:
        bases = table["interval_basis"].value_counts().to_dict()
        for line in model.calibration.unbounded_reasons(bases, coverage):
            typer.echo(line)
    for line in summarise_outside(table["extrapolation"].tolist()):
        typer.secho(line, err=True, fg=typer.colors.YELLOW)
    if out is not None:
        write_table(table, out)
        typer.echo(f"{len(table)} predictions: {out}")
    if layers_out is not None:
        write_table(nodes, layers_out)
        typer.echo(f"{len(nodes)} per-layer predictions: {layers_out}")


def layers_path(out: Path) -> Path:
    """Where ``--detail --out OUT`` writes the per-layer table (the same format).

    ``OUT`` with ``.layers`` before its suffix: ``pred.parquet`` -> ``pred.layers.parquet``.
    """
    return out.with_name(f"{out.stem}.layers{out.suffix}")


def _predict_streamed(
    predictor: Path, workloads: Path, out: Path, coverage: float | None, strict: bool
) -> None:
    """``scaledl predict --workloads FILE --out OUT`` in chunks (:mod:`scaledl.prediction`)."""
    from scaledl.prediction.predictor import load_predictor
    from scaledl.prediction.stream import predict_file
    from scaledl.registry import BundleError
    from scaledl.workloads.fields import WorkloadError

    try:
        output_path(out, (".csv", ".parquet"), "--out")
        model = load_predictor(predictor)
        summary = predict_file(model, workloads, out, coverage, strict)
    except (ValueError, WorkloadError, BundleError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{out}: cannot write: {exc}")
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        typer.echo(summary.head.drop(columns=["extrapolation"]).to_string(index=False))
    if summary.rows > len(summary.head):
        typer.echo(f"... {summary.rows - len(summary.head)} more rows")
    typer.echo(f"{summary.rows} predictions: {out}")
    from scaledl.prediction.layouts import recipe_lines

    for line in recipe_lines(summary.recipes):
        typer.echo(line)
    if coverage is not None:
        for line in model.calibration.unbounded_reasons(summary.bases, coverage):
            typer.echo(line)
    for line in summary.outside_lines():
        typer.secho(line, err=True, fg=typer.colors.YELLOW)


@app.command()
def plan(
    dataset_size: Annotated[int, typer.Option(help="Samples per epoch")],
    epochs: Annotated[float, typer.Option(help="Epochs to train")],
    price_per_device_hour: Annotated[float, typer.Option(help="Price of one device-hour")],
    predictor: Annotated[
        Path | None, typer.Option(help="Bundle or name directory [<data>/predictors/scaledl]")
    ] = None,
    model: Annotated[
        Path | None, typer.Option(help="YAML/CSV/parquet: one row, the model's workload fields")
    ] = None,
    family: Annotated[str | None, typer.Option(help="Inline model: family")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Inline model field=value (repeat)")
    ] = None,
    world_sizes: Annotated[
        str, typer.Option(help="Candidate world sizes (a,b,... or ranges a-b)")
    ] = "1,2,4,8",
    nodes: Annotated[str, typer.Option(help="Candidate node counts")] = "1",
    batch_sizes: Annotated[str, typer.Option(help="Candidate per-rank batch sizes")] = "1,2,4,8",
    devices_per_node: Annotated[int | None, typer.Option(help="Devices per node")] = None,
    device_memory_gb: Annotated[
        float | None, typer.Option(help="Memory per rank in GB [device table]")
    ] = None,
    deadline_h: Annotated[float | None, typer.Option(help="Time-to-train deadline, hours")] = None,
    coverage: Annotated[
        float | None, typer.Option(help="Interval coverage (0 disables intervals)")
    ] = 0.9,
    strict: Annotated[bool, typer.Option(help="Only in-domain candidates are eligible")] = False,
    png: Annotated[Path | None, typer.Option(help="Write the Pareto-front figure here")] = None,
    out: Annotated[Path | None, typer.Option(help="Write every candidate (csv/parquet)")] = None,
    all_rows: Annotated[bool, typer.Option("--all", help="Print every candidate")] = False,
    layouts: Annotated[bool, typer.Option(help="Search tensor/pipeline/sharded layouts")] = False,
    layout_set: Annotated[
        list[str] | None,
        typer.Option("--layout-set", help="With --layouts: field=a,b of the space (repeat)"),
    ] = None,
) -> None:
    """Plan a training run: the cheapest world size, nodes and batch size meeting a deadline.

    Predicts every candidate (world sizes x nodes x per-rank batch sizes) of the model, drops
    those that do not fit in memory, and prints the Pareto front of time to train vs cost and
    the cheapest candidate whose interval's upper bound meets ``--deadline-h``. With
    ``--layouts`` every valid data x tensor x pipeline layout of each world size is a candidate
    too (batch sizes are then per data-parallel replica), and the fastest layout per world size
    is printed; ``--layout-set tp_sizes=1,2`` (``pp_sizes``, ``micro_batches``, ``schedules``,
    ``shardings``, each once) narrows the space. A search is bounded before it is built: at
    most 262,144 values per list and 262,144 candidates (100,000 valid layout candidates of at
    most 1,000,000 combinations); past a limit it is refused with the count. The output ends
    with what was searched (combinations, candidates, seconds).
    """
    try:  # the options' own checks first, before the planner is imported (seconds)
        refuse_overwrite({"--out": out, "--png": png}, {"--model": model, "--predictor": predictor})
        output_path(out, (".csv", ".parquet"), "--out")
        output_path(png, (".png",), "--png")
        if layout_set and not layouts:
            raise ValueError(f"--layout-set {layout_set[0]!r}: needs --layouts (the layout search)")
        space_values = _layout_values(layout_set or [])
        sizes = {  # counted before expanded (int_list)
            "world_sizes": int_list(world_sizes, "--world-sizes"),
            "batch_sizes": int_list(batch_sizes, "--batch-sizes"),
            "nodes": int_list(nodes, "--nodes"),
        }
    except ValueError as exc:
        fail(str(exc))
    from scaledl.models.intervals import CalibrationError
    from scaledl.planning import LayoutSpace, PlanError
    from scaledl.planning import plan as make_plan
    from scaledl.prediction.predictor import load_predictor
    from scaledl.registry import BundleError
    from scaledl.workloads.fields import WorkloadError

    try:
        space = LayoutSpace(**space_values) if layouts else None
        rows = workload_rows(model, family, set_, "--model")
        if len(rows) != 1:
            raise ValueError(f"{model}: expected one model row, found {len(rows)}")
        result = make_plan(
            load_predictor(predictor or layout().predictor_dir()),
            rows[0],
            dataset_size=dataset_size,
            epochs=epochs,
            **sizes,
            price_per_device_hour=price_per_device_hour,
            device_memory_gb=device_memory_gb,
            deadline_h=deadline_h,
            coverage=coverage or None,
            devices_per_node=devices_per_node,
            strict=strict,
            layouts=space,
        )
    except (PlanError, CalibrationError, ValueError, WorkloadError, BundleError) as exc:
        fail(str(exc))
    _show_plan(result, all_rows, png, out)


def _show_plan(result, all_rows: bool, png: Path | None, out: Path | None) -> None:
    """Print the plan; write its figure and table when asked."""
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        typer.echo(result.to_text(all_rows=all_rows))
    if png is not None:
        typer.echo(f"figure: {result.plot(png)}")
    if out is not None:
        write_table(result.table, out)
        typer.echo(f"table: {out}")


#: The fields of :class:`~scaledl.planning.LayoutSpace` (``--layout-set``), named here so that
#: the options are checked before the planner is imported; a test keeps them equal.
LAYOUT_SET_FIELDS = ("tp_sizes", "pp_sizes", "micro_batches", "schedules", "shardings")


def _layout_values(pairs: list[str]) -> dict[str, tuple]:
    """The :class:`~scaledl.planning.LayoutSpace` fields of ``--layout-set field=a,b`` options.

    Integer lists are counted before expanded (:func:`~scaledl.cli.common.int_list`); the
    values are checked by ``LayoutSpace``, which takes a sharding's alias as the workload does
    (``zero3`` for ``fsdp``, :data:`~scaledl.workloads.parallelism.SHARDING_ALIASES`).

    Raises:
        ValueError: a pair without ``=``, an unknown field, a field given twice or a list past
            its limit (named).
    """
    values: dict[str, tuple] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or name not in LAYOUT_SET_FIELDS:
            raise ValueError(
                f"--layout-set {pair!r}: expected field=values with field one of "
                f"{list(LAYOUT_SET_FIELDS)}"
            )
        if name in values:
            raise ValueError(
                f"--layout-set {pair!r}: field {name!r} given twice; give its values once, "
                "comma-separated (e.g. tp_sizes=1,2,4)"
            )
        if name in ("schedules", "shardings"):
            values[name] = tuple(v.strip() for v in text.split(",") if v.strip())
        else:
            values[name] = tuple(int_list(text, f"--layout-set {name}"))
    return values


def _layout_space(pairs: list[str]):
    """The :class:`~scaledl.planning.LayoutSpace` of ``--layout-set`` options.

    Raises:
        ValueError: as :func:`_layout_values`, or a bad value (named).
    """
    from scaledl.planning import LayoutSpace

    return LayoutSpace(**_layout_values(pairs))
