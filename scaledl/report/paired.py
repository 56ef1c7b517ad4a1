"""The report's and README's view of the paired comparisons, ablations, GNN diagnosis and curves.

Every comparison of two methods is stated as a verdict with its interval ("better", "worse",
"not distinguishable"), never as two numbers alone. :func:`paired_context` gives the report
template (``paired.html.j2``) its tables; :func:`significance_markdown` the README block's lines.
"""

from __future__ import annotations

from scaledl.evaluation.results import Metrics, Skipped
from scaledl.evaluation.targets import COMPARISON_SPLITS
from scaledl.report.formatting import interval_text, pct
from scaledl.stats.significance import Comparison

#: Split keys of the significance section and how the report names them.
SPLIT_LABELS = COMPARISON_SPLITS
#: Header of every comparison table.
COMPARISON_HEADER = ["comparison (A vs B)", "MRE A", "MRE B", "A - B, 95% CI", "verdict"]
_DIAGNOSIS_HEADER = ["split", "method", "train RMSE (log)", "val RMSE (log)", "prior test MRE",
                     "mean |log correction|", "epochs", "best epoch"]  # fmt: skip
_CHECK_HEADER = ["sampler", "workloads", "MRE", "prior MRE", "layer-wise D-eff.", "coverage"]
#: The comparisons of the README block, per split.
README_PAIRS = (("scaledl", "additive"), ("scaledl", "critical_path"),
                ("critical_path", "additive"), ("scaledl_sum_prior", "additive"))  # fmt: skip


def comparison_cells(c: Comparison) -> list[str]:
    """Table cells of a comparison: A vs B, both MREs, the difference with interval, verdict."""
    return [f"{c.method_a} vs {c.method_b}", pct(c.mre_a), pct(c.mre_b), interval_text(c),
            c.verdict]  # fmt: skip


def split_label(key: str) -> str:
    """How the report names a significance split (``ood/bert``: ``leave out bert``)."""
    if key.startswith("ood/"):
        return f"leave out {key.split('/', 1)[1]}"
    return SPLIT_LABELS.get(key, key)


def ablation_rows(metrics: Metrics) -> list[list[str]]:
    """Per ablation: what it removes, MRE per split and verdict against ScaleDL."""
    rows = []
    for name, text in metrics.ablations.items():
        row = [name, text]
        for key in SPLIT_LABELS:
            split = metrics.significance.splits.get(key)
            c = None if split is None else split.find("scaledl", name)
            row.append(
                "n/a" if c is None else f"{pct(c.mre_b)} (ScaleDL {interval_text(c)}: {c.verdict})"
            )
        rows.append(row)
    return rows


def diagnosis_rows(metrics: Metrics) -> list[list[str]]:
    """The GNN diagnosis table: per split group and GNN method, what training did."""
    return [
        [group, method, f"{r.train_rmse_log:.3f}", f"{r.val_rmse_log:.3f}",
         pct(r.prior_test_mre), f"{r.correction_abs:.3f}", f"{r.epochs:.0f}",
         f"{r.best_epoch:.0f}"]
        for group, methods in metrics.gnn_diagnosis.splits.items()
        for method, r in methods.items()
    ]  # fmt: skip


def learning_curve_tables(metrics: Metrics) -> list[dict]:
    """Per method: the samplers compared paired by seed (with the halving) and the design check.

    Returns:
        ``{"method", "seeds", "design_order", "n_terms", "rows", "check_header", "check"}`` per
        method (empty when the learning curves were skipped).
    """
    curves = metrics.learning_curves
    if isinstance(curves, Skipped):
        return []
    out = []
    for method, lc in curves.methods.items():
        rows = [comparison_cells(c) for c in lc.comparisons]
        if lc.halving is not None:
            rows.append(comparison_cells(lc.halving))
        check = [
            [sampler, str(n), pct(m), "n/a" if c.prior_mre_mean is None else pct(p),
             f"{e:.2f}", f"{cov:.2f}"]
            for sampler, c in lc.samplers.items()
            for n, m, p, e, cov in zip(c.sizes, c.mre_mean, c.prior_mre_mean or c.mre_mean,
                                       c.layerwise_d_efficiency, c.family_world_coverage,
                                       strict=True)
        ]  # fmt: skip
        out.append(
            {"method": method, "seeds": lc.seeds, "design_order": lc.design_order,
             "n_terms": len(lc.design_terms), "rows": rows, "check_header": _CHECK_HEADER,
             "check": check}
        )  # fmt: skip
    return out


def paired_context(metrics: Metrics) -> dict:
    """The variables of ``paired.html.j2``: comparisons per split, ablations, diagnosis, curves."""
    sig = metrics.significance
    diag = metrics.gnn_diagnosis
    splits = [
        {"label": split_label(key), "n_workloads": split.n_workloads,
         "label_repeats": f"{split.label_repeats:.1f}",
         "rows": [comparison_cells(c) for c in split.comparisons]}
        for key, split in sig.splits.items()
    ]  # fmt: skip
    return {
        "level": f"{100 * sig.confidence_level:g}%",
        "seeds": sig.seeds,
        "header": COMPARISON_HEADER,
        "splits": splits,
        "ablation_header": ["ablation", "what changes", *SPLIT_LABELS.values()],
        "ablations": ablation_rows(metrics) if metrics.ablations else [],
        "diagnosis_skipped": diag.skipped if isinstance(diag, Skipped) else None,
        "diagnosis_header": _DIAGNOSIS_HEADER,
        "diagnosis": [] if isinstance(diag, Skipped) else diagnosis_rows(metrics),
        "learning_curves": learning_curve_tables(metrics),
    }


def significance_markdown(metrics: Metrics) -> list[str]:
    """README lines: the key comparisons per split and the ablations, as verdicts."""
    sig = metrics.significance
    lines = [
        f"Paired comparisons (MRE difference A - B, 95% paired bootstrap interval over test "
        f"workloads, {sig.seeds} model seeds, label repeats pooled):",
        "",
        "| split | " + " | ".join(f"{a} vs {b}" for a, b in README_PAIRS) + " |",
        "| --- " * (len(README_PAIRS) + 1) + "|",
    ]
    for key, label in SPLIT_LABELS.items():
        split = sig.splits.get(key)
        if split is None:
            continue
        cells = []
        for a, b in README_PAIRS:
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
