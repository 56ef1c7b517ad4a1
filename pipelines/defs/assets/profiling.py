"""Profiling stage: torchrun measurements of the design, in shards, and their validation.

The design is split into shards by a stable rule on the workload id
(:func:`scaledl.profiling.shards.shard_of`; ``$SCALEDL_PROFILING_SHARDS``, default 4):
``profiling_shard`` is partitioned by shard (keys ``K-of-N``), one materialisation per shard,
so a backfill over all its partitions profiles the design and each shard's run can go to
another machine (Dagster's run launcher or executor chooses which: ``docs/cluster.md``).
Within a shard, resuming, the interference guard, drift correction and the profiles lock are
those of :func:`scaledl.profiling.launch.profile_workloads`, as for a whole design.
``profiling_runs`` (not partitioned, downstream of every shard) consolidates the tables.

Shards never overlap on one host: both profiling assets are in the Dagster pool
:data:`PROFILING_POOL` (limit 1 in ``dagster.yaml``) and the shard job's runs carry the
``scaledl/profiling`` tag the run queue limits to 1.

The profiles (``profiles/``) and the validated and quarantined tables (``validated/``,
``quarantine/``) are written by the library; the assets return their counts as metadata.
"""

import datetime as dt
import socket
import time
from typing import Any

import dagster as dg
import pandas as pd

from pipelines.defs.assets.design import read_design_table, read_search_space
from pipelines.defs.config import ProfilingRunsConfig, ScaledlSettings
from pipelines.defs.metadata import md_table
from pipelines.defs.resources import ProfilingLauncher
from scaledl.profiling.shards import (
    parse_shard_key,
    shard_count_from_env,
    shard_key,
    shard_keys,
    shard_of,
    shard_workloads,
)

GROUP = "profiling"
#: Dagster pool of the steps that profile: ``dagster.yaml`` limits it to one step at a time.
PROFILING_POOL = "scaledl_profiling"
#: Shards of the design (``$SCALEDL_PROFILING_SHARDS`` when the definitions load; default 4).
N_SHARDS = shard_count_from_env()
shard_partitions = dg.StaticPartitionsDefinition(shard_keys(N_SHARDS))


def design_workloads(design: pd.DataFrame) -> list[Any]:
    """The design table's rows as :class:`~scaledl.workloads.spec.Workload` objects."""
    from scaledl.workloads.spec import Workload

    return [
        Workload.from_record(row, source=f"design row {i + 1}")
        for i, row in enumerate(design.to_dict("records"))
    ]


def _utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


@dg.asset(
    group_name=GROUP,
    kinds={"pytorch", "parquet"},
    deps=["search_space", "workload_design"],
    partitions_def=shard_partitions,
    # A backfill starts one run per shard, so a cluster's launcher can place them apart.
    backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=1),
    pool=PROFILING_POOL,
)
def profiling_shard(
    context: dg.AssetExecutionContext, settings: ScaledlSettings, launcher: ProfilingLauncher
) -> dg.MaterializeResult:
    """One shard of the design profiled: per-layer, all-reduce, iteration and epoch times.

    A shard is the design's workloads whose :func:`~scaledl.profiling.shards.shard_of` is the
    partition's; parts already complete are reused, so materialising a failed or interrupted
    shard again measures only what it lacks. Workload failures are recorded as parts (status
    in the metadata), not raised; the step fails only when profiling itself cannot go on (the
    profiles directory locked or unwritable, a stop signal).
    """
    from scaledl.profiling.store import completed_parts, part_statuses

    key = context.partition_key
    shard, n_shards = parse_shard_key(key)
    started_at, started = _utc_now(), time.perf_counter()
    search_space = read_search_space(settings)
    workloads = shard_workloads(design_workloads(read_design_table(settings)), shard, n_shards)
    runnable, skipped = launcher.runnable(workloads)
    if skipped:
        context.log.warning(
            f"shard {key}: {len(skipped)} workloads cannot run with {type(launcher).__name__}: "
            + ", ".join(f"{w.workload_id} ({w.num_nodes} nodes)" for w in skipped[:10])
        )
    out_dir = launcher.shard_profiles_dir(settings.layout.profiles_dir, key)
    profiling = dict(search_space.get("profiling", {}))
    summary = launcher.profile(
        runnable, out_dir, profiling, force=settings.force_profile, on_part=context.log.info
    )
    for line in summary.host_checks:
        context.log.info(line)
    ids = {w.workload_id for w in runnable}
    kept = {p for p in completed_parts(out_dir) if p[0] in ids}
    disturbed = sum(summary.interference.values())
    status = _shard_status(len(runnable) * int(profiling.get("repeats", 1)), len(kept),
                           len(summary.failed))  # fmt: skip
    context.log.info(
        f"shard {key}: {status}; profiled {summary.ok}, reused {summary.skipped}, failed "
        f"{len(summary.failed)}, disturbed {disturbed}, re-measured {summary.remeasured} of "
        f"{summary.requested} (workload, repeat) parts in {summary.wall_s:.1f} s"
    )
    statuses = part_statuses(out_dir)
    failed = pd.DataFrame(
        [{"workload_id": w, "status": s} for w, s in sorted(summary.failed.items())],
        columns=["workload_id", "status"],
    )
    return dg.MaterializeResult(
        metadata={
            "shard": key,
            "status": status,
            "host": socket.gethostname(),
            "profiles_dir": dg.MetadataValue.path(str(out_dir)),
            "workloads": len(workloads),
            "not_runnable": len(skipped),
            "requested_parts": summary.requested,
            "parts_kept": len(kept),
            "reused": summary.skipped,
            "profiled_now": summary.ok,
            "failed": len(summary.failed),
            "disturbed_parts": disturbed,
            "remeasured_parts": summary.remeasured,
            "parts_on_disk": sum(1 for w, _ in statuses if w in ids),
            "failures": md_table(failed),
            "host_checks": dg.MetadataValue.md("\n".join(f"- {c}" for c in summary.host_checks)),
            "started_at": started_at,
            "finished_at": _utc_now(),
            "profiling_wall_s": round(summary.wall_s, 2),
            "shard_wall_s": round(time.perf_counter() - started, 2),
        }
    )


