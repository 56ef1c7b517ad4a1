"""``scaledl plan-job``: plan the layout of a large-language-model training job.

A separate command rather than an option of ``scaledl plan``: ``plan`` predicts a workload's
epochs with a registered predictor (dataset size, epochs and price required), while an LLM job
is composed from kernel and collective models (:mod:`scaledl.planning.llm_plan`) and has its
own inputs (a training job, GPU counts, a layout space); ``scaledl plan --layouts`` is unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

from scaledl.cli.common import fail, int_list, output_path, refuse_overwrite, write_table

app = typer.Typer()

#: ``--space`` fields (:class:`~scaledl.planning.llm_plan.LlmSpace`), named here so the options
#: are checked before the planner is imported; a test keeps them equal.
SPACE_FIELDS = ("tp_sizes", "pp_sizes", "vp_sizes", "cp_sizes", "shardings", "recomputes",
                "micro_batches", "uneven")  # fmt: skip


def _space_values(pairs: list[str]) -> dict:
    """``--space field=a,b`` options as :class:`LlmSpace` values.

    Raises:
        ValueError: a pair without ``=``, an unknown field, a field given twice or a bad list.
    """
    values: dict = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or name not in SPACE_FIELDS:
            raise ValueError(f"--space {pair!r}: expected field=values with field one of "
                             f"{list(SPACE_FIELDS)}")  # fmt: skip
        if name in values:
            raise ValueError(f"--space {pair!r}: field {name!r} given twice")
        if name == "uneven":
            if text.strip().lower() not in ("true", "false"):
                raise ValueError(f"--space {pair!r}: uneven=true or uneven=false")
            values[name] = text.strip().lower() == "true"
        elif name in ("shardings", "recomputes"):
            values[name] = tuple(v.strip() for v in text.split(",") if v.strip())
        else:
            values[name] = tuple(int_list(text, f"--space {name}"))
    return values


@app.command("plan-job")
def plan_job(
    plan_file: Annotated[Path, typer.Argument(help="YAML: job (a training job) and plan")],
    gpus: Annotated[
        str | None, typer.Option(help="GPU counts (a,b,... or ranges a-b) [the file's]")
    ] = None,
    space: Annotated[
        list[str] | None, typer.Option("--space", help="Layout space field=a,b (repeat)")
    ] = None,
    headroom: Annotated[
        float | None, typer.Option(help="Share of device memory kept free [0.1]")
    ] = None,
    memory_gib: Annotated[float | None, typer.Option(help="Memory per GPU, GiB [table]")] = None,
    tokens: Annotated[float | None, typer.Option(help="Tokens to train on")] = None,
    price_per_gpu_hour: Annotated[float | None, typer.Option(help="Price of a GPU-hour")] = None,
    corrected: Annotated[
        bool,
        typer.Option(
            help="Correct the steps (GNN fitted on the published runs, ~25 s; held out by "
            "source 2 points better than the composition on average, worse on some stacks: "
            "docs/llm_at_scale.md)"
        ),
    ] = False,
    measured: Annotated[
        list[Path] | None,
        typer.Option(
            "--measured",
            help="CSV of your measured steps, published-runs columns "
            "(repeat): calibrate the step times",
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Write every layout (csv/parquet)")] = None,
    all_rows: Annotated[bool, typer.Option("--all", help="Print every layout")] = False,
    as_given: Annotated[
        bool,
        typer.Option(
            "--as-given",
            help="Plan only the job's own layout (its step time, memory, MFU, cost); no "
            "--gpus or --space",
        ),
    ] = False,
) -> None:
    """Plan an LLM training job: the fastest layout that fits, per GPU count, and the front.

    Searches dp x tp x pp x vp x cp x sharding x recompute x micro-batch for each GPU count,
    refuses layouts the grid's rules or the GPU's memory (less a headroom) exclude, counting
    them per rule, composes each fitting layout's step (compose_step with the GPU's kernel and
    network models), and prints the fastest fitting layout per GPU count and the Pareto front
    of step time vs GPU-hours per step. ``--corrected`` multiplies each composed step by the
    learned correction, fitted first on every published step time (external/scale_runs).
    ``--measured`` files (your steps in the published-runs CSV columns, at least 3 on the plan's
    GPU) give one factor, the geometric mean of measured / predicted, printed with its range
    and the rows not used; ``calibrated_iteration_s`` is each step times it (the ranking is
    unchanged). Options override the file's ``plan`` section. Exit code 2 when nothing fits
    (with the layout needing the least memory and its figures) or the measured files are
    refused.

    ``--as-given`` plans exactly the job's layout on its ``n_gpus`` (the file's space and GPU
    counts are not used): its row with the same columns, exit code 2 when it does not fit (its
    figures, and the step time composed as if it fitted) or the composition refuses it.
    """
    try:
        refuse_overwrite({"--out": out}, {"PLAN_FILE": plan_file, "--measured": measured})
        output_path(out, (".csv", ".parquet"), "--out")
        space_values = _space_values(space or [])
        counts = int_list(gpus, "--gpus") if gpus is not None else None
        if as_given and (counts is not None or space_values):
            raise ValueError("--as-given plans the job's own layout on its n_gpus: give no "
                             "--gpus or --space")  # fmt: skip
    except ValueError as exc:
        fail(str(exc))
    # Imported after the options are checked, as `scaledl plan` does: the planner pulls in the
    # kernel and collective models (seconds), which every other command would pay at start.
    from scaledl.planning.llm_plan import (
        LlmPlanError,
        LlmSpace,
        published_correction,
        read_plan_file,
        step_correction,
    )
    from scaledl.planning.llm_plan import plan_job as make_plan

    try:
        request = read_plan_file(plan_file)
        options = dict(request.options)
        given = {"headroom": headroom, "memory_gib": memory_gib, "tokens": tokens,
                 "price_per_gpu_hour": price_per_gpu_hour}  # fmt: skip
        options.update({k: v for k, v in given.items() if v is not None})
        if corrected:
            model = published_correction()
            typer.echo(f"correction: {model.kind}, fitted on {model.n_training_rows} published "
                       "step times")  # fmt: skip
            options["correction"] = step_correction(model)
        if as_given:
            result = make_plan(request.job, as_given=True, measured=measured or None, **options)
        else:
            result = make_plan(
                request.job,
                counts or request.gpu_counts,
                space=LlmSpace(**{**request.space.__dict__, **space_values}),
                measured=measured or None,
                **options,
            )
    except (LlmPlanError, ValueError) as exc:
        fail(str(exc))
    if out is not None:
        table = result.table.copy()
        table["layers_per_stage"] = [",".join(map(str, s)) if s else ""
                                     for s in table["layers_per_stage"]]  # fmt: skip
        write_table(table, out)
    if as_given:
        with pd.option_context("display.width", 200, "display.max_columns", 30):
            typer.echo(result.to_text())
        if out is not None:
            typer.echo(f"table: {out}")
        if result.given_problem():
            fail(result.given_problem())
        return
    if not result.table["iteration_s"].notna().any():
        fail(f"{plan_file}: {result.why_none()}")
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        typer.echo(result.to_text(all_rows=all_rows))
    if out is not None:
        typer.echo(f"table: {out}")
