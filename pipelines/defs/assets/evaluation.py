"""Evaluation stage: in-distribution and leave-one-family-out accuracy against baselines.

The library writes ``reports/metrics.json`` (read back with
:class:`scaledl.evaluation.results.Metrics`), ``report.html`` and the figures; the asset returns
the headline numbers as metadata.
"""

import dataclasses
from typing import Any

import dagster as dg
import pandas as pd

from pipelines.defs.assets.design import read_search_space
from pipelines.defs.config import ScaledlSettings
from pipelines.defs.metadata import md_table, png_markdown

GROUP = "evaluation"


def split_table(metrics: Any) -> pd.DataFrame:
    """One row per split and method with the iteration-time errors (OOD: mean over families).

    Args:
        metrics: a :class:`~scaledl.evaluation.results.Metrics`.

    Returns:
        Columns ``split``, ``method``, ``mre``, ``rmse_s``, ``p50_re``, ``p90_re``; skipped
        splits have no rows.
    """
    from scaledl.evaluation.results import Skipped

    rows = []
    for split in ("id", "ood", "extrapolation"):
        if isinstance(getattr(metrics.splits, split), Skipped):
            continue
        for method in metrics.methods:
            it = metrics.method_errors(split, method).iteration
            rows.append(
                {
                    "split": split,
                    "method": method,
                    "mre": it.mre,
                    "rmse_s": it.rmse_s,
                    "p50_re": it.p50_re,
                    "p90_re": it.p90_re,
                }
            )
    return pd.DataFrame(rows, columns=["split", "method", "mre", "rmse_s", "p50_re", "p90_re"])


def stage_table(metrics: Any) -> pd.DataFrame:
    """One row per stage of the evaluation with its wall seconds, then the total.

    Args:
        metrics: a :class:`~scaledl.evaluation.results.Metrics`.

    Returns:
        Columns ``stage``, ``seconds`` (``runtime_s`` less the per-method fit seconds).
    """
    runtime = metrics.runtime_s.model_dump()
    runtime.pop("fit_seconds")
    rows = [{"stage": name, "seconds": round(float(s), 1)} for name, s in runtime.items()]
    return pd.DataFrame(rows, columns=["stage", "seconds"])


@dg.asset(
    group_name=GROUP,
    kinds={"python", "html"},
    deps=["search_space", "validated_profiles", "imported_profiles"],
)
def evaluation_report(
    context: dg.AssetExecutionContext, settings: ScaledlSettings
) -> dg.MaterializeResult:
    """Accuracy report: ID, leave-one-family-out and real-GPU errors of ScaleDL and baselines.

    Progress (stage, fit, fold, elapsed, time left) goes to the run's log at least once a minute;
    the metadata has the seconds of every stage. The GPU evaluation is cached beside the data
    (``.cache/gpu_evaluation``), computed again only when its inputs or the code change.
    """
    from scaledl.evaluation import EvaluationConfig, evaluate
    from scaledl.evaluation.results import Skipped
    from scaledl.report.evaluation_report import reproducibility_text
    from scaledl.report.presenter import HtmlReport

    out_dir = settings.layout.reports_dir
    config = EvaluationConfig.from_preset(read_search_space(settings).get("evaluation"))
    if config.include_external:
        validated = settings.layout.imported_validated_dir("neusight")
        if not validated.is_dir():
            raise dg.Failure(
                f"{validated}: no imported GPU profiles; materialise 'imported_profiles' first"
            )
        config = dataclasses.replace(
            config,
            gpu_profiles=validated,
            gpu_parallel_labels=settings.layout.imported_parallel_labels("neusight"),
            gpu_cache_dir=settings.layout.gpu_evaluation_cache_dir,
        )
    metrics = evaluate(
        settings.layout.validated_dir, out_dir, config, context.log.info, HtmlReport()
    )
    figures = sorted((out_dir / "figures").glob("*.png"))
    meta: dict[str, Any] = {
        "report": dg.MetadataValue.path(str(out_dir / "report.html")),
        "metrics": dg.MetadataValue.path(str(settings.layout.metrics_path)),
        "errors_by_split": md_table(split_table(metrics)),
        "figures": dg.MetadataValue.md(png_markdown(figures) or "_(no figures)_"),
        "label_reproducibility": reproducibility_text(metrics),
        "stage_seconds": md_table(stage_table(metrics)),
    }
    for row in stage_table(metrics).itertuples():
        meta[f"seconds_{row.stage}"] = dg.MetadataValue.float(row.seconds)
    gpu = metrics.gpu
    if not isinstance(gpu, Skipped) and gpu.cache is not None:
        meta["gpu_cache"] = "hit" if gpu.cache["hit"] else "computed and stored"
    for split in ("id", "ood"):
        body = getattr(metrics.splits, split)
        if isinstance(body, Skipped):
            meta[f"{split}_mre"] = f"skipped: {body.skipped}"
        elif "scaledl" not in metrics.methods:
            meta[f"{split}_mre"] = "scaledl not among the evaluated methods"
        else:
            meta[f"{split}_mre"] = dg.MetadataValue.float(metrics.mre(split))
    return dg.MaterializeResult(metadata=meta)
