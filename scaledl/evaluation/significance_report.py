"""The report's and README's view of the paired comparisons, the ablations and the GNN diagnosis.

Every comparison of two methods is stated as a verdict with its interval ("better", "worse",
"not distinguishable"), never as two numbers alone. HTML pieces go into the report
(:mod:`scaledl.evaluation.report`), markdown lines into the README block
(:mod:`scaledl.evaluation.summary`), target rows into both.
"""

from __future__ import annotations

import html

from scaledl.evaluation.results import Comparison, Metrics, Skipped, SplitComparisons

#: Split keys of the significance section and how the report names them.
SPLIT_LABELS = {
    "id": "in-distribution",
    "ood": "leave-one-family-out (mean over families)",
    "extrapolation": "extrapolation",
}
#: The baselines ScaleDL has to beat (the issue's targets).
TARGET_BASELINES = ("additive", "critical_path")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def interval_text(c: Comparison) -> str:
    """``-1.2 points [-2.0, -0.4]``: the difference and its interval, in percentage points."""
    return f"{100 * c.mre_difference:+.1f} points [{100 * c.ci_low:+.1f}, {100 * c.ci_high:+.1f}]"


def comparison_cells(c: Comparison) -> list[str]:
    """Table cells of a comparison: A vs B, both MREs, the difference with interval, verdict."""
    return [f"{c.method_a} vs {c.method_b}", _pct(c.mre_a), _pct(c.mre_b), interval_text(c),
            c.verdict]  # fmt: skip


_HEADER = ["comparison (A vs B)", "MRE A", "MRE B", "A - B, 95% CI", "verdict"]


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _split_label(key: str) -> str:
    if key.startswith("ood/"):
        return f"leave out {key.split('/', 1)[1]}"
    return SPLIT_LABELS.get(key, key)


def significance_html(metrics: Metrics) -> str:
    """Paired comparisons per split, ablations, GNN diagnosis (HTML sections)."""
    sig = metrics.significance
    parts = [
        "<h2 id='significance'>Paired comparisons</h2>",
        f"<p>MRE difference A - B with its {100 * sig.confidence_level:g}% paired bootstrap "
        f"interval (BCa) over the test workloads; each workload's error averaged over "
        f"{sig.seeds} model seed(s) of the GNN methods and over the workload's label repeats "
        "(independent launches), so the MREs here are against single launches. Verdict: "
        "better / worse when the interval excludes 0, else not distinguishable.</p>",
    ]
    for key, split in sig.splits.items():
        parts.append(
            f"<h3>{html.escape(_split_label(key))} ({split.n_workloads} workloads, "
            f"{split.label_repeats:.1f} labels each)</h3>"
        )
        if not split.comparisons:
            parts.append("<p>Not compared: a paired interval needs at least 2 test workloads.</p>")
            continue
        parts.append(_table(_HEADER, [comparison_cells(c) for c in split.comparisons]))
    parts.append(ablation_html(metrics))
    parts.append(diagnosis_html(metrics))
    return "\n".join(parts)


def ablation_rows(metrics: Metrics) -> list[list[str]]:
    """Per ablation: what it removes, MRE per split and verdict against ScaleDL."""
    rows = []
    for name, text in metrics.ablations.items():
        row = [name, text]
        for key in SPLIT_LABELS:
            split = metrics.significance.splits.get(key)
            c = None if split is None else split.find("scaledl", name)
            row.append(
                "n/a" if c is None else f"{_pct(c.mre_b)} (ScaleDL {interval_text(c)}: {c.verdict})"
            )
        rows.append(row)
    return rows


def ablation_html(metrics: Metrics) -> str:
    """The ablation table (HTML)."""
    if not metrics.ablations:
        return "<h2>Ablations</h2><p>none evaluated</p>"
    header = ["ablation", "what changes", *SPLIT_LABELS.values()]
    return (
        "<h2 id='ablations'>Ablations of ScaleDL</h2><p>Each cell: the ablation's MRE, then "
        "ScaleDL minus the ablation with its interval and ScaleDL's verdict (better: the "
        "removed part helps).</p>" + _table(header, ablation_rows(metrics))
    )


