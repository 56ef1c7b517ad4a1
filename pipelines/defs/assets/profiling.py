"""Profiling stage: torchrun measurements of the design and their validation.

The profiles (``profiles/``) and the validated and quarantined tables (``validated/``,
``quarantine/``) are written by the library; the assets return their counts as metadata.
"""

from typing import Any

import dagster as dg
import pandas as pd

from pipelines.defs.assets.design import read_design_table, read_search_space
from pipelines.defs.config import ScaledlSettings
from pipelines.defs.metadata import md_table
from pipelines.defs.resources import ProfilingLauncher

GROUP = "profiling"


def design_workloads(design: pd.DataFrame) -> list[Any]:
    """The design table's rows as :class:`~scaledl.workloads.spec.Workload` objects."""
    from scaledl.workloads.spec import Workload

    return [
        Workload.from_record(row, source=f"design row {i + 1}")
        for i, row in enumerate(design.to_dict("records"))
    ]


@dg.asset(group_name=GROUP, kinds={"pytorch", "parquet"}, deps=["search_space", "workload_design"])
def profiling_runs(
    context: dg.AssetExecutionContext, settings: ScaledlSettings, launcher: ProfilingLauncher
) -> dg.MaterializeResult:
    """Measured per-layer forward/backward, all-reduce, iteration and epoch times."""
    from scaledl.profiling.store import completed_parts, completed_workload_ids, consolidate

    search_space = read_search_space(settings)
    workloads = design_workloads(read_design_table(settings))
    runnable, skipped = launcher.runnable(workloads)
    if skipped:
        context.log.warning(
            f"{len(skipped)} workloads cannot run with {type(launcher).__name__}: "
            + ", ".join(f"{w.workload_id} ({w.num_nodes} nodes)" for w in skipped[:10])
        )
    out_dir = settings.layout.profiles_dir
    profiling = dict(search_space.get("profiling", {}))
    summary = launcher.profile(
        runnable, out_dir, profiling, force=settings.force_profile, on_part=context.log.info
    )
    for line in summary.host_checks:
        context.log.info(line)
    context.log.info(
        f"profiled {summary.ok}, reused {summary.skipped}, failed {len(summary.failed)}, "
        f"disturbed {sum(summary.interference.values())}, re-measured {summary.remeasured} "
        f"of {summary.requested} (workload, repeat) parts in {summary.wall_s:.1f} s"
    )
    design_ids = {w.workload_id for w in runnable}
    repeats = int(profiling.get("repeats", 1))
    ok_ids = completed_workload_ids(out_dir, repeats) & design_ids
    complete_parts = {p for p in completed_parts(out_dir) if p[0] in design_ids}
    tables = consolidate(out_dir, workload_ids=design_ids)
    runs = tables["runs"]
    per_family = _iteration_summary(tables)
    quality = _label_quality(tables)
    (context.log.info if quality.get("absorbed", True) else context.log.warning)(
        f"labels: {quality['message']}"
    )
    failed = pd.DataFrame(
        [{"workload_id": k, "status": v} for k, v in summary.failed.items()],
        columns=["workload_id", "status"],
    )
    if not failed.empty and "error" in runs.columns:
        errors = runs.set_index("workload_id")["error"].astype(str).str.slice(0, 200)
        failed["error"] = failed["workload_id"].map(errors)
    return dg.MaterializeResult(
        metadata={
            "profiles_dir": dg.MetadataValue.path(str(out_dir)),
            "requested": summary.requested,
            "reused": summary.skipped,
            "profiled_now": summary.ok,
            "failed": len(summary.failed),
            "disturbed_parts": sum(summary.interference.values()),
            "remeasured_parts": summary.remeasured,
            "host_checks": dg.MetadataValue.md("\n".join(f"- {c}" for c in summary.host_checks)),
            "not_runnable": len(skipped),
            "ok_total": len(ok_ids),
            "complete_parts": len(complete_parts),
            "force_profile": settings.force_profile,
            "profiling_wall_s": round(summary.wall_s, 2),
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
