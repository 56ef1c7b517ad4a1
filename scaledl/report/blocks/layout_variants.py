"""The history page's layout-variants block, rendered from ``docs/results/layouts.json``.

``benchmarks/history/layout_variants.py`` evaluates the variants the layout recipe was chosen
among and writes them into the committed result; this block tabulates them on
``docs/history/layout-variants.md``. Pure functions of the result.
"""

from __future__ import annotations

from scaledl.report.formatting import pct


def gnn_ablation(variants: dict) -> dict[str, dict]:
    """Per held-out kind, the GNN's paired comparisons (``gnn`` - ``gnn_no_edges``, - ridge).

    Args:
        variants: the ``variants`` of a result of the history script.

    Returns:
        ``{kind: {"no_edges": comparison, "ridge": comparison}}`` for the layout kinds the
        GNN was paired on (empty without a ``gnn`` variant).
    """
    folds = variants.get("gnn", {"folds": {}})["folds"]
    return {
        kind: {"no_edges": f["corrected_vs_gnn_no_edges"],
               "ridge": f["corrected_vs_plain_layers_overlap"]}
        for kind, f in folds.items()
        if kind != "ddp" and "corrected_vs_gnn_no_edges" in f
    }  # fmt: skip


def _interval(c: dict | None) -> str:
    if not c:
        return "n/a"
    return (
        f"{100 * c['mre_difference']:+.1f} [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}]"
        f" ({c['verdict']})"
    )


def _tau(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _ablation_text(ablation: dict[str, dict]) -> str:
    return "; ".join(
        f"{kind}: gnn - gnn_no_edges {_interval(c['no_edges'])}, "
        f"gnn - ridge {_interval(c['ridge'])}"
        for kind, c in ablation.items()
    )


def variants_markdown(result: dict) -> str:
    """The block's Markdown (without markers).

    Args:
        result: the committed ``docs/results/layouts.json`` (with its ``variants``).

    Returns:
        Markdown: one row per variant and held-out kind, the selection's choices, the GNN
        ablation on the profile and each repeat, and the ranking per model and variant.
    """
    lines = [
        f"Profile {result['dataset']}; each layout kind held out in turn, every model of a "
        f"fold fitted on the other kinds; the product's recipe is `{result['headline']}`.",
        "",
        "| variant | held out | workloads | composed MRE | corrected MRE "
        "| corrected - current [95% CI] |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, variant in result["variants"].items():
        for kind, f in variant["folds"].items():
            if kind == "ddp":
                continue
            diff = _interval(f.get("corrected_vs_current")) if name != "current" else "-"
            lines.append(
                f"| {name} | {kind} | {f['n_workloads']} | {pct(f['mre_composed'])} | "
                f"{pct(f['mre_corrected'])} | {diff} |"
            )
    chosen = ", ".join(
        f"{kind}: {f['selected']}"
        for kind, f in result["variants"].get("selected", {"folds": {}})["folds"].items()
        if "selected" in f
    )  # fmt: skip
    if chosen:
        lines += ["", f"`selected` per held-out kind: {chosen}."]
    ablation = gnn_ablation(result["variants"])
    if ablation:
        lines += ["", "The runtime GNN over layout graphs (`benchmarks/history/layout_gnn.py`) "
                  "as the correction of the recipe's composition, paired per held-out workload "
                  f"(MRE points, 95% CI): {_ablation_text(ablation)}."]  # fmt: skip
        for rep in result.get("repeats", []):
            if rep.get("gnn_ablation"):
                lines.append(f"On {rep['dataset']}: {_ablation_text(rep['gnn_ablation'])}.")
    models = result["ranking"]["models"]
    lines += ["", "| variant | " + " | ".join(m["model"] for m in models) + " |",
              "| --- |" + " --- |" * len(models)]  # fmt: skip
    for name, variant in result["variants"].items():
        taus = " | ".join(_tau(m["tau_corrected"]) for m in variant["ranking"]["models"])
        lines.append(f"| {name} (Kendall tau, corrected) | {taus} |")
    return "\n".join(lines)
