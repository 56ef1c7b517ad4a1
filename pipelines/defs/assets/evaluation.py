"""Evaluation stage: in-distribution and leave-one-family-out accuracy against baselines."""

from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd

from pipelines.defs.config import ScaledlSettings
from pipelines.defs.metadata import md_table, png_markdown
from pipelines.defs.policy import ood_mre

GROUP = "evaluation"


def split_table(metrics: dict[str, Any]) -> pd.DataFrame:
    """One row per split and method with the mean error metrics of that split."""
    rows = []
    for split, body in (metrics.get("splits") or {}).items():
        body = (body or {}).get("mean", body) if split == "ood" else (body or {})
        for method, values in body.items():
            if isinstance(values, dict) and "mre" in values:
                keep = {k: values[k] for k in ("mre", "rmse_s", "p50_re", "p90_re") if k in values}
                rows.append({"split": split, "method": method, **keep})
    return pd.DataFrame(rows)


@dg.asset(group_name=GROUP, kinds={"python", "html"})
def evaluation_report(
    context: dg.AssetExecutionContext,
    settings: ScaledlSettings,
    search_space: dict[str, Any],
    validated_profiles: dict[str, Any],
    imported_profiles: dict[str, Any],
) -> dict[str, Any]:
    """Accuracy report: ID, leave-one-family-out and real-GPU errors of ScaleDL and baselines."""
    import dataclasses

    from scaledl.evaluation import EvaluationConfig, evaluate

    out_dir = settings.reports_dir
    config = EvaluationConfig.from_preset(search_space.get("evaluation"))
    if "validated_dir" in imported_profiles:
        config = dataclasses.replace(
            config,
            gpu_profiles=Path(imported_profiles["validated_dir"]),
            gpu_parallel_labels=Path(imported_profiles["parallel_labels"]),
        )
    metrics = dict(evaluate(Path(validated_profiles["validated_dir"]), out_dir, config))
    metrics["metrics_path"] = str(out_dir / "metrics.json")
    figures = sorted((out_dir / "figures").glob("*.png"))
    table = split_table(metrics)
    meta: dict[str, Any] = {
        "report": dg.MetadataValue.path(str(out_dir / "report.html")),
        "metrics": dg.MetadataValue.path(metrics["metrics_path"]),
        "errors_by_split": md_table(table),
        "figures": dg.MetadataValue.md(png_markdown(figures) or "_(no figures)_"),
    }
    ood = ood_mre(metrics)
    if ood is not None:
        meta["ood_mre"] = dg.MetadataValue.float(ood)
    try:
        meta["id_mre"] = dg.MetadataValue.float(float(metrics["splits"]["id"]["scaledl"]["mre"]))
    except (KeyError, TypeError, ValueError):
        context.log.warning("evaluation metrics have no in-distribution ScaleDL MRE")
    context.add_output_metadata(meta)
    return metrics
