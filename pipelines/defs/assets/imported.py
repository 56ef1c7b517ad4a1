"""Imported profiles: real GPU measurements of others, as standard tables, validated.

The import and its validation write under ``<data>/imported/`` (``DataLayout.imported_dir``,
``imported_validated_dir``, ``imported_parallel_labels`` of :class:`scaledl.layout.DataLayout`);
the evaluation asset reads them from there.
"""

import dagster as dg
import pandas as pd

from pipelines.defs.assets.design import external_data_skipped, read_search_space
from pipelines.defs.config import ScaledlSettings
from pipelines.defs.metadata import md_table

GROUP = "profiling"


@dg.asset(group_name=GROUP, kinds={"parquet", "great_expectations"}, deps=["search_space"])
def imported_profiles(
    context: dg.AssetExecutionContext, settings: ScaledlSettings
) -> dg.MaterializeResult:
    """NeuSight's GPU traces and labels imported as profile tables and validated like our own."""
    from scaledl.external.neusight_tables import import_neusight
    from scaledl.validation import ValidationError, validate_profiles

    search_space = read_search_space(settings)
    reason = external_data_skipped(search_space)
    if reason:
        context.log.info(f"imported profiles not built: {reason}")
        return dg.MaterializeResult(metadata={"skipped": reason})
    from scaledl.layout import neusight_root

    layout = settings.layout
    out = layout.imported_dir("neusight")
    summary = import_neusight(neusight_root(), out)
    beside = layout.validation_outputs(out)
    validated, report_dir = beside.validated, beside.report
    try:
        report = validate_profiles(out, validated, beside.quarantine, report_dir)
    except ValidationError as exc:
        raise dg.Failure(description=f"imported NeuSight tables unusable: {exc}") from exc
    tables = report.to_dict()["tables"]
    counts = pd.DataFrame(
        [{"table": t, "rows_in": v["rows_in"], "passed": v["passed"],
          "quarantined": v["quarantined"]} for t, v in tables.items()]
    )  # fmt: skip
    return dg.MaterializeResult(
        metadata={
            "source": summary.manifest["source"],
            "workloads": summary.manifest["workloads"],
            "gpus": ", ".join(summary.manifest["gpus"]),
            "models": ", ".join(summary.manifest["models"]),
            "not_carried": md_table(pd.DataFrame({"not carried": summary.manifest["not_carried"]})),
            "tables": md_table(counts),
            "profiles_dir": dg.MetadataValue.path(str(out)),
            "validated_dir": dg.MetadataValue.path(str(validated)),
            "parallel_labels": dg.MetadataValue.path(
                str(layout.imported_parallel_labels("neusight"))
            ),
            "report": dg.MetadataValue.path(str(report_dir / "index.html")),
            "rows_quarantined": report.quarantined_rows,
        }
    )
