"""``scaledl profile``: profile workloads with torchrun."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Annotated

import typer

from scaledl.cli.common import fail, layout, parse_workloads, refuse_overwrite
from scaledl.workloads.files import read_workloads_file

app = typer.Typer()


@app.command()
def profile(
    design: Annotated[Path | None, typer.Option(help="Design parquet to profile")] = None,
    workloads: Annotated[
        Path | None, typer.Option(help="CSV, YAML or parquet of workloads (as for predict)")
    ] = None,
    workload: Annotated[
        str | None, typer.Option(help="One workload as JSON (single-workload form)")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Profiles directory [<data>/profiles]")] = None,
    force: Annotated[bool, typer.Option(help="Profile again even if already profiled")] = False,
    preset: Annotated[
        str, typer.Option(help="Preset (name or YAML) whose `profiling:` settings to use")
    ] = "quick",
    repeats: Annotated[
        int | None, typer.Option(help="Independent launches per workload (preset's by default)")
    ] = None,
    timeout_s: Annotated[
        float | None, typer.Option(help="Seconds per workload before it is killed")
    ] = None,
    rdzv_endpoint: Annotated[str | None, typer.Option(help="host:port for multi-node")] = None,
    node_rank: Annotated[int, typer.Option(help="This node's rank (multi-node)")] = 0,
    shard: Annotated[
        str | None,
        typer.Option(help="Profile only shard K of N (K-of-N, K from 0), as the pipeline's shards"),
    ] = None,
    own_dir: Annotated[
        bool,
        typer.Option(
            help="With --shard: profile into <out>/shards/K-of-N (shards running at once on "
            "several nodes of a shared file system)"
        ),
    ] = False,
) -> None:
    """Profile workloads with torchrun (resumes; failures recorded, never fatal).

    Measurement settings (repeats, warm-up, instrumented rounds, the label stop rule, the
    interference guard) are the preset's ``profiling:`` section, so profiles made here and by
    the pipeline with the same preset are measured alike; ``--repeats`` and ``--timeout-s``
    override it. Every workload is checked before anything is launched: an invalid row, a model
    that cannot be built, or a ``device_name`` other than this host's (profiling measures this
    host) ends the command with exit code 2 naming the file, row and field.

    ``--shard K-of-N`` keeps the workloads of shard ``K`` of ``N``
    (:func:`scaledl.profiling.shards.shard_of`, the rule of the pipeline's ``profiling_shard``),
    so any scheduler can run one shard per job (``deploy/slurm``, ``docs/cluster.md``).
    """
    from scaledl.profiling.interrupt import ProfilingInterrupted
    from scaledl.profiling.launch import profile_workloads
    from scaledl.profiling.lock import ProfilesLocked
    from scaledl.profiling.store import ProfileStoreError
    from scaledl.profiling.zygote import ZygoteError

    out = out or layout().profiles_dir
    try:
        sources = {"--design": design, "--workloads": workloads, "--preset": Path(preset)}
        refuse_overwrite({"--out": out}, sources)
    except ValueError as exc:
        fail(str(exc))
    specs = _local_workloads(design, workloads, workload)
    if shard is not None:
        specs, out = _shard(specs, out, shard, own_dir)
    elif own_dir:
        fail("--own-dir needs --shard K-of-N")
    settings = _settings(preset, repeats, timeout_s, rdzv_endpoint, node_rank)
    try:
        summary = profile_workloads(specs, out, settings, force=force)
    except (ProfilesLocked, ProfileStoreError, ZygoteError) as exc:
        fail(str(exc))
    except ProfilingInterrupted as exc:
        _consolidate_or_fail(out)
        typer.echo(_interrupted_text(out, exc, specs, settings.repeats, force), err=True)
        raise typer.Exit(exc.exit_code) from None
    _consolidate_or_fail(out)
    disturbed = sum(summary.interference.values())
    typer.echo(
        f"{out}: {summary.ok} (workload, repeat) parts profiled, {summary.skipped} reused, "
        f"{summary.remeasured} re-measured after interference, {disturbed} still disturbed "
        f"(quarantined by validation), {len(summary.failed)} failed {summary.failed or ''} "
        f"in {summary.wall_s:.0f} s"
    )


def _local_workloads(design: Path | None, workloads: Path | None, workload: str | None) -> list:
    """The workloads of exactly one of the three sources, each checked to run on this host.

    Exits with code 2 (naming the file, row and field) on a bad row or another host's device.
    """
    from scaledl.design import read_design
    from scaledl.devices.local import local_device_name
    from scaledl.io.safe import unique_keys
    from scaledl.workloads.fields import WorkloadError
    from scaledl.workloads.spec import table_row

    if sum(x is not None for x in (design, workloads, workload)) != 1:
        fail("give exactly one of --design PATH, --workloads FILE or --workload JSON")
    try:
        if design is not None:
            table = read_design(design).to_dict("records")
            rows = [table_row(r, f"{design}: row {i + 1}") for i, r in enumerate(table)]
            source = str(design)
        elif workloads is not None:
            rows, source = read_workloads_file(workloads), str(workloads)
        else:
            try:
                rows, source = [json.loads(workload, object_pairs_hook=unique_keys)], "--workload"
            except ValueError as exc:  # json.JSONDecodeError, or a key given twice
                raise ValueError(f"--workload: invalid JSON: {exc}") from None
        specs = parse_workloads(rows, source)
        for i, spec in enumerate(specs):
            if spec.device_name != local_device_name():
                raise ValueError(
                    f"{source}: row {i + 1}: field 'device_name' (value {spec.device_name!r}): "
                    f"this host profiles on {local_device_name()!r}"
                )
    except (ValueError, WorkloadError) as exc:
        fail(str(exc))
    return specs


def _shard(specs: list, out: Path, spec: str, own_dir: bool) -> tuple[list, Path]:
    """The workloads of shard ``spec`` (``K-of-N``) and its profiles directory (exit 2 if bad)."""
    from scaledl.profiling.shards import parse_shard_spec, shard_dir, shard_key, shard_workloads

    try:
        index, n_shards = parse_shard_spec(spec)
    except ValueError as exc:
        fail(str(exc))
    chosen = shard_workloads(specs, index, n_shards)
    key = shard_key(index, n_shards)
    typer.echo(f"shard {key}: {len(chosen)} of {len(specs)} workloads", err=True)
    return chosen, shard_dir(out, key) if own_dir else out


def _settings(
    preset: str,
    repeats: int | None,
    timeout_s: float | None,
    rdzv_endpoint: str | None,
    node_rank: int,
):
    """The preset's ``profiling:`` settings with the command's overrides (exit 2 if invalid)."""
    from scaledl.design import PresetError, load_preset
    from scaledl.profiling.settings import ProfileSettings, Rendezvous

    overrides = {"repeats": repeats, "timeout_s": timeout_s}
    try:
        rdzv = Rendezvous(endpoint=rdzv_endpoint, node_rank=node_rank) if rdzv_endpoint else None
        loaded = load_preset(preset)
        return ProfileSettings.from_preset(
            loaded.get("profiling"),
            loaded["source"],
            rendezvous=rdzv,
            **{k: v for k, v in overrides.items() if v is not None},
        )
    except (PresetError, ValueError) as exc:
        fail(str(exc))


def _interrupted_text(out: Path, exc, specs: list, repeats: int, force: bool) -> str:
    """What an interrupted profile did, and how to go on.

    The counts are the (workload, repeat) parts of ``specs`` complete in ``out`` now (what a
    run without ``--force`` reuses) and the others (what it measures). A ``--force`` run
    measures every part again, so it is not resumed by running it again: the text says how
    many parts it measured and that the command without ``--force`` measures only those left.
    """
    # The store imports torch: only a stopped profile reads it here.
    from scaledl.profiling.store import completed_parts

    summary = exc.summary
    wanted = {(w.workload_id, r) for w in specs for r in range(repeats)}
    complete = len(completed_parts(out) & wanted)
    left = len(wanted) - complete
    name = signal.Signals(exc.signum).name
    if force:
        interrupted = f", {summary.interrupted} interrupted" if summary.interrupted else ""
        return (
            f"{out}: stopped by {name}: this --force run measured {summary.ok} of "
            f"{len(wanted)} (workload, repeat) parts again{interrupted}; {complete} parts are "
            f"complete, {left} left: the command without --force measures only the {left} "
            "left, with --force it measures every part again"
        )
    interrupted = (
        f", {summary.interrupted} interrupted (measured again on resume)"
        if summary.interrupted
        else ""
    )
    return (
        f"{out}: stopped by {name}: {complete} of {len(wanted)} (workload, repeat) parts "
        f"done, {left} left{interrupted}; run the same command again to resume"
    )


def _consolidate_or_fail(out: Path) -> None:
    """Consolidate the parts; an unreadable part or a failed write ends the command (exit 2)."""
    from scaledl.profiling.store import UNWRITABLE_ERRNOS, ProfileStoreError, consolidate

    try:
        consolidate(out)
    except ProfileStoreError as exc:
        fail(f"{exc} (profile that workload again to measure it anew)")
    except OSError as exc:
        if exc.errno not in UNWRITABLE_ERRNOS:
            raise
        fail(f"{out}: cannot write the consolidated tables: {exc}; the parts are kept")
