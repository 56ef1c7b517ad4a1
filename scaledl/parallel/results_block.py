"""The README's layouts block, rendered from ``docs/results/layouts.json``.

``scaledl evaluate-layouts --readme README.md`` writes both;
``tests/parallel/test_results_block.py`` renders the committed result again and compares it
with the README, so a figure typed into the block fails the suite.
"""

from __future__ import annotations

from scaledl.report.formatting import pct
from scaledl.report.summary import markers

BOUNDS = markers("layouts", "`scaledl evaluate-layouts --readme README.md`")


def _interval(c: dict | None) -> str:
    if not c:
        return "n/a"
    return (
        f"{100 * c['mre_difference']:+.1f} [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}]"
        f" ({c['verdict']})"
    )


def _value(name: str, value: float) -> str:
    return f"{value:.2f}" if name.startswith("Kendall") else pct(value)


def layouts_markdown(result: dict) -> str:
    """The block's Markdown (without markers) from an :func:`evaluate_layouts` result.

    Args:
        result: the result (``docs/results/layouts.json``).

    Returns:
        Markdown: the targets table, the per-kind table and the ranking line.
    """
    n = result["n_by_kind"]
    lines = [
        f"Layouts profiled ({result['dataset']}): {n['ddp']} data-parallel, {n['fsdp']} "
        f"sharded (ZeRO-1/2, FSDP), {n['tp']} tensor-parallel, {n['pp']} pipeline workloads. "
        "Layer-wise models fitted on the data-parallel ones only; each layout kind held out in "
        "turn.",
        "",
        "| target | value | target | |",
        "| --- | --- | --- | --- |",
    ]
    for t in result["targets"]:
        cmp = ">=" if t["name"].startswith("Kendall") else "<="
        verdict = "met" if t["met"] else "not met"
        value, target = _value(t["name"], t["value"]), _value(t["name"], t["target"])
        lines.append(f"| {t['name']} | {value} | {cmp} {target} | {verdict} |")
    lines += [
        "",
        "| held out | workloads | composed MRE | corrected MRE | corrected - composed [95% CI] |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kind, f in result["folds"].items():
        paired = _interval(f.get("corrected_vs_composed"))
        lines.append(
            f"| {kind} | {f['n_workloads']} | {pct(f['mre_composed'])} | "
            f"{pct(f['mre_corrected'])} | {paired} |"
        )
    for m in result["ranking"]["models"]:
        lines += [
            "",
            f"Ranking of {len(m['layouts'])} layouts of {m['model']}: Kendall tau "
            f"{_tau(m['tau_corrected'])} (composition alone {_tau(m['tau_composed'])}).",
        ]
    return "\n".join(lines)


def _tau(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
