"""The "LLM training at scale" results block, rendered from ``docs/results/published_runs.json``.

``scaledl evaluate published-runs --readme docs/results/published-runs.md`` writes both,
``scaledl docs render`` the block alone (:mod:`scaledl.report.blocks.registry`). Pure functions
of the result.
"""

from __future__ import annotations

from scaledl.evaluation.published_runs import METHODS, PublishedRunsResult
from scaledl.evaluation.published_runs_few_shot import FEW_SHOT_METHODS, FewShotK
from scaledl.report.formatting import pct, reached_text

#: Column names of the methods in the tables.
METHOD_NAMES = {
    "fixed_mfu": "fixed MFU (bf16 peak)",
    "fixed_mfu_precision": "fixed MFU (precision peak)",
    "roofline": "roofline",
    "composed": "composed",
    "scaledl": "ScaleDL",
    "scaledl_no_edges": "no edges",
}
#: Column names of the few-shot protocol's methods (adds the pooled fixed-MFU rules).
FEW_SHOT_NAMES = METHOD_NAMES | {
    "fixed_mfu": "fixed MFU on the k rows (bf16 peak)",
    "fixed_mfu_precision": "fixed MFU on the k rows (precision peak)",
    "fixed_mfu_pooled": "fixed MFU on others + k rows (bf16 peak)",
    "fixed_mfu_precision_pooled": "fixed MFU on others + k rows (precision peak)",
}


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _protocol_table(result: PublishedRunsResult, protocol: str, label: str) -> list[str]:
    p = result.protocols[protocol]
    noise = result.noise_floor
    header = [
        label,
        "rows (scored)",
        *(METHOD_NAMES[m] for m in METHODS),
        "MFUs fitted (bf16 / precision peak)",
    ]
    if protocol == "leave_one_source_out":
        header.append("re-publication noise")
    lines = [_line(header), _line(["---"] * len(header))]
    for name, g in p.groups.items():
        mfus = f"{pct(g.mfu['fixed_mfu'], 0)} / {pct(g.mfu['fixed_mfu_precision'], 0)}"
        cells = [name, f"{g.answered} ({g.scored})", *(pct(g.mre[m]) for m in METHODS), mfus]
        if protocol == "leave_one_source_out":
            n = noise.get(name)
            cells.append("none" if n is None else f"{pct(n.loo_mre)} ({n.configs} configs)")
        lines.append(_line(cells))
    tail = [""] * (2 if protocol == "leave_one_source_out" else 1)
    lines.append(_line(["**mean**", "", *(f"**{pct(p.mean_mre[m])}**" for m in METHODS), *tail]))
    lines.append(_line(["max", "", *(pct(p.max_mre[m]) for m in METHODS), *tail]))
    return lines


def _taus(tau: dict) -> str:
    return ", ".join(
        f"{METHOD_NAMES[m]} {'n/a' if tau[m] is None else f'{tau[m]:.2f}'}" for m in METHODS
    )


def _comparisons(result: PublishedRunsResult, protocol: str) -> str:
    parts = [
        f"{METHOD_NAMES[c.method_a]} - {METHOD_NAMES[c.method_b]} {100 * c.mre_difference:+.1f} "
        f"points [{100 * c.ci_low:+.1f}, {100 * c.ci_high:+.1f}] ({c.verdict})"
        for c in result.protocols[protocol].comparisons
    ]
    return "; ".join(parts)


def _versus(k_result: FewShotK, method: str) -> str:
    """``ratio x; difference [interval] (verdict)`` of ``method`` against the baseline."""
    c = next(
        c for c in k_result.comparisons
        if c.method_a == method and c.method_b == k_result.baseline
    )  # fmt: skip
    ratio = k_result.ratio[method]
    return (
        f"{'n/a' if ratio is None else f'{ratio:.2f}x'}; {100 * c.mre_difference:+.1f} points "
        f"[{100 * c.ci_low:+.1f}, {100 * c.ci_high:+.1f}] ({c.verdict})"
    )


