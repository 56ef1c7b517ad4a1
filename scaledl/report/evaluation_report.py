"""Self-contained HTML report of an evaluation: targets table, metric tables, embedded figures.

Rendered from the ``evaluation_report.html.j2`` template (with ``summary.html.j2`` and
``paired.html.j2``). Figures are embedded as base64 PNG ``<img src="data:image/png;base64,...">``
so the file can be moved alone. The targets table is :func:`scaledl.report.targets.target_rows`:
each target of :data:`scaledl.evaluation.targets.TARGETS` with its measured value and whether it
is reached.
"""

from __future__ import annotations

from pathlib import Path

from scaledl.evaluation.results import MethodErrors, Metrics, OODErrors, Skipped
from scaledl.io.render import render
from scaledl.report.formatting import pct, png_data_uri, reached_text
from scaledl.report.gpu_report import gpu_report_html
from scaledl.report.headline import summary_context
from scaledl.report.paired import paired_context
from scaledl.report.targets import target_rows

EXPLANATIONS = {
    "pred_vs_measured": "Predicted vs measured iteration time on the random held-out (ID) test "
    "set, log-log, one panel per method; the dashed line is a perfect prediction.",
    "sweep": "Epoch time of a representative workload of the sweep family as its batch size "
    "(left) or sequence length (right) varies: each method's predicted curve (methods fitted on "
    "all profiled workloads) and the measured workloads of the same architecture.",
    "ood_mre": "Leave-one-family-out iteration MRE: each family predicted by methods trained "
    "without it (log scale), and the mean over families.",
    "comparisons": "ScaleDL's MRE minus every other method's (baselines and ablations) per "
    "split, with the 95% paired bootstrap interval: green left of 0, ScaleDL is better; red "
    "right of 0, worse; grey, not distinguishable.",
}
_LC_TEXT = (
    "Test iteration MRE (fixed ID test set) versus the number of profiled training "
    "workloads chosen by each sampler from the training pool; line: mean over seeds, "
    "band: +- one standard deviation, dashed: the method's prior fitted on the same subsets. "
    "The last size is the whole pool (same for all samplers)."
)
#: Columns of the per-split error tables.
SPLIT_HEADER = ["method", "iter MRE", "iter RMSE [s]", "iter p50", "iter p90", "epoch MRE",
                "epoch RMSE [s]"]  # fmt: skip


def reproducibility_text(metrics: Metrics) -> str:
    """The noise floor in words: label reproducibility MRE overall and per world size."""
    rep = metrics.label_reproducibility
    if isinstance(rep, Skipped):
        return f"not measured ({rep.skipped})"
    per_ws = ", ".join(f"world size {ws}: {pct(v.mre, 2)}" for ws, v in rep.per_world_size.items())
    text = f"{pct(rep.mre, 2)} over {rep.n_workloads} workloads ({per_ws})"
    if rep.raw_mre is not None:
        text += (
            f"; {pct(rep.raw_mre, 2)} before the host-drift correction "
            f"({rep.corrected_launches} launches corrected)"
        )
    return text


def _error_row(method: str, m) -> list[str]:
    """One method's row of a split table (a ``MethodErrors`` or ``MeanMethodErrors``)."""
    it, ep = m.iteration, m.epoch
    return [method, pct(it.mre, 2), f"{m.rmse_s:.4g}", pct(it.p50_re, 2), pct(it.p90_re, 2),
            pct(ep.mre, 2), f"{ep.rmse_s:.4g}"]  # fmt: skip


def _rows(block: dict[str, MethodErrors]) -> list[list[str]]:
    return [_error_row(method, m) for method, m in block.items()]


def split_sections(metrics: Metrics) -> list[dict]:
    """The ID, leave-one-family-out and extrapolation sections: title, tables or why skipped."""
    splits = metrics.splits
    ood, ext = splits.ood, splits.extrapolation
    ood_tables = []
    if isinstance(ood, OODErrors):
        ood_tables = [{"title": fam, "rows": _rows(b)} for fam, b in ood.per_family.items()]
        ood_tables.append({"title": "mean over families", "rows": _rows(ood.mean)})
    return [
        {"title": "In-distribution (random held-out, stratified by family)", "skipped": None,
         "tables": [{"title": None, "rows": _rows(splits.id.methods)}]},
        {"title": "Out of distribution (leave one family out)",
         "skipped": ood.skipped if isinstance(ood, Skipped) else None, "tables": ood_tables},
        {"title": "Extrapolation (largest tokens per step held out)",
         "skipped": ext.skipped if isinstance(ext, Skipped) else None,
         "tables": [] if isinstance(ext, Skipped) else [{"title": None,
                                                         "rows": _rows(ext.methods)}]},
    ]  # fmt: skip


def _vidur(metrics: Metrics) -> dict | None:
    """Vidur's all-reduce MRE per system and model variant, ``None`` when not evaluated."""
    if isinstance(metrics.external, Skipped):
        return None
    vd = metrics.external.vidur
    variants = list(vd.mean)
    rows = [[s, *(pct(v[k].mre, 2) for k in variants)] for s, v in vd.per_system.items()]
    return {"header": ["system", *variants], "rows": rows}


def _figures(figure_paths: dict[str, Path]) -> list[dict]:
    """Every figure but the headline (it opens the report), with its explanation."""
    return [
        {"key": key, "uri": png_data_uri(path),
         "text": EXPLANATIONS.get(key, _LC_TEXT if key.startswith("learning_curves") else "")}
        for key, path in figure_paths.items()
        if key != "headline"
    ]  # fmt: skip


def render_report(metrics: Metrics, figure_paths: dict[str, Path]) -> str:
    """The report as an HTML string.

    Args:
        metrics: the evaluation metrics.
        figure_paths: figure key -> PNG path, embedded as base64.

    Returns:
        A complete HTML document.
    """
    targets = [
        {"target": t.text, "measured": t.measured, "reached": reached_text(t.met)}
        for t in target_rows(metrics)
    ]
    gpu = metrics.gpu
    return render(
        "evaluation_report.html.j2",
        summary=summary_context(metrics, figure_paths),
        n_workloads=metrics.n_workloads,
        families=", ".join(metrics.families),
        reproducibility=reproducibility_text(metrics),
        targets=targets,
        split_header=SPLIT_HEADER,
        splits=split_sections(metrics),
        paired=paired_context(metrics),
        gpu_html=None if isinstance(gpu, Skipped) else gpu_report_html(gpu.model_dump(mode="json")),
        vidur=_vidur(metrics),
        figures=_figures(figure_paths),
        runtime=str(metrics.runtime_s.model_dump()),
        fit_counts=str(metrics.fit_counts),
        notes="; ".join(metrics.notes) or "none",
    )


def write_report(metrics: Metrics, figure_paths: dict[str, Path], path: Path) -> Path:
    """Write :func:`render_report` to ``path``.

    Returns:
        ``path``.
    """
    Path(path).write_text(render_report(metrics, figure_paths), encoding="utf-8")
    return Path(path)
