"""The report's opening summary: headline figure, errors next to the noise floor, a verdict.

A reader of the evaluation wants three things before any table: how close the predictions
are (the headline figure: ScaleDL's predicted vs measured iteration time on held-out workloads,
with its calibrated intervals), how that compares with what is achievable (the errors next to
the label noise floor, the MRE between independent launches of the same workloads, and next to
the best baseline), and whether to trust it (a one-paragraph verdict written from the numbers,
never typed by hand). :func:`summary_html` renders the three (template ``summary.html.j2``); the
detailed tables follow it in :func:`scaledl.report.evaluation_report.render_report`.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scaledl.evaluation.results import Metrics, OODErrors, Skipped  # noqa: E402
from scaledl.evaluation.targets import target  # noqa: E402
from scaledl.io.render import render  # noqa: E402
from scaledl.report.formatting import loglog_identity, pct, png_data_uri  # noqa: E402

HEADLINE_METHOD = "scaledl"
_SPLITS = {"id": "held-out, trained families (ID)", "ood": "left-out family (OOD)"}


def headline_figure(predictions: pd.DataFrame, path: Path, method: str = HEADLINE_METHOD) -> Path:
    """Predicted vs measured iteration time of one method, with its calibrated intervals.

    ID test workloads and left-out-family workloads (each predicted by a model trained without
    its family) in two colours, log-log, the interval as a vertical bar (an unbounded bound is
    drawn to the edge of the axes), ``y = x`` dashed.

    Args:
        predictions: the evaluation's predictions with ``split``, ``method``,
            ``true_iteration_s``, ``pred_iteration_s``, ``pred_iteration_s_low`` and
            ``pred_iteration_s_high``.
        path: output PNG.
        method: the method drawn.

    Returns:
        ``path``.
    """
    rows = predictions[predictions["method"] == method]
    split = rows["split"].astype(str)
    groups = {"id": rows[split == "id"], "ood": rows[split.str.startswith("ood/")]}
    finite = rows[["true_iteration_s", "pred_iteration_s"]].to_numpy(dtype=float)
    lo, hi = np.nanmin(finite) * 0.5, np.nanmax(finite) * 2.0
    fig, ax = plt.subplots(figsize=(6.2, 5.0))
    for (key, part), colour in zip(groups.items(), ("tab:blue", "tab:orange"), strict=True):
        if part.empty:
            continue
        x = part["true_iteration_s"].to_numpy(dtype=float)
        y = part["pred_iteration_s"].to_numpy(dtype=float)
        low = np.clip(part["pred_iteration_s_low"].to_numpy(dtype=float), lo, hi)
        high = np.clip(part["pred_iteration_s_high"].to_numpy(dtype=float), lo, hi)
        covered = (x >= part["pred_iteration_s_low"]) & (x <= part["pred_iteration_s_high"])
        ax.errorbar(
            x,
            y,
            yerr=np.vstack([y - low, high - y]),
            fmt="o",
            ms=3.5,
            c=colour,
            elinewidth=0.8,
            alpha=0.8,
            label=f"{_SPLITS[key]}: {int(covered.sum())}/{len(x)} in interval",
        )
    loglog_identity(
        ax,
        lo,
        hi,
        xlabel="measured iteration [s]",
        ylabel="predicted iteration [s]",
        title=f"{method}: predicted vs measured, with calibrated intervals",
    )
    ax.legend(fontsize=7, loc="upper left")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _best_baseline(table: dict, method: str, ablations) -> tuple[str, float] | None:
    """The lowest-MRE method other than ``method`` and its ablations (they are no baselines)."""
    others = {m: v.mre for m, v in table.items() if m != method and m not in ablations}
    if not others:
        return None
    best = min(others, key=others.get)
    return best, others[best]


def error_rows(metrics: Metrics, method: str = HEADLINE_METHOD) -> list[list[str]]:
    """Rows of the errors-versus-noise-floor table: one per split ScaleDL was evaluated on.

    Returns:
        ``[split, method MRE, best baseline (MRE), noise floor, method MRE / noise floor,
        interval coverage, median interval width]`` as text.
    """
    rep = metrics.label_reproducibility
    noise = None if isinstance(rep, Skipped) else rep.mre
    cov = metrics.intervals
    rows = []
    for split, label in (
        ("id", "ID (held-out workloads)"),
        ("ood", "left-out families (mean)"),
        ("extrapolation", "extrapolation (largest)"),
    ):
        body = getattr(metrics.splits, split)
        if isinstance(body, Skipped):
            continue
        table = body.mean if isinstance(body, OODErrors) else body.methods
        if method not in table:
            continue
        mre = table[method].mre
        best = _best_baseline(table, method, metrics.ablations)
        node = getattr(cov, split)
        c = None
        if not isinstance(node, Skipped):
            c = (node.pooled if split == "ood" else node.methods).get(method)
        rows.append(
            [
                label,
                pct(mre),
                "n/a" if best is None else f"{best[0]} {pct(best[1])}",
                pct(noise),
                "n/a" if not noise else f"{mre / noise:.1f}x",
                "n/a" if c is None else f"{pct(c.iteration.coverage)} of {c.iteration.n}",
                "n/a" if c is None else pct(c.iteration.median_relative_width),
            ]
        )
    return rows


def verdict(metrics: Metrics, method: str = HEADLINE_METHOD) -> str:
    """A one-paragraph verdict on the method, written from the metrics.

    It states the ID and out-of-family MRE against the noise floor and the best baseline, the
    interval coverage against its target band, and a conclusion that follows from them.

    Returns:
        Plain text.
    """
    if method not in metrics.splits.id.methods:
        return f"{method} was not evaluated: no verdict."
    rep = metrics.label_reproducibility
    noise = None if isinstance(rep, Skipped) else rep.mre
    id_table = metrics.splits.id.methods
    id_mre = id_table[method].mre
    parts = [
        f"On held-out workloads of the families it was trained on, {method} predicts the "
        f"iteration time with an MRE of {pct(id_mre)}"
    ]
    if noise:
        parts.append(f", {id_mre / noise:.1f}x the label noise floor of {pct(noise)}")
    else:
        parts.append(" (the label noise floor was not measured: no workload launched twice)")
    best = _best_baseline(id_table, method, metrics.ablations)
    if best:
        parts.append(f"; the best baseline, {best[0]}, has {pct(best[1])}")
    ood = metrics.splits.ood
    ood_mre = None
    if isinstance(ood, OODErrors) and method in ood.mean:
        ood_mre = ood.mean[method].mre
        obest = _best_baseline(ood.mean, method, metrics.ablations)
        parts.append(f". On families it never saw, the MRE is {pct(ood_mre)}")
        if obest:
            parts.append(f" (best baseline {obest[0]} {pct(obest[1])})")
    lo, hi = target("interval_coverage_id").threshold
    cov = metrics.intervals
    c_id = cov.id.methods.get(method)
    calibrated = []
    if c_id is not None:
        s = c_id.iteration
        calibrated.append(lo <= s.coverage <= hi)
        parts.append(
            f". Its {cov.coverage:.0%} intervals held the measured time for "
            f"{pct(s.coverage)} of {s.n} ID workloads (median width "
            f"{pct(s.median_relative_width)} of the prediction)"
        )
    if not isinstance(cov.ood, Skipped) and method in cov.ood.pooled:
        flo, fhi = target("interval_coverage_family").threshold
        fam = {f: v[method].iteration for f, v in cov.ood.per_family.items() if method in v}
        calibrated += [flo <= v.coverage <= fhi and not v.n_unbounded for v in fam.values()]
        parts.append(
            " and for " + ", ".join(f"{pct(v.coverage)} of left-out {f}" for f, v in fam.items())
        )
        unbounded = sum(v.n_unbounded > 0 for v in fam.values())
        bound = [v for v in fam.values() if v.family_calibration == "normal_prediction_bound"]
        if bound:
            parts.append(
                f" ({len(bound)} of {len(fam)} left-out families calibrated by a normal "
                f"prediction bound over the other {bound[0].calibration_families}: too few for "
                "the conformal quantile)"
            )
        if unbounded:
            parts.append(
                f" ({unbounded} of {len(fam)} left-out families got unbounded intervals: too few "
                "other families to calibrate a new one)"
            )
    beats_id = best is None or id_mre <= best[1]
    conclusion = [
        "better than every baseline on held-out workloads"
        if beats_id
        else f"not the most accurate method on held-out workloads ({best[0]} is)",
    ]
    if noise:
        factor = target("id_mre_noise").noise_factor
        conclusion.append(
            f"within {factor:g}x the noise floor"
            if id_mre <= factor * noise
            else "well above the noise floor, so the models, not the labels, limit it"
        )
    bands = f"{lo:.0%}-{hi:.0%}"
    if not isinstance(cov.ood, Skipped) and method in cov.ood.pooled:
        bands += f" ID, {flo:.0%}-{fhi:.0%} each left-out family"
    if calibrated:
        conclusion.append(
            f"its intervals are calibrated ({bands}) on every split measured"
            if all(calibrated)
            else "its intervals miss the coverage band on some split: read them with care"
        )
    return "".join(parts) + ". Verdict: " + "; ".join(conclusion) + "."


def summary_context(metrics: Metrics, figure_paths: dict[str, Path]) -> dict:
    """The variables of ``summary.html.j2``: verdict, headline figure and error table.

    Args:
        metrics: the evaluation metrics.
        figure_paths: figure key -> PNG; ``headline`` is embedded when present.

    Returns:
        ``{"verdict", "coverage", "headline" (a data URI or ``None``), "header", "rows"}``.
    """
    headline = figure_paths.get("headline")
    return {
        "verdict": verdict(metrics),
        "coverage": f"{metrics.intervals.coverage:.0%}",
        "headline": None if headline is None else png_data_uri(headline),
        "header": ["split", f"{HEADLINE_METHOD} MRE", "best baseline", "noise floor",
                   "MRE / noise floor", "interval coverage", "median interval width"],
        "rows": error_rows(metrics),
    }  # fmt: skip


def summary_html(metrics: Metrics, figure_paths: dict[str, Path]) -> str:
    """The report's opening section: headline figure, errors vs noise floor, verdict.

    Args:
        metrics: the evaluation metrics.
        figure_paths: figure key -> PNG; ``headline`` is embedded when present.

    Returns:
        An HTML fragment.
    """
    return render("summary.html.j2", summary=summary_context(metrics, figure_paths))