def _shard_status(requested: int, kept: int, failed: int) -> str:
    """``complete`` (every part kept), ``failed`` (a workload failed) or ``incomplete``."""
    if failed:
        return "failed"
    return "complete" if kept >= requested else "incomplete"


@dg.asset(group_name=GROUP, kinds={"pytorch", "parquet"}, deps=["profiling_shard"],
          pool=PROFILING_POOL)  # fmt: skip
def profiling_runs(
    context: dg.AssetExecutionContext,
    config: ProfilingRunsConfig,
    settings: ScaledlSettings,
    launcher: ProfilingLauncher,
) -> dg.MaterializeResult:
    """The design's profile tables, consolidated from every shard (and measured, on retrain).

    With ``profile_missing`` (the retraining job) the workloads of the design not yet complete
    are profiled here, in this run, one after another; otherwise nothing is measured and the
    workloads no shard has measured are listed (``unmeasured``; the blocking check fails on
    them).
    """
    from scaledl.profiling.store import (
        completed_parts,
        completed_workload_ids,
        consolidate,
        part_statuses,
    )

    search_space = read_search_space(settings)
    runnable, skipped = launcher.runnable(design_workloads(read_design_table(settings)))
    out_dir = settings.layout.profiles_dir
    profiling = dict(search_space.get("profiling", {}))
    measured_now: dict[str, Any] = {}
    if config.profile_missing:
        summary = launcher.profile(
            runnable, out_dir, profiling, force=settings.force_profile, on_part=context.log.info
        )
        context.log.info(
            f"profiled {summary.ok}, reused {summary.skipped}, failed {len(summary.failed)}, "
            f"disturbed {sum(summary.interference.values())}, re-measured {summary.remeasured} "
            f"of {summary.requested} (workload, repeat) parts in {summary.wall_s:.1f} s"
        )
        measured_now = {
            "profiled_now": summary.ok,
            "reused": summary.skipped,
            "profiling_wall_s": round(summary.wall_s, 2),
        }
    design_ids = {w.workload_id for w in runnable}
    repeats = int(profiling.get("repeats", 1))
    ok_ids = completed_workload_ids(out_dir, repeats) & design_ids
    complete_parts = {p for p in completed_parts(out_dir) if p[0] in design_ids}
    statuses = part_statuses(out_dir)
    unmeasured = unmeasured_by_shard(runnable, {w for w, _ in statuses}, N_SHARDS)
    if unmeasured:
        context.log.warning(
            "workloads no shard has measured: "
            + "; ".join(f"{k}: {len(v)}" for k, v in unmeasured.items())
        )
    failed_ids = {w for (w, _), (s, _) in statuses.items() if s != "ok"} & design_ids
    tables = consolidate(out_dir, workload_ids=design_ids)
    runs = tables["runs"]
    per_family = _iteration_summary(tables)
    quality = _label_quality(tables)
    (context.log.info if quality.get("absorbed", True) else context.log.warning)(
        f"labels: {quality['message']}"
    )
    failed = pd.DataFrame(
        sorted({(w, s) for (w, _), (s, _) in statuses.items() if w in failed_ids}),
        columns=["workload_id", "status"],
    )
    if not failed.empty and "error" in runs.columns:
        errors = runs.drop_duplicates("workload_id", keep="last").set_index("workload_id")
        failed["error"] = failed["workload_id"].map(errors["error"].astype(str).str.slice(0, 200))
    return dg.MaterializeResult(
        metadata={
            "profiles_dir": dg.MetadataValue.path(str(out_dir)),
            "n_shards": N_SHARDS,
            "requested": len(design_ids) * repeats,
            "not_runnable": len(skipped),
            "ok_total": len(ok_ids),
            "complete_parts": len(complete_parts),
            "failed": len(failed_ids),
            "unmeasured": sum(len(v) for v in unmeasured.values()),
            "unmeasured_shards": ", ".join(unmeasured) or "none",
            "profile_missing": config.profile_missing,
            **measured_now,
            "force_profile": settings.force_profile,
            "dagster/row_count": len(runs),
            "rows_per_table": md_table(
                pd.DataFrame({"table": list(tables), "rows": [len(f) for f in tables.values()]})
            ),
            "iteration_ms_per_family": md_table(per_family),
            "failures": md_table(failed),
            "kept_share": quality.get("kept_share"),
            "launch_label_mre_raw": quality.get("launch_mre_raw"),
            "launch_label_mre_corrected": quality.get("launch_mre_corrected"),
            "labels_absorbed_host_drift": quality.get("absorbed"),
            "label_quality": dg.MetadataValue.md(quality["message"]),
        }
    )


