"""The metrics page's ``results`` and ``gpu`` blocks, rendered from a ``metrics.json``.

``scaledl summary --markdown`` copies ``data/reports/metrics.json`` to the committed results file
(``docs/results/metrics.json``) and renders that file into ``docs/results/metrics.md``:
:func:`results_markdown` between the ``results`` markers, the real-GPU tables
(:func:`scaledl.report.gpu_report.gpu_markdown`) between the ``gpu`` markers, both through the
block registry (:mod:`scaledl.report.blocks.registry`, ``scaledl docs render``).
"""

from __future__ import annotations

from scaledl.evaluation.results import Metrics, OODErrors, Skipped
from scaledl.report.evaluation_report import reproducibility_text
from scaledl.report.formatting import interval_text, ms, pct, reached_text
from scaledl.report.gpu_report import gpu_markdown
from scaledl.report.paired import significance_markdown
from scaledl.report.targets import target_rows


def _row(label: str, cells: list[str]) -> str:
    return "| " + " | ".join([label, *cells]) + " |"


def _split_table(metrics: Metrics) -> list[str]:
    methods = metrics.main_methods
    lines = [_row("split", methods), "| " + " | ".join(["---"] * (len(methods) + 1)) + " |"]

    def cells(table: dict, epoch: bool = False) -> list[str]:
        out = []
        for m in methods:
            if m not in table:
                out.append("n/a")
            elif epoch:
                out.append(pct(table[m].epoch.mre))
            else:
                out.append(f"{pct(table[m].mre)} / {ms(table[m].rmse_s)}")
        return out

    ident = metrics.splits.id.methods
    lines.append(_row("in-distribution (iteration MRE / RMSE)", cells(ident)))
    lines.append(_row("in-distribution (epoch MRE)", cells(ident, epoch=True)))
    ood = metrics.splits.ood
    if isinstance(ood, OODErrors):
        for family, table in ood.per_family.items():
            lines.append(_row(f"leave-out {family}", cells(table)))
        lines.append(_row("**leave-one-family-out mean**", cells(ood.mean)))
    else:
        lines.append(_row("leave-one-family-out", [f"skipped: {ood.skipped}"] * len(methods)))
    ext = metrics.splits.extrapolation
    if isinstance(ext, Skipped):
        lines.append(_row("extrapolation", [f"skipped: {ext.skipped}"] * len(methods)))
    else:
        lines.append(_row("extrapolation (largest tokens/step)", cells(ext.methods)))
    return lines


def _learning_curve_table(metrics: Metrics) -> list[str]:
    if isinstance(metrics.learning_curves, Skipped):
        return [f"Learning curves: skipped ({metrics.learning_curves.skipped})."]
    method, curves = next(iter(metrics.learning_curves.methods.items()))
    samplers = curves.samplers
    sizes = next(iter(samplers.values())).sizes
    seeds = len(next(iter(samplers.values())).mre_per_seed[0])
    lines = [
        f"Learning curves ({method} MRE on a fixed test set vs. profiled training workloads "
        f"chosen from a pool of {curves.pool_size}, mean ± std over {seeds} seeds):",
        "",
        _row("sampler", [str(n) for n in sizes]),
        "| " + " | ".join(["---"] * (len(sizes) + 1)) + " |",
    ]
    for sampler, c in samplers.items():
        values = [f"{pct(m)} ± {pct(s)}" for m, s in zip(c.mre_mean, c.mre_std, strict=True)]
        lines.append(_row(sampler, values))
        if c.prior_mre_mean is not None:
            lines.append(_row(f"{sampler}: prior", [pct(m) for m in c.prior_mre_mean]))
    if curves.halving is not None:
        h = curves.halving
        lines += [
            "",
            f"Halving (paired by seed): {h.method_a} vs {h.method_b} {interval_text(h)}: "
            f"{h.verdict}.",
        ]
    return lines


