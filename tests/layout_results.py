"""The product's part of a layout result that ``benchmarks/history/layout_variants.py`` writes.

The committed ``docs/results/layouts.json`` holds both: ``scaledl evaluate-layouts`` reproduces
:func:`product_part` of it, the history script the whole.
"""

from scaledl.evaluation.profiled_layouts import HEADLINE


def product_part(full: dict) -> dict:
    """``full`` less what the history script adds to the product's result.

    That is: ``variants``, the headline folds' ``corrected_vs_current``, every other variant's
    per-workload predictions and each repeat's ``gnn_ablation``.
    """
    out = {k: v for k, v in full.items() if k != "variants"}
    out["folds"] = {kind: {k: v for k, v in fold.items() if k != "corrected_vs_current"}
                    for kind, fold in full["folds"].items()}  # fmt: skip
    ours = ("measured_ms", f"{HEADLINE}_composed_ms", f"{HEADLINE}_corrected_ms")
    out["workloads"] = [{k: v for k, v in row.items() if not k.endswith("_ms") or k in ours}
                        for row in full["workloads"]]  # fmt: skip
    if "repeats" in full:
        out["repeats"] = [{k: v for k, v in r.items() if k != "gnn_ablation"}
                          for r in full["repeats"]]  # fmt: skip
    return out
