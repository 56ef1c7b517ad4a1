"""``scaledl design``: choose the workloads to profile."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scaledl.cli.common import fail, layout, refuse_overwrite

app = typer.Typer()


@app.command()
def design(
    preset: Annotated[
        str, typer.Option(help="Preset name (smoke, quick, paper) or YAML path")
    ] = "quick",
    n: Annotated[int | None, typer.Option(help="Workloads to choose (default: preset's)")] = None,
    sampler: Annotated[str, typer.Option(help="doptimal, random or lhs")] = "doptimal",
    seed: Annotated[int, typer.Option(help="Random seed")] = 0,
    augment: Annotated[Path | None, typer.Option(help="Existing design to augment")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Output parquet [<data>/design/design.parquet]")
    ] = None,
) -> None:
    """Choose workloads to profile (D-optimal by default) and write the design table."""
    from scaledl.design import (
        augment_design,
        generate_design,
        load_preset,
        read_design,
        write_design,
    )
    from scaledl.devices.local import local_backend, local_device_name

    out = out or layout().design_path
    try:
        refuse_overwrite({"--out": out}, {"--augment": augment, "--preset": Path(preset)})
        spec = load_preset(preset)
        count = n or spec["design"]["n_workloads"]
        device, backend = local_device_name(), local_backend()
        if augment is not None:
            result = augment_design(spec, read_design(augment), count, seed=seed,
                                    device_name=device, backend=backend)  # fmt: skip
        else:
            result = generate_design(spec, count, sampler=sampler, seed=seed,
                                     device_name=device, backend=backend)  # fmt: skip
    except ValueError as exc:
        fail(str(exc))
    path = write_design(result, out)
    typer.echo(
        f"{path}: {len(result.table)} workloads ({result.sampler}), log det {result.log_det:.2f}, "
        f"D-efficiency {result.d_efficiency:.3f}, from {result.n_candidates} candidates"
    )