def _external_lines(metrics: Metrics) -> list[str]:
    gpu = metrics.gpu
    if isinstance(gpu, Skipped):
        lines = [f"Real GPU data (imported profiles): skipped ({gpu.skipped})."]
    else:
        protocols = []
        for name, protocol in (
            ("leave one model out", gpu.leave_one_model_out),
            ("leave one GPU out", gpu.leave_one_gpu_out),
        ):
            if protocol is not None:
                mean = ", ".join(f"{m} {pct(v)}" for m, v in protocol.mean_over_gpus.items())
                worst = ", ".join(f"{m} {pct(v)}" for m, v in protocol.max_over_gpus.items())
                protocols.append(f"{name}: mean over GPUs {mean}, worst GPU {worst}")
        lines = [
            f"Real GPU data ({gpu.n_workloads} imported workloads, {len(gpu.gpus)} GPUs), "
            f"iteration MRE, {'; '.join(protocols)}."
        ]
    if isinstance(metrics.external, Skipped):
        lines.append(f"Vidur all-reduce: skipped ({metrics.external.skipped}).")
    else:
        vidur = "; ".join(
            f"{system} " + ", ".join(f"{variant} {pct(e.mre)}" for variant, e in variants.items())
            for system, variants in metrics.external.vidur.per_system.items()
        )
        lines.append(f"Vidur all-reduce MRE: {vidur}.")
    return [" ".join(lines)]


def _interval_lines(metrics: Metrics, method: str = "scaledl") -> list[str]:
    iv = metrics.intervals

    def text(node, name: str) -> str | None:
        c = node.get(method) if node else None
        if c is None:
            return None
        s = c.iteration
        width = pct(s.median_relative_width) if s.median_relative_width is not None else "unbounded"
        return f"{name} {pct(s.coverage)} of {s.n} (median width {width})"

    parts = [text(iv.id.methods, "ID")]
    if not isinstance(iv.ood, Skipped):
        parts += [text(v, f"left-out {f}") for f, v in iv.ood.per_family.items()]
    if not isinstance(iv.extrapolation, Skipped):
        parts.append(text(iv.extrapolation.methods, "extrapolation"))
    shown = [p for p in parts if p]
    if not shown:
        return [f"Calibrated intervals: {method} not evaluated."]
    by_family = not isinstance(iv.ood, Skipped) and any(
        c.iteration.calibration_families is not None
        for v in iv.ood.per_family.values()
        for c in v.values()
    )
    how = (
        "; each left-out family calibrated on the other families, one score per family"
        if by_family
        else ""
    )
    return [
        f"Calibrated {iv.coverage:.0%} intervals of {method} ({iv.library}, Mondrian split "
        f"conformal on log residuals, each interval calibrated without its own workload{how}), "
        f"empirical coverage of the iteration time: {'; '.join(shown)}."
    ]


def _targets(metrics: Metrics) -> list[str]:
    lines = ["| target | measured | reached |", "| --- | --- | --- |"]
    for t in target_rows(metrics):
        lines.append(f"| {t.text} | {t.measured} | {reached_text(t.met, markdown=True)} |")
    return lines


def results_markdown(metrics: Metrics, source: str) -> str:
    """The README results block (markdown) of an evaluation.

    Args:
        metrics: the evaluation's metrics.
        source: the results file it is generated from, as named in the text (a repository path).

    Returns:
        Markdown without the markers: the error table per split and method, the learning
        curves, the real-GPU results, the interval coverage and the targets, every number
        from ``metrics``.
    """
    lines = [
        f"Generated from `{source}`: {metrics.n_workloads} validated workloads of the families "
        f"{', '.join(metrics.families)}; noise floor (label reproducibility: MRE between "
        f"independent launches of the same workloads): {reproducibility_text(metrics)}. "
        "Iteration-time MRE / RMSE per split and method:",
        "",
        *_split_table(metrics),
        "",
        *significance_markdown(metrics),
        "",
        *_learning_curve_table(metrics),
        "",
        *_external_lines(metrics),
        "",
        *_interval_lines(metrics),
        "",
        "Targets:",
        "",
        *_targets(metrics),
    ]
    return "\n".join(lines)


def gpu_block(metrics: Metrics) -> str:
    """The README's real-GPU block: :func:`~scaledl.report.gpu_report.gpu_markdown`.

    Returns:
        Markdown, or one line saying why the GPU evaluation was skipped.
    """
    if isinstance(metrics.gpu, Skipped):
        return f"The GPU evaluation was skipped: {metrics.gpu.skipped}."
    return gpu_markdown(metrics.gpu.model_dump())
