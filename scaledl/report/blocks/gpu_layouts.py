"""The 4-GPU page's block, rendered from ``docs/results/gpu_layouts.json``.

``scaledl evaluate-gpu-layouts --readme docs/results/gpu-layouts.md`` writes both (the result is
:func:`scaledl.evaluation.gpu_layouts.evaluate_layout_rows`'s, with its provenance), ``scaledl
docs render`` the block alone (:mod:`scaledl.report.blocks.registry`). Pure functions of the
result (no model imports). The GPU block (:func:`scaledl.report.gpu_report.gpu_markdown`)
carries a one-line summary of the same result when the GPU evaluation ran it.
"""

from __future__ import annotations

from typing import Any

from scaledl.evaluation.targets import target_results
from scaledl.report.formatting import pct, reached_text

ROW_HEADER = ["GPU", "model", "layout", "global batch", "measured ms", "ScaleDL ms",
              "compute ms", "TP all-reduce ms", "p2p ms", "step ms", "NeuSight ms",
              "ScaleDL error", "NeuSight error"]  # fmt: skip
KIND_HEADER = ["rows", "n", "ScaleDL MRE", "NeuSight MRE", "difference", "95% CI", "verdict"]


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    def line(cells: list[Any]) -> str:
        return "|" + "".join(f" {c} |" if str(c) else " |" for c in cells)

    return [line(header), line(["---"] * len(header)), *(line(r) for r in rows)]


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def row_cells(result: dict[str, Any]) -> list[list[Any]]:
    """One row of :data:`ROW_HEADER` per predicted 4-GPU label."""
    return [
        [r["gpu"] + ("" if r["device_seen"] else " (never trained on)"), r["model"],
         r["layout"], r["global_batch_size"], _ms(r["true_ms"]), _ms(r["scaledl_ms"]),
         _ms(r["compute_ms"]), f"{r['tp_allreduce_ms']:.1f}", f"{r['p2p_ms']:.1f}",
         f"{r['step_ms']:.1f}", _ms(r["neusight_ms"]), pct(r["scaledl_re"]),
         "n/a" if r["neusight_re"] is None else pct(r["neusight_re"])]
        for r in result["rows"]
    ]  # fmt: skip


def kind_cells(summary: dict[str, Any]) -> list[list[Any]]:
    """One row of :data:`KIND_HEADER` per layout kind, then all rows."""
    parts = [*summary["per_layout"].items(), ("all", summary["overall"])]
    rows = []
    for name, s in parts:
        c = s["paired"]
        ours = "n/a" if s["mre_scaledl"] is None else pct(s["mre_scaledl"])
        theirs = "n/a" if s["mre_neusight"] is None else pct(s["mre_neusight"])
        if "skipped" in c:
            rows.append([name, s["n"], ours, theirs, "", "", c["skipped"]])
            continue
        rows.append(
            [name, s["n"], ours, theirs, f"{100 * c['mre_difference']:+.1f} pt",
             f"{100 * c['ci_low']:+.1f} to {100 * c['ci_high']:+.1f}", c["verdict"]]
        )  # fmt: skip
    return rows


def ranking_line(ranking: dict[str, Any]) -> str:
    """The ranking of the layouts of one run, in words: pairs each predictor ordered as measured.

    Args:
        ranking: :func:`scaledl.evaluation.gpu_layouts.layout_ranking`.

    Returns:
        One sentence: the totals, then per group (GPU, model, global batch).
    """
    groups = "; ".join(
        f"{g['gpu']} {g['model']} global batch {g['global_batch_size']} "
        f"({' < '.join(g['layouts'])} measured): ScaleDL {g['scaledl_right']}/{g['pairs']}, "
        f"NeuSight {g['neusight_right']}/{g['neusight_pairs']}"
        for g in ranking["groups"]
    )
    return (
        "Ranking (the planner's question: which layout of one run is faster), pairs of layouts "
        f"ordered as measured: ScaleDL {ranking['scaledl_right']} of {ranking['pairs']}, "
        f"NeuSight {ranking['neusight_right']} of {ranking['neusight_pairs']} ({groups})."
    )


def gpu_layouts_markdown(result: dict[str, Any]) -> str:
    """The block's Markdown (without markers).

    Args:
        result: ``docs/results/gpu_layouts.json`` (an ``evaluate_layout_rows`` result, with
            ``n_training_workloads``).

    Returns:
        Markdown: what was compared, the per-row table, the per-kind paired table and the
        targets, every number from ``result``.
    """
    n = result["summary"]["overall"]["n"]
    lines = [
        f"Data: {result['label_source']}. ScaleDL: the GPU predictor fitted on the "
        f"{result['n_training_workloads']} single-GPU workloads only, per rank on the sharded or "
        "staged shapes, collectives fitted on Vidur's NCCL all-reduces of the GPU's DGX system, "
        "Megatron's FP32 Adam step from memory traffic, composed by `scaledl/parallel/megatron.py` "
        f"(evaluated by `scaledl/evaluation/gpu_layouts.py`). Peer: {result['peer_source']}.",
        "",
        *_table(ROW_HEADER, row_cells(result)),
        "",
        f"Paired on the same {n} rows (ScaleDL minus NeuSight, 95% BCa bootstrap interval over "
        "rows; with 3-4 rows per layout the intervals are wide):",
        "",
        *_table(KIND_HEADER, kind_cells(result["summary"])),
        "",
        *_table(
            ["target (4 GPUs)", "measured", "reached"],
            [
                [t.text, t.measured, reached_text(t.met, markdown=True)]
                for t in target_results(result["targets"])
            ],
        ),  # fmt: skip
    ]
    if "ranking" in result:
        lines += ["", ranking_line(result["ranking"])]
    if result.get("not_modelled"):
        lines += ["", f"Not predicted: {'; '.join(result['not_modelled'])}."]
    if result.get("unmatched"):
        lines += ["", f"No NeuSight prediction: {', '.join(result['unmatched'])}."]
    return "\n".join(lines)
