"""Quality gates: blocking checks stop downstream assets when their input is unusable."""

import math
from typing import Any

import dagster as dg
import pandas as pd

from pipelines.defs.assets.profiling import design_workloads
from pipelines.defs.config import ScaledlSettings
from pipelines.defs.policy import ood_mre

REQUIRED_TABLES = ("workloads", "runs", "layer_timings", "iteration_timings")


@dg.asset_check(asset="profiling_runs", blocking=True)
def profiling_runs_succeeded(
    settings: ScaledlSettings, profiling_runs: dict[str, Any]
) -> dg.AssetCheckResult:
    """At least one workload profiled ``ok`` and at most the allowed fraction failed."""
    requested = int(profiling_runs["requested"])
    failed = len(profiling_runs["failed"])
    ok_total = int(profiling_runs["ok_total"])
    fraction = failed / requested if requested else 1.0
    passed = ok_total > 0 and fraction <= settings.max_failed_fraction
    return dg.AssetCheckResult(
        passed=passed,
        metadata={
            "requested": requested,
            "ok_total": ok_total,
            "failed": failed,
            "failed_fraction": round(fraction, 4),
            "max_failed_fraction": settings.max_failed_fraction,
            "not_runnable": len(profiling_runs.get("not_runnable", [])),
        },
    )


def _table_counts(validated_profiles: dict[str, Any]) -> pd.DataFrame:
    rows = [
        {
            "table": name,
            "rows_in": t["rows_in"],
            "passed": t["passed"],
            "quarantined": t["quarantined"],
        }
        for name, t in validated_profiles["tables"].items()
    ]
    return pd.DataFrame(rows, columns=["table", "rows_in", "passed", "quarantined"])


@dg.asset_check(asset="validated_profiles", blocking=True)
def validated_profiles_usable(validated_profiles: dict[str, Any]) -> dg.AssetCheckResult:
    """Every table the models need kept valid rows (quarantine did not empty it)."""
    counts = _table_counts(validated_profiles).set_index("table")
    empty = [t for t in REQUIRED_TABLES if t not in counts.index or counts.at[t, "passed"] == 0]
    meta: dict[str, Any] = {"empty_tables": ", ".join(empty) or "none"}
    for table, row in counts.iterrows():
        meta[f"{table}.passed"] = int(row["passed"])
        meta[f"{table}.quarantined"] = int(row["quarantined"])
    return dg.AssetCheckResult(passed=not empty, metadata=meta)


@dg.asset_check(asset="validated_profiles")
def validated_profiles_quarantine_rate(
    settings: ScaledlSettings, validated_profiles: dict[str, Any]
) -> dg.AssetCheckResult:
    """No table lost more than the allowed fraction of its rows to quarantine (warning)."""
    counts = _table_counts(validated_profiles)
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
def evaluation_report_ood_finite(evaluation_report: dict[str, Any]) -> dg.AssetCheckResult:
    """The report has a finite out-of-distribution MRE for ScaleDL."""
    value = ood_mre(evaluation_report)
    return dg.AssetCheckResult(
        passed=value is not None,
        metadata={"ood_mre": value if value is not None else "missing or not finite"},
    )


@dg.asset_check(
    asset="predictor_bundle",
    blocking=True,
    additional_ins={"workload_design": dg.AssetIn()},
)
def predictor_bundle_predicts(
    predictor_bundle: dict[str, Any], workload_design: pd.DataFrame
) -> dg.AssetCheckResult:
    """The registered bundle loads and predicts finite, positive times for the design."""
    from scaledl.registry import load_predictor

    predictor = load_predictor(predictor_bundle["path"])
    workloads = design_workloads(workload_design)
    predictions = predictor.predict(workloads)
    iteration = pd.to_numeric(predictions["iteration_s"], errors="coerce")
    bad = int((~iteration.apply(lambda v: math.isfinite(v) and v > 0)).sum())
    return dg.AssetCheckResult(
        passed=bad == 0 and len(predictions) == len(workloads),
        metadata={
            "bundle_dir": dg.MetadataValue.path(predictor_bundle["path"]),
            "workloads": len(workloads),
            "predictions": len(predictions),
            "non_finite_or_non_positive": bad,
            "median_iteration_s": float(iteration.median()) if len(iteration) else "n/a",
        },
    )


ALL_CHECKS = [
    profiling_runs_succeeded,
    validated_profiles_usable,
    validated_profiles_quarantine_rate,
    evaluation_report_ood_finite,
    predictor_bundle_predicts,
]
