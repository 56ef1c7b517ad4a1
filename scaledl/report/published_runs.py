"""The HTML report section of the published-runs evaluation (``--report FILE``).

Every protocol's table, the paired intervals, the layout ranking per group, the noise floor,
targets, decisions and the refused rows, from a
:class:`~scaledl.evaluation.published_runs.PublishedRunsResult`.
"""

from __future__ import annotations

from scaledl.evaluation.published_runs import METHODS, PublishedRunsResult
from scaledl.evaluation.published_runs_few_shot import FEW_SHOT_METHODS, FewShotK
from scaledl.io.render import render
from scaledl.report.blocks.published_runs import (
    FEW_SHOT_NAMES,
    METHOD_NAMES,
    _comparisons,
    _taus,
    few_shot_table,
    few_shot_text,
)
from scaledl.report.formatting import pct, reached_text

TITLES = {
    "leave_one_source_out": "Leave one source out (MRE per held-out source)",
    "leave_one_generation_out": "Leave one GPU generation out",
    "largest_held_out": "Largest held out (models by parameters, jobs by GPU count)",
}


def _mfus(group) -> str:
    return f"{pct(group.mfu['fixed_mfu'], 0)} / {pct(group.mfu['fixed_mfu_precision'], 0)}"


def _signed(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2f}"


def _few_shot_sources(k_result: FewShotK) -> dict:
    """One ``k``'s per-source table: MRE (10th-90th percentile over draws) and the factors."""
    header = ["held-out source", "scored rows", *(FEW_SHOT_NAMES[m] for m in FEW_SHOT_METHODS),
              "composed factor", "ScaleDL factor"]  # fmt: skip
    rows = [
        [name, s.scored,
         *(f"{pct(s.mre[m])} ({pct(s.mre_p10[m], 0)}-{pct(s.mre_p90[m], 0)})"
           for m in FEW_SHOT_METHODS),
         f"{s.scale['composed']:.2f}", f"{s.scale['scaledl']:.2f}"]
        for name, s in k_result.sources.items()
    ]  # fmt: skip
    return {"k": k_result.k, "header": header, "rows": rows}


def published_runs_html(result: PublishedRunsResult) -> str:
    """A self-contained HTML page of ``result``."""
    protocols = []
    for name, p in result.protocols.items():
        header = ["held out", "rows (scored)", *(METHOD_NAMES[m] for m in METHODS),
                  "MFU (bf16 / precision peak)", "correction"]  # fmt: skip
        rows = [[g_name, f"{g.answered} ({g.scored})", *(pct(g.mre[m]) for m in METHODS),
                 _mfus(g), g.correction] for g_name, g in p.groups.items()]  # fmt: skip
        rows.append(["mean", "", *(pct(p.mean_mre[m]) for m in METHODS), "", ""])
        rows.append(["max", "", *(pct(p.max_mre[m]) for m in METHODS), "", ""])
        bias = [[g_name, *(_signed(g.median_log_ratio[m]) for m in METHODS)]
                for g_name, g in p.groups.items()]  # fmt: skip
        protocols.append({"title": TITLES.get(name, name), "header": header, "rows": rows,
                          "comparisons": _comparisons(result, name),
                          "bias_header": ["held out", *(METHOD_NAMES[m] for m in METHODS)],
                          "bias": bias})  # fmt: skip
    few_header, few_rows = few_shot_table(result)
    fmt = lambda t: "n/a" if t is None else f"{t:.2f}"  # noqa: E731
    c = result.coverage
    return render(
        "published_runs_section.html.j2",
        coverage=(f"{c.answered} of {c.with_architecture} rows with an architecture answered "
                  f"({pct(c.answered_share)}; {c.csv_rows} CSV rows), {c.scored} scored."),
        protocols=protocols,
        few_shot={"text": few_shot_text(result), "decision": result.few_shot.decision,
                  "header": few_header, "rows": few_rows,
                  "sources": [_few_shot_sources(r) for r in result.few_shot.results]},
        ranking_text=(
            f"Mean Kendall tau-b over the {len(result.ranking.groups)} (source, model, GPU "
            f"count) groups: {_taus(result.ranking.mean_tau)}; over the "
            f"{result.ranking.groups_same_hardware} groups that also share GPU, precision and "
            f"sequence length: {_taus(result.ranking.mean_tau_same_hardware)}."
        ),
        ranking={"header": ["group", "layouts", *(METHOD_NAMES[m] for m in METHODS)],
                 "rows": [[g.group, g.layouts, *(fmt(g.tau[m]) for m in METHODS)]
                          for g in result.ranking.groups]},
        noise={"header": ["source", "configs", "rows", "spread min", "median", "max",
                          "leave-one-out MRE"],
               "rows": [[s, n.configs, n.rows, pct(n.spread_min), pct(n.spread_median),
                         pct(n.spread_max), pct(n.loo_mre)]
                        for s, n in result.noise_floor.items()]},
        targets=[[t.text, t.measured, reached_text(t.met)] for t in result.targets],
        decisions=list(result.decisions.items()),
        refused=result.coverage.refused_rows,
        runtime=", ".join(f"{k} {v:.0f} s" for k, v in result.seconds.items()),
    )  # fmt: skip