def few_shot_table(result: PublishedRunsResult) -> tuple[list[str], list[list[str]]]:
    """The few-shot protocol's ``k`` x method mean MRE with the ratios to the strongest rule.

    Returns:
        ``(header, rows)``: one row per ``k``.
    """
    header = ["k", *(FEW_SHOT_NAMES[m] for m in FEW_SHOT_METHODS), "strongest fixed-MFU rule",
              "ScaleDL vs it", "composed vs it", "ScaleDL - composed"]  # fmt: skip
    rows = []
    for r in result.few_shot.results:
        vs = next(c for c in r.comparisons if (c.method_a, c.method_b) == ("scaledl", "composed"))
        rows.append([
            str(r.k), *(pct(r.mean_mre[m]) for m in FEW_SHOT_METHODS), FEW_SHOT_NAMES[r.baseline],
            _versus(r, "scaledl"), _versus(r, "composed"),
            f"{100 * vs.mre_difference:+.1f} points [{100 * vs.ci_low:+.1f}, "
            f"{100 * vs.ci_high:+.1f}] ({vs.verdict})",
        ])  # fmt: skip
    return header, rows


def few_shot_text(result: PublishedRunsResult) -> str:
    """The sentence that introduces the few-shot table."""
    f = result.few_shot
    ks = ", ".join(str(r.k) for r in f.results)
    return (
        f"With a few runs of the held-out stack (`few_shot_source`): for every held-out source, "
        f"k = {ks} of its scored rows known ({f.draws} seeded draws per k), scored on its other "
        "rows only; roofline, composed and ScaleDL (its correction that of the "
        "leave-one-source-out fold) times one factor per source, the geometric mean of measured / "
        "predicted on the k rows; the fixed-MFU rules with their MFU fitted on the k rows the "
        "same way, or on the other sources plus the k rows. Mean over sources of the mean over "
        "draws; paired on the same rows of the same draws (95% BCa interval, rows weighted so "
        "the MREs are these means) against the strongest of the four fixed-MFU rules at that k. "
        "One factor per source leaves the ranking of layouts within a source unchanged: the "
        "layout ranking below holds for it."
    )


def published_runs_markdown(result: PublishedRunsResult) -> str:
    """The block's Markdown (without markers).

    Coverage, the per-source table, the other protocols, paired intervals, ranking and targets,
    every number from ``result``.
    """
    c = result.coverage
    refused = ", ".join(f"{reason}: {n}" for reason, n in c.refused.items()) or "none"
    lines = [
        f"Published step times of LLM training (`external/scale_runs/`, 6 sources, "
        f"{c.csv_rows} rows): {c.answered} of the {c.with_architecture} rows with an "
        f"architecture answered ({pct(c.answered_share)}), {c.scored} of them with a measured "
        f"step and scored. Refused: {refused}.",
        "",
        "MRE per held-out source (leave one source out; each method fitted on the other five "
        "only; noise: MRE of a re-published configuration against its other publications):",
        "",
        *_protocol_table(result, "leave_one_source_out", "held-out source"),
        "",
    ]
    if "leave_one_generation_out" in result.protocols:
        lines += [*_protocol_table(result, "leave_one_generation_out", "held-out GPU generation"),
                  ""]  # fmt: skip
    if "largest_held_out" in result.protocols:
        lines += [*_protocol_table(result, "largest_held_out", "largest held out"), ""]
    tau = result.ranking.mean_tau
    lines += [
        f"Paired on the same rows (leave one source out, 95% BCa interval, rows weighted by "
        f"1/rows of their source): {_comparisons(result, 'leave_one_source_out')}. ScaleDL's "
        f"mean MRE is {result.ratio_to_fixed_mfu:.2f}x the stronger fitted fixed-MFU rule's "
        f"({METHOD_NAMES[result.ratio_baseline]}).",
        "",
        few_shot_text(result),
        "",
        _line(few_shot_table(result)[0]),
        _line(["---"] * len(few_shot_table(result)[0])),
        *(_line(row) for row in few_shot_table(result)[1]),
        "",
        f"Layout ranking (Kendall tau-b of seconds per token, held out; mean over the "
        f"{len(result.ranking.groups)} groups of >= 3 configurations of one source, model and GPU "
        f"count): {_taus(tau)}; over the {result.ranking.groups_same_hardware} groups that also "
        f"share GPU, precision and sequence length: "
        f"{_taus(result.ranking.mean_tau_same_hardware)}.",
        "",
        _line(["target (leave one source out)", "measured", "reached"]),
        _line(["---"] * 3),
        *(
            _line([t.text, t.measured, reached_text(t.met, markdown=True)]) for t in result.targets
        ),  # fmt: skip
        "",
        f"Runtime of the command: {result.seconds['total']:.0f} s.",
    ]
    return "\n".join(lines)
