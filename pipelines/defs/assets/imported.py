"""Imported profiles: real GPU measurements of others, as standard tables, validated."""

from typing import Any

import dagster as dg
import pandas as pd

from pipelines.defs.config import REPO_ROOT, ScaledlSettings
from pipelines.defs.metadata import md_table

GROUP = "profiling"
NEUSIGHT_ROOT = REPO_ROOT / "external" / "neusight"


@dg.asset(group_name=GROUP, kinds={"parquet", "great_expectations"})
def imported_profiles(
    context: dg.AssetExecutionContext, settings: ScaledlSettings, search_space: dict[str, Any]
) -> dict[str, Any]:
    """NeuSight's GPU traces and labels imported as profile tables and validated like our own."""
    from scaledl.external.neusight_tables import import_neusight
    from scaledl.validation import ValidationError, validate_profiles

    if not search_space.get("evaluation", {}).get("include_external", True):
        reason = f"preset {search_space['name']!r} sets evaluation.include_external: false"
        context.log.info(f"imported profiles not built: {reason}")
        context.add_output_metadata({"skipped": reason})
        return {"skipped": reason}
    out = settings.root / "imported" / "neusight"
    summary = import_neusight(NEUSIGHT_ROOT, out)
    validated = settings.root / "imported" / "validated" / "neusight"
    report_dir = settings.validation_report_dir / "imported" / "neusight"
    try:
        report = validate_profiles(
            out, validated, settings.root / "imported" / "quarantine" / "neusight", report_dir
        )
    except ValidationError as exc:
        raise dg.Failure(description=f"imported NeuSight tables unusable: {exc}") from exc
    tables = report.to_dict()["tables"]
    counts = pd.DataFrame(
        [{"table": t, "rows_in": v["rows_in"], "passed": v["passed"],
          "quarantined": v["quarantined"]} for t, v in tables.items()]
    )  # fmt: skip
    context.add_output_metadata(
        {
            "source": summary.manifest["source"],
            "workloads": summary.manifest["workloads"],
            "gpus": ", ".join(summary.manifest["gpus"]),
            "models": ", ".join(summary.manifest["models"]),
            "not_carried": md_table(pd.DataFrame({"not carried": summary.manifest["not_carried"]})),
            "tables": md_table(counts),
            "validated_dir": dg.MetadataValue.path(str(validated)),
            "report": dg.MetadataValue.path(str(report_dir / "index.html")),
            "rows_quarantined": report.quarantined_rows,
        }
    )
    return {
        "source": "neusight",
        "profiles_dir": str(out),
        "validated_dir": str(validated),
        "parallel_labels": str(out / "parallel_labels.parquet"),
        "tables": tables,
    }
