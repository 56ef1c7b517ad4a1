"""Self-contained HTML report of an evaluation: targets table, metric tables, embedded figures.

Figures are embedded as base64 PNG ``<img src="data:image/png;base64,...">`` so the file can be
moved alone. :func:`target_table` checks the project's accuracy targets against the measured
values and says, for each, whether it is reached (``None`` when it cannot be measured).
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path

from scaledl.evaluation.gpu_report import gpu_report_html, gpu_targets
from scaledl.evaluation.headline import summary_html
from scaledl.evaluation.results import Metrics, OODErrors, Skipped
from scaledl.evaluation.significance_report import (
    interval_text,
    learning_curve_html,
    significance_html,
    significance_targets,
)

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


@dataclass(frozen=True)
class Target:
    """One accuracy target of the project and how far the evaluation got.

    Attributes:
        target: what is aimed at.
        measured: the measured value, as text.
        reached: whether it is reached (``None`` when it could not be measured).
    """

    target: str
    measured: str
    reached: bool | None


def reproducibility_text(metrics: Metrics) -> str:
    """The noise floor in words: label reproducibility MRE overall and per world size."""
    rep = metrics.label_reproducibility
    if isinstance(rep, Skipped):
        return f"not measured ({rep.skipped})"
    per_ws = ", ".join(f"world size {ws}: {_pct(v.mre)}" for ws, v in rep.per_world_size.items())
    text = f"{_pct(rep.mre)} over {rep.n_workloads} workloads ({per_ws})"
    if rep.raw_mre is not None:
        text += (
            f"; {_pct(rep.raw_mre)} before the host-drift correction "
            f"({rep.corrected_launches} launches corrected)"
        )
    return text


def _ood_mean(metrics: Metrics) -> dict:
    ood = metrics.splits.ood
    return ood.mean if isinstance(ood, OODErrors) else {}


def target_table(metrics: Metrics) -> list[Target]:
    """The accuracy targets with measured value and whether each is reached.

    Args:
        metrics: the evaluation metrics.

    Returns:
        One :class:`Target` per target, in a fixed order.
    """
    rows = []
    rep = metrics.label_reproducibility
    noise = None if isinstance(rep, Skipped) else rep.mre
    scaledl_id = metrics.splits.id.methods.get("scaledl")
    id_mre = None if scaledl_id is None else scaledl_id.mre
    rows.append(
        Target(
            "ID MRE <= 3% (ScaleDL, iteration)",
            _pct(id_mre),
            None if id_mre is None else id_mre <= 0.03,
        )
    )
    rows.append(
        Target(
            "ID MRE <= max(3%, 1.5 x label reproducibility MRE)",
            f"{_pct(id_mre)} vs max(3%, 1.5 x {_pct(noise)})",
            None if id_mre is None or noise is None else id_mre <= max(0.03, 1.5 * noise),
        )
    )
    ood = _ood_mean(metrics)
    s = ood.get("scaledl")
    rows.append(
        Target(
            "OOD MRE <= 8% (ScaleDL, mean over families)",
            _pct(None if s is None else s.mre),
            None if s is None else s.mre <= 0.08,
        )
    )
    for base in ("additive", "analytical"):
        b = ood.get(base)
        ok = s is not None and b is not None
        mre_ratio = b.mre / s.mre if ok else None
        rmse_ratio = b.rmse_s / s.rmse_s if ok else None
        rows.append(
            Target(
                f"OOD MRE of ScaleDL >= 6x lower than {base}",
                "n/a" if mre_ratio is None else f"{mre_ratio:.2f}x",
                None if mre_ratio is None else mre_ratio >= 6.0,
            )
        )
        rows.append(
            Target(
                f"OOD RMSE of ScaleDL >= 5x lower than {base}",
                "n/a" if rmse_ratio is None else f"{rmse_ratio:.2f}x",
                None if rmse_ratio is None else rmse_ratio >= 5.0,
            )
        )
    rows += [Target(**row) for row in significance_targets(metrics)]
    curves = metrics.learning_curves
    rows.append(_doptimal_target(None if isinstance(curves, Skipped) else curves.headline))
    if isinstance(metrics.gpu, Skipped):
        rows.append(
            Target(
                "GPU leave-one-model-out MRE <= 10% on every GPU",
                f"not evaluated ({metrics.gpu.skipped})",
                None,
            )
        )
    else:
        rows += [Target(**row) for row in gpu_targets(metrics.gpu.model_dump(mode="json"))]
    rows += [Target(**t.model_dump()) for t in metrics.intervals.targets]
    return rows


def _doptimal_target(curves) -> Target:
    """D-optimal at half the workloads against random at the final size, paired by seed."""
    target = "D-optimal reaches random's final MRE with at most half the workloads"
    c = None if curves is None else curves.halving
    if c is None:
        return Target(target, "not evaluated", None)
    # Reached when D-optimal at half the size is not worse than random at the final size:
    # point difference <= 0 and an interval that does not lie above 0.
    return Target(
        target,
        f"{c.method_a} vs {c.method_b}: {_pct(c.mre_a)} vs {_pct(c.mre_b)}, "
        f"{interval_text(c)} over {c.n_units} seeds: {c.verdict}",
        c.mre_difference <= 0 and c.verdict != "worse",
    )


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def _yes(x) -> str:
    return {True: "yes", False: "NO", None: "n/a"}[x]


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _split_rows(block: dict) -> list[list]:
    rows = []
    for method, m in block.items():
        it, ep = m.iteration, m.epoch
        rows.append(
            [
                method,
                _pct(it.mre),
                f"{it.rmse_s:.4g}",
                _pct(it.p50_re),
                _pct(it.p90_re),
                _pct(ep.mre),
                f"{ep.rmse_s:.4g}",
            ]
        )
    return rows


def render_report(metrics: Metrics, figure_paths: dict[str, Path]) -> str:
    """The report as an HTML string.

    Args:
        metrics: the evaluation metrics.
        figure_paths: figure key -> PNG path, embedded as base64.

    Returns:
        A complete HTML document.
    """
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>ScaleDL evaluation</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
        "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #999;"
        "padding:3px 8px}.NO{color:#b00;font-weight:bold}</style></head><body>",
        "<h1>ScaleDL evaluation</h1>",
        summary_html(metrics, figure_paths),
        "<h2 id='details'>Details</h2>",
        f"<p>{metrics.n_workloads} profiled workloads, families "
        f"{html.escape(', '.join(metrics.families))}; noise floor (label "
        f"reproducibility: MRE between independent launches of the same workloads): "
        f"{html.escape(reproducibility_text(metrics))}. "
        "MRE = mean |pred - true| / true; p50/p90 = percentiles of the relative error; "
        "RMSE in seconds.</p>",
        "<h2 id='targets'>Targets</h2>",
    ]
    trows = "".join(
        f"<tr><td>{html.escape(t.target)}</td><td>{html.escape(t.measured)}</td>"
        f"<td class='{_yes(t.reached)}'>{_yes(t.reached)}</td></tr>"
        for t in target_table(metrics)
    )
    parts.append(
        f"<table class='targets'><tr><th>target</th><th>measured</th><th>reached</th>"
        f"</tr>{trows}</table>"
    )
    header = [
        "method",
        "iter MRE",
        "iter RMSE [s]",
        "iter p50",
        "iter p90",
        "epoch MRE",
        "epoch RMSE [s]",
    ]
    splits = metrics.splits
    parts.append("<h2>In-distribution (random held-out, stratified by family)</h2>")
    parts.append(_table(header, _split_rows(splits.id.methods)))
    parts.append("<h2>Out of distribution (leave one family out)</h2>")
    if isinstance(splits.ood, OODErrors):
        for fam, block in splits.ood.per_family.items():
            parts.append(f"<h3>{html.escape(fam)}</h3>" + _table(header, _split_rows(block)))
        mean_rows = [
            [m, _pct(v.mre), f"{v.rmse_s:.4g}", _pct(v.iteration.p50_re),
             _pct(v.iteration.p90_re), _pct(v.epoch.mre), f"{v.epoch.rmse_s:.4g}"]
            for m, v in splits.ood.mean.items()
        ]  # fmt: skip
        parts.append("<h3>mean over families</h3>" + _table(header, mean_rows))
    else:
        parts.append(f"<p>{html.escape(splits.ood.skipped)}</p>")
    parts.append("<h2>Extrapolation (largest tokens per step held out)</h2>")
    if isinstance(splits.extrapolation, Skipped):
        parts.append(f"<p>{html.escape(splits.extrapolation.skipped)}</p>")
    else:
        parts.append(_table(header, _split_rows(splits.extrapolation.methods)))
    parts.append(significance_html(metrics))
    parts.append(learning_curve_html(metrics))
    if not isinstance(metrics.gpu, Skipped):
        parts.append(gpu_report_html(metrics.gpu.model_dump(mode="json")))
    ext = metrics.external
    if not isinstance(ext, Skipped):
        vd = ext.vidur
        variants = list(vd.mean)
        rows = [[s, *(_pct(v[k].mre) for k in variants)] for s, v in vd.per_system.items()]
        parts.append(
            "<h2>All-reduce: Vidur NCCL measurements (alpha-beta model)</h2><p>Data: "
            "Vidur, Agrawal et al., MLSys 2024, microsoft/vidur, MIT licence.</p>"
        )
        parts.append(_table(["system", *variants], rows))
    parts.append("<h2>Figures</h2>")
    for key, path in figure_paths.items():
        if key == "headline":  # opens the report in the summary
            continue
        text = EXPLANATIONS.get(key, _LC_TEXT if key.startswith("learning_curves") else "")
        data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
        parts.append(
            f"<h3>{html.escape(key)}</h3><p>{html.escape(text)}</p>"
            f"<img alt='{html.escape(key)}' src='data:image/png;base64,{data}'>"
        )
    rt = metrics.runtime_s.model_dump()
    parts.append("<h2>Runtime and notes</h2>")
    parts.append(
        f"<p>runtime [s]: {html.escape(str(rt))}; fits: "
        f"{html.escape(str(metrics.fit_counts))}; notes: "
        f"{html.escape('; '.join(metrics.notes) or 'none')}</p>"
    )
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(metrics: Metrics, figure_paths: dict[str, Path], path: Path) -> Path:
    """Write :func:`render_report` to ``path``.

    Returns:
        ``path``.
    """
    Path(path).write_text(render_report(metrics, figure_paths), encoding="utf-8")
    return Path(path)
