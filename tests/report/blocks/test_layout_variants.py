"""The history page's layout-variants block (:mod:`scaledl.report.blocks.layout_variants`)."""

from scaledl.report.blocks.layout_variants import gnn_ablation, variants_markdown

FOLD = {"n_workloads": 2, "mre_composed": 0.2, "mre_corrected": 0.05}
PAIRED = {"mre_difference": -0.15, "ci_low": -0.2, "ci_high": -0.1, "verdict": "better"}
RANKING = {"models": [{"model": "bert", "layouts": ["dp2", "tp2", "pp2-1f1b-m2"],
                       "tau_corrected": 1.0, "tau_composed": None}]}  # fmt: skip
EXAMPLE = {
    "dataset": "d",
    "headline": "plain_layers",
    "variants": {
        "current": {"folds": {"tp": {**FOLD, "mre_corrected": 0.2}}, "ranking": RANKING},
        "selected": {
            "folds": {
                "ddp": {**FOLD, "selected": "plain_layers"},
                "tp": {**FOLD, "corrected_vs_current": PAIRED, "selected": "fold_layers"},
            },
            "ranking": RANKING,
        },
    },
    "ranking": RANKING,
}  # fmt: skip


def test_the_block_renders_variants_choices_and_ranking():
    text = variants_markdown(EXAMPLE)
    assert "| current | tp | 2 | 20.0% | 20.0% | - |" in text
    assert "| selected | tp | 2 | 20.0% | 5.0% | -15.0 [-20.0, -10.0] (better) |" in text
    assert "| selected | ddp |" not in text  # the data-parallel fold ranks, it has no target
    assert "`selected` per held-out kind: ddp: plain_layers, tp: fold_layers." in text
    assert "| selected (Kendall tau, corrected) | 1.00 |" in text
    assert "gnn_no_edges" not in text


def test_the_block_renders_the_gnn_ablation_of_the_profile_and_its_repeats():
    worse = {**PAIRED, "mre_difference": 0.02, "ci_low": 0.01, "ci_high": 0.03, "verdict": "worse"}
    gnn_fold = {**FOLD, "corrected_vs_gnn_no_edges": PAIRED,
                "corrected_vs_plain_layers_overlap": worse}  # fmt: skip
    variants = {**EXAMPLE["variants"],
                "gnn": {"folds": {"ddp": FOLD, "tp": gnn_fold}, "ranking": RANKING}}  # fmt: skip
    ablation = gnn_ablation(variants)
    assert list(ablation) == ["tp"]  # the data-parallel fold has no target
    again = {"dataset": "e", "gnn_ablation": ablation}
    text = variants_markdown({**EXAMPLE, "variants": variants, "repeats": [again]})
    expected = ("tp: gnn - gnn_no_edges -15.0 [-20.0, -10.0] (better), "
                "gnn - ridge +2.0 [+1.0, +3.0] (worse).")  # fmt: skip
    assert f"paired per held-out workload (MRE points, 95% CI): {expected}" in text
    assert f"On e: {expected}" in text