def diagnosis_html(metrics: Metrics) -> str:
    """The GNN diagnosis table (HTML)."""
    diag = metrics.gnn_diagnosis
    if isinstance(diag, Skipped):
        return f"<h2>GNN diagnosis</h2><p>{html.escape(diag.skipped)}</p>"
    header = ["split", "method", "train RMSE (log)", "val RMSE (log)", "prior test MRE",
              "mean |log correction|", "epochs", "best epoch"]  # fmt: skip
    rows = [
        [group, method, f"{r.train_rmse_log:.3f}", f"{r.val_rmse_log:.3f}",
         _pct(r.prior_test_mre), f"{r.correction_abs:.3f}", f"{r.epochs:.0f}",
         f"{r.best_epoch:.0f}"]
        for group, methods in diag.splits.items()
        for method, r in methods.items()
    ]  # fmt: skip
    return (
        "<h2 id='gnn_diagnosis'>GNN diagnosis</h2><p>What the GNNs on a prior did, mean over "
        "seeds (and leave-one-family-out folds): weighted RMSE of log milliseconds on their "
        "training and early-stopping graphs, the prior's own test MRE, the mean absolute log "
        "correction applied to the prior on the test workloads, epochs trained and the best "
        "epoch.</p>" + _table(header, rows)
    )


def learning_curve_html(metrics: Metrics) -> str:
    """Samplers compared paired by seed, the halving comparison and the design check (HTML)."""
    curves = metrics.learning_curves
    if isinstance(curves, Skipped):
        return ""
    parts = []
    for method, lc in curves.methods.items():
        rows = [comparison_cells(c) for c in lc.comparisons]
        if lc.halving is not None:
            rows.append(comparison_cells(lc.halving))
        parts.append(
            f"<h3>Learning curves of {html.escape(method)}: samplers paired by seed "
            f"({lc.seeds} seeds; D-optimal on the {html.escape(lc.design_order)} model, "
            f"{len(lc.design_terms)} terms)</h3>" + _table(_HEADER, rows)
        )
        check = [
            [sampler, str(n), _pct(m), "n/a" if c.prior_mre_mean is None else _pct(p),
             f"{e:.2f}", f"{cov:.2f}"]
            for sampler, c in lc.samplers.items()
            for n, m, p, e, cov in zip(c.sizes, c.mre_mean, c.prior_mre_mean or c.mre_mean,
                                       c.layerwise_d_efficiency, c.family_world_coverage,
                                       strict=True)
        ]  # fmt: skip
        parts.append(
            "<p>Design check: per sampler and size, the MRE of the method and of its prior "
            "fitted on the same subsets, the subsets' D-efficiency for the layer-wise models "
            "(per layer call, relative to the pool) and their (family, world size) "
            "coverage.</p>"
            + _table(
                ["sampler", "workloads", "MRE", "prior MRE", "layer-wise D-eff.", "coverage"],
                check,
            )
        )
    return "\n".join(parts)


def significance_targets(metrics: Metrics) -> list[dict]:
    """The issue's targets on the paired comparisons: ScaleDL beats each baseline per split.

    Returns:
        ``{"target", "measured", "reached"}`` rows (``reached`` ``None`` when not compared).
    """
    rows = []
    for key, label in SPLIT_LABELS.items():
        split: SplitComparisons | None = metrics.significance.splits.get(key)
        for base in TARGET_BASELINES:
            c = None if split is None else split.find("scaledl", base)
            rows.append(
                {
                    "target": f"ScaleDL beats {base} on {label} (paired 95% interval < 0)",
                    "measured": "not compared" if c is None else f"{interval_text(c)}: {c.verdict}",
                    "reached": None if c is None else c.verdict == "better",
                }
            )
    return rows


def significance_markdown(metrics: Metrics) -> list[str]:
    """README lines: the key comparisons per split and the ablations, as verdicts."""
    sig = metrics.significance
    pairs = [("scaledl", "additive"), ("scaledl", "critical_path"),
             ("critical_path", "additive"), ("scaledl_sum_prior", "additive")]  # fmt: skip
    lines = [
        f"Paired comparisons (MRE difference A - B, 95% paired bootstrap interval over test "
        f"workloads, {sig.seeds} model seeds, label repeats pooled):",
        "",
        "| split | " + " | ".join(f"{a} vs {b}" for a, b in pairs) + " |",
        "| --- " * (len(pairs) + 1) + "|",
    ]
    for key, label in SPLIT_LABELS.items():
        split = sig.splits.get(key)
        if split is None:
            continue
        cells = []
        for a, b in pairs:
            c = split.find(a, b)
            cells.append("n/a" if c is None else f"{interval_text(c)} {c.verdict}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if metrics.ablations:
        lines += ["", "Ablations (ablation's MRE; ScaleDL minus ablation, interval, verdict):", ""]
        lines.append("| ablation | " + " | ".join(SPLIT_LABELS.values()) + " |")
        lines.append("| --- " * (len(SPLIT_LABELS) + 1) + "|")
        for row in ablation_rows(metrics):
            lines.append(f"| {row[0]} | " + " | ".join(row[2:]) + " |")
    return lines
