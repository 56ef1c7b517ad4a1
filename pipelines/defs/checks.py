"""Quality gates: blocking checks stop downstream assets when their input is unusable.

Every check reads the files the asset wrote (profile parts, validated and quarantined tables,
``metrics.json``, the registered bundle), so it judges the data on disk, not a value passed
through Dagster's storage.
"""

import math
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd

from pipelines.defs.assets.design import read_design_table, read_search_space
from pipelines.defs.assets.profiling import N_SHARDS, design_workloads, unmeasured_by_shard
from pipelines.defs.config import ScaledlSettings
from pipelines.defs.resources import LocalPredictorStore, ProfilingLauncher


def _rows(path: Path) -> int:
    """Rows of a parquet file (0 when it does not exist)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows if path.is_file() else 0


def table_counts(settings: ScaledlSettings) -> pd.DataFrame:
    """Rows passed (``validated/``) and quarantined (``quarantine/``) per profile table.

    Returns:
        Columns ``table``, ``rows_in`` (passed + quarantined: validation never drops a row),
        ``passed``, ``quarantined``.
    """
    from scaledl.profiles.tables import PROFILE_TABLE_NAMES

    rows = []
    for name in PROFILE_TABLE_NAMES:
        passed = _rows(settings.layout.validated_dir / f"{name}.parquet")
        quarantined = _rows(settings.layout.quarantine_dir / f"{name}.parquet")
        rows.append(
            {
                "table": name,
                "rows_in": passed + quarantined,
                "passed": passed,
                "quarantined": quarantined,
            }
        )
    return pd.DataFrame(rows, columns=["table", "rows_in", "passed", "quarantined"])


def profiling_failure_reasons(
    requested: int,
    ok: int,
    disturbed: int,
    failed: int,
    max_failed_fraction: float,
    profiles_dir: Path,
    unmeasured: dict[str, list[str]] | None = None,
) -> list[str]:
    """Why the profile cannot feed the models, and what to do; empty when it can.

    Args:
        requested: workloads the design asked for (that this launcher can run).
        ok: those measured ``ok`` and undisturbed in every repeat.
        disturbed: those measured, but disturbed or with a repeat missing.
        failed: those with a part that failed, ran out of memory or timed out.
        max_failed_fraction: the largest share of failed workloads accepted.
        profiles_dir: the profiles directory, named in the message.
        unmeasured: workload ids with no part at all, by shard key (shards not yet run).

    Returns:
        One sentence per reason.
    """
    fraction = failed / requested if requested else 1.0
    reasons = []
    if not ok:
        reasons.append(
            f"no workload of {requested} was measured undisturbed in every repeat "
            f"({disturbed} disturbed by other processes on this host or incomplete, {failed} "
            "failed): run again when nothing else is using the cores; finished parts are kept "
            "and only the missing or disturbed ones are measured again"
        )
    if fraction > max_failed_fraction:
        reasons.append(
            f"{failed} of {requested} workloads failed ({fraction:.0%} > max_failed_fraction "
            f"{max_failed_fraction:.0%}): see the status and error columns of the runs table "
            f"in {profiles_dir}"
        )
    if unmeasured:
        count = sum(len(ids) for ids in unmeasured.values())
        reasons.append(
            f"{count} of {requested} workloads were never measured, in shards "
            f"{', '.join(unmeasured)}: materialise those partitions of profiling_shard (the "
            "profile_design backfill) before this job"
        )
    return reasons


@dg.asset_check(asset="profiling_runs", blocking=True)
def profiling_runs_succeeded(
    context: dg.AssetCheckExecutionContext, settings: ScaledlSettings, launcher: ProfilingLauncher
) -> dg.AssetCheckResult:
    """Every shard measured, at least one workload ``ok``, at most the allowed fraction failed.

    From the parts on disk: ``ok`` workloads have every repeat measured ``ok`` and undisturbed;
    ``failed`` ones have a part that failed, ran out of memory or timed out; ``disturbed`` ones
    were measured under foreign load (validation quarantines those parts; not a failure). A
    failed check logs why and what to do as an error (Dagster's own error names only the check)
    and carries it as the check's description in the UI.
    """
    from scaledl.profiling.store import completed_workload_ids, part_statuses

    runnable, not_runnable = launcher.runnable(design_workloads(read_design_table(settings)))
    requested = {w.workload_id for w in runnable}
    repeats = int(read_search_space(settings).get("profiling", {}).get("repeats", 1))
    ok = completed_workload_ids(settings.layout.profiles_dir, repeats) & requested
    statuses = part_statuses(settings.layout.profiles_dir)
    failed = {w for (w, _), (status, _) in statuses.items() if status != "ok"} & requested
    measured = {w for (w, _) in statuses} & requested
    fraction = len(failed) / len(requested) if requested else 1.0
    disturbed = len(measured - ok - failed)
    unmeasured = unmeasured_by_shard(runnable, measured, N_SHARDS)
    reasons = profiling_failure_reasons(
        len(requested), len(ok), disturbed, len(failed), settings.max_failed_fraction,
        settings.layout.profiles_dir, unmeasured,
    )  # fmt: skip
    for reason in reasons:
        context.log.error(f"profiling_runs: {reason}")
    return dg.AssetCheckResult(
        passed=not reasons,
        description="; ".join(reasons) or None,
        metadata={
            "requested": len(requested),
            "ok_total": len(ok),
            "disturbed_or_incomplete": disturbed,
            "failed": len(failed),
            "failed_fraction": round(fraction, 4),
            "max_failed_fraction": settings.max_failed_fraction,
            "not_runnable": len(not_runnable),
            "unmeasured": sum(len(ids) for ids in unmeasured.values()),
        },
    )


@dg.asset_check(asset="validated_profiles", blocking=True)
def validated_profiles_usable(settings: ScaledlSettings) -> dg.AssetCheckResult:
    """Every table the models need kept valid rows (quarantine did not empty it)."""
    from scaledl.profiles.tables import TRAINING_TABLE_NAMES

    counts = table_counts(settings).set_index("table")
    empty = [t for t in TRAINING_TABLE_NAMES if counts.at[t, "passed"] == 0]
    meta: dict[str, Any] = {"empty_tables": ", ".join(empty) or "none"}
    for table, row in counts.iterrows():
        meta[f"{table}.passed"] = int(row["passed"])
        meta[f"{table}.quarantined"] = int(row["quarantined"])
    return dg.AssetCheckResult(passed=not empty, metadata=meta)


@dg.asset_check(asset="validated_profiles")
def validated_profiles_quarantine_rate(settings: ScaledlSettings) -> dg.AssetCheckResult:
    """No table lost more than the allowed fraction of its rows to quarantine (warning)."""
    counts = table_counts(settings)
    rates = counts["quarantined"] / counts["rows_in"].where(counts["rows_in"] > 0)
    counts["quarantined_fraction"] = rates.fillna(0.0).round(4)
    worst = float(counts["quarantined_fraction"].max()) if len(counts) else 0.0
    return dg.AssetCheckResult(
        passed=worst <= settings.max_quarantine_fraction,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "worst_quarantined_fraction": worst,
            "max_quarantine_fraction": settings.max_quarantine_fraction,
            "rows_passed": int(counts["passed"].sum()),
            "rows_quarantined": int(counts["quarantined"].sum()),
            "tables": dg.MetadataValue.md(counts.to_markdown(index=False)),
        },
    )


@dg.asset_check(asset="evaluation_report")
def evaluation_report_ood_finite(settings: ScaledlSettings) -> dg.AssetCheckResult:
    """``metrics.json`` reads with the metrics schema and has ScaleDL's OOD MRE."""
    from scaledl.evaluation.results import Metrics, MetricsError

    try:
        value: float | str = Metrics.read(settings.layout.metrics_path).mre("ood")
    except MetricsError as exc:
        value = str(exc)
    return dg.AssetCheckResult(
        passed=isinstance(value, float),
        metadata={
            "ood_mre": value,
            "metrics": dg.MetadataValue.path(str(settings.layout.metrics_path)),
        },
    )


def target_summary(metrics_path: Path) -> tuple[bool, dict[str, Any]]:
    """The accuracy targets of ``metrics.json`` (:data:`scaledl.evaluation.targets.TARGETS`).

    Args:
        metrics_path: the evaluation's ``metrics.json``.

    Returns:
        ``(passed, metadata)``: passed when no measured target is missed; the metadata counts
        reached, missed and unmeasured targets and lists them (markdown), or holds the error
        when the file does not read.
    """
    from scaledl.evaluation.results import Metrics, MetricsError
    from scaledl.report.formatting import reached_text
    from scaledl.report.targets import target_rows

    try:
        rows = target_rows(Metrics.read(metrics_path))
    except MetricsError as exc:
        return False, {"error": str(exc)}
    table = pd.DataFrame(
        [{"target": r.text, "measured": r.measured,
          "reached": reached_text(r.met, markdown=True)} for r in rows]
    )  # fmt: skip
    missed = sum(r.met is False for r in rows)
    return missed == 0, {
        "reached": sum(r.met is True for r in rows),
        "missed": missed,
        "not_measured": sum(r.met is None for r in rows),
        "targets": dg.MetadataValue.md(table.to_markdown(index=False)),
    }


@dg.asset_check(asset="evaluation_report")
def evaluation_report_targets(settings: ScaledlSettings) -> dg.AssetCheckResult:
    """Every accuracy target measured in ``metrics.json`` is reached (a warning otherwise)."""
    passed, metadata = target_summary(settings.layout.metrics_path)
    return dg.AssetCheckResult(
        passed=passed, severity=dg.AssetCheckSeverity.WARN, metadata=metadata
    )


@dg.asset_check(asset="predictor_bundle", blocking=True)
def predictor_bundle_predicts(
    settings: ScaledlSettings, predictor_store: LocalPredictorStore
) -> dg.AssetCheckResult:
    """The registered bundle loads and predicts finite, positive times for the design."""
    from scaledl.prediction.predictor import load_predictor

    bundle = predictor_store.current_bundle(settings.layout.predictors_dir)
    if bundle is None:
        return dg.AssetCheckResult(passed=False, metadata={"bundle_dir": "none registered"})
    predictor = load_predictor(bundle)
    workloads = design_workloads(read_design_table(settings))
    predictions = predictor.predict(workloads)
    iteration = pd.to_numeric(predictions["iteration_s"], errors="coerce")
    bad = int((~iteration.apply(lambda v: math.isfinite(v) and v > 0)).sum())
    return dg.AssetCheckResult(
        passed=bad == 0 and len(predictions) == len(workloads),
        metadata={
            "bundle_dir": dg.MetadataValue.path(str(bundle)),
            "workloads": len(workloads),
            "predictions": len(predictions),
            "non_finite_or_non_positive": bad,
            "median_iteration_s": float(iteration.median()) if len(iteration) else "n/a",
        },
    )
