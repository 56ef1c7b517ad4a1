"""``scaledl devices``: the device table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

app = typer.Typer()


@app.command()
def devices(
    probe: Annotated[
        bool, typer.Option(help="Measure this CPU host (GEMM + memory copy) and store it")
    ] = False,
    hosts_dir: Annotated[Path | None, typer.Option(help="Where host specs are stored")] = None,
) -> None:
    """List the device table (GPUs with sources, measured CPU hosts); --probe adds this host."""
    from scaledl.devices import known_devices
    from scaledl.devices.host import probe_host, store_host_spec

    if probe:
        spec = probe_host()
        path = store_host_spec(spec, hosts_dir)
        typer.echo(
            f"{path}: {spec.device_name}: {spec.peak_tflops['fp32'] * 1e3:.1f} GFLOP/s fp32, "
            f"{spec.mem_bandwidth_gbps:.1f} GB/s (one thread)"
        )
    table = known_devices(hosts_dir)
    columns = ["device_name", "peak_fp32_tflops", "peak_bf16_tflops", "mem_bandwidth_gbps",
               "num_sms", "l2_mb", "memory_gb"]  # fmt: skip
    with pd.option_context("display.width", 160, "display.max_columns", 10):
        typer.echo(table[columns].to_string(index=False))
