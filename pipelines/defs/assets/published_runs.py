"""Published LLM training step times, predicted held out (issue 51).

Its inputs are committed (``external/scale_runs/``), so the asset is in no job of ``make run``
(:data:`pipelines.defs.jobs.PUBLISHED_RUNS_ASSETS` is subtracted from them); materialise it on
its own (``dagster asset materialize --select published_runs_evaluation``). It writes the result
and the HTML report section under the data root's reports folder; the committed
``docs/results/published_runs.json`` is written by ``scaledl evaluate published-runs``.
"""

import dagster as dg
import pandas as pd

from pipelines.defs.config import ScaledlSettings
from pipelines.defs.metadata import md_table

GROUP = "evaluation"


@dg.asset(group_name=GROUP, kinds={"python", "html"})
def published_runs_evaluation(
    context: dg.AssetExecutionContext, settings: ScaledlSettings
) -> dg.MaterializeResult:
    """Fixed-MFU, roofline, composed and ScaleDL on published LLM step times, held out by source.

    Leave one source out, one GPU generation out and the largest held out, paired BCa intervals,
    Kendall tau of layouts and the re-publication noise floor
    (:func:`scaledl.evaluation.published_runs.evaluate_published_runs`).
    """
    from scaledl.evaluation.published_runs import METHODS, evaluate_published_runs
    from scaledl.io.atomic import write_atomic
    from scaledl.report.published_runs import published_runs_html

    out_dir = settings.layout.reports_dir
    result = evaluate_published_runs(progress=context.log.info)
    result.write(out_dir / "published_runs.json")
    write_atomic(out_dir / "published_runs.html", published_runs_html(result))
    loso = result.protocols["leave_one_source_out"]
    table = pd.DataFrame(
        [{"source": name, "scored": g.scored, **{m: g.mre[m] for m in METHODS}}
         for name, g in loso.groups.items()]
    )  # fmt: skip
    return dg.MaterializeResult(
        metadata={
            "result": dg.MetadataValue.path(str(out_dir / "published_runs.json")),
            "report": dg.MetadataValue.path(str(out_dir / "published_runs.html")),
            "mre_by_source": md_table(table),
            "mean_mre_scaledl": dg.MetadataValue.float(loso.mean_mre["scaledl"]),
            "ratio_to_fixed_mfu": dg.MetadataValue.float(result.ratio_to_fixed_mfu),
            "answered_share": dg.MetadataValue.float(result.coverage.answered_share),
            "targets": md_table(
                pd.DataFrame(
                    [
                        {"target": t.text, "measured": t.measured, "met": t.met}
                        for t in result.targets
                    ]
                )
            ),  # fmt: skip
            "seconds": dg.MetadataValue.float(result.seconds["total"]),
        }
    )