def unmeasured_by_shard(runnable: list[Any], measured_ids: set[str], n_shards: int) -> dict:
    """Workload ids with no part on disk, by shard key (shards with none left out).

    Args:
        runnable: the design's workloads this launcher profiles.
        measured_ids: workload ids with at least one part (any status).
        n_shards: shards of the design.

    Returns:
        ``{"K-of-N": [workload_id, ...]}``, keys in shard order.
    """
    missing: dict[int, list[str]] = {}
    for w in runnable:
        if w.workload_id not in measured_ids:
            missing.setdefault(shard_of(w.workload_id, n_shards), []).append(w.workload_id)
    return {shard_key(k, n_shards): missing[k] for k in sorted(missing)}


def _label_quality(tables: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """:func:`scaledl.evaluation.reproducibility.label_quality`, or why it cannot be said."""
    from scaledl.evaluation.reproducibility import label_quality
    from scaledl.models.data import ProfileDataError

    if tables["runs"].empty:
        return {"message": "no run recorded", "absorbed": False}
    try:
        return label_quality(tables)
    except (ProfileDataError, ValueError) as exc:
        return {"message": f"label quality not computed: {exc}", "absorbed": False}


def _iteration_summary(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Median iteration time (ms) per family and world size of the label iterations."""
    it, wl = tables["iteration_timings"], tables["workloads"]
    if it.empty or wl.empty or "iteration_ms" not in it.columns:
        return pd.DataFrame()
    if "phase" in it.columns and (it["phase"] == "label").any():
        it = it[it["phase"] == "label"]
    merged = it.merge(wl[["workload_id", "family", "world_size"]], on="workload_id")
    return (
        merged.groupby(["family", "world_size"])
        .agg(workloads=("workload_id", "nunique"), median_iteration_ms=("iteration_ms", "median"))
        .reset_index()
    )


@dg.asset(group_name=GROUP, kinds={"great_expectations", "parquet"}, deps=["profiling_runs"])
def validated_profiles(settings: ScaledlSettings) -> dg.MaterializeResult:
    """Profile tables that passed the great-expectations suites (bad rows quarantined)."""
    from scaledl.validation import ValidationError, validate_profiles

    report_page = settings.layout.validation_report_dir / "index.html"
    try:
        report = validate_profiles(
            settings.layout.profiles_dir,
            settings.layout.validated_dir,
            settings.layout.quarantine_dir,
            settings.layout.validation_report_dir,
        )
    except ValidationError as exc:
        raise dg.Failure(
            description=f"profile tables unusable: {exc}",
            metadata={"report": dg.MetadataValue.path(str(report_page))},
        ) from exc
    result = report.to_dict()
    counts = pd.DataFrame(
        [
            {
                "table": name,
                "rows_in": t["rows_in"],
                "passed": t["passed"],
                "quarantined": t["quarantined"],
            }
            for name, t in result["tables"].items()
        ]
    )
    failed_expectations = [e for e in result["expectations"] if not e.get("success", True)]
    return dg.MaterializeResult(
        metadata={
            "passed": report.passed,
            "validated_dir": dg.MetadataValue.path(str(settings.layout.validated_dir)),
            "quarantine_dir": dg.MetadataValue.path(str(settings.layout.quarantine_dir)),
            "report": dg.MetadataValue.path(str(report_page)),
            "rows_passed": int(counts["passed"].sum()) if not counts.empty else 0,
            "rows_quarantined": report.quarantined_rows,
            "flags": len(result["flags"]),
            "failed_expectations": len(failed_expectations),
            "tables": md_table(counts),
        }
    )
