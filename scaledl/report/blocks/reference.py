"""The reference-dataset page's block, rendered from ``docs/results/reference.json``.

``scaledl evaluate-reference --readme docs/results/reference.md`` writes both, ``scaledl docs
render`` the block alone (:mod:`scaledl.report.blocks.registry`).
"""

from __future__ import annotations

from scaledl.evaluation.targets import target_results
from scaledl.report.formatting import pct


def _interval(c: dict | None) -> str:
    if not c:
        return "n/a"
    return (
        f"{100 * c['mre_difference']:+.1f} [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}]"
        f" ({c['verdict']})"
    )


def _curve_rows(curves: dict) -> list[str]:
    samplers = curves["samplers"]
    sizes = samplers["random"]["sizes"]
    head = "| sampler | " + " | ".join(f"{n} workloads" for n in sizes) + " |"
    rows = [head, "| --- |" + " --- |" * len(sizes)]
    for name, curve in samplers.items():
        cells = [
            f"{pct(m)} ± {pct(s)}" for m, s in zip(curve["mre_mean"], curve["mre_std"], strict=True)
        ]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return rows


def _family_interval_rows(ood: dict) -> list[str]:
    """Per left-out family: workloads, MRE, interval coverage [exact 95% CI], median width.

    A result written before the interval coverage was evaluated says so in one line.
    """
    if "intervals" not in ood:
        return [
            "Unseen-family interval coverage: not in this result (written before it was "
            "evaluated; rerun `scaledl evaluate-reference`)."
        ]
    iv = ood["intervals"]
    nominal = f"{iv['coverage']:.0%}"
    lines = [
        f"Unseen-family {nominal} intervals of ScaleDL (`scaledl/models/intervals.py`, "
        "family-conformal: each left-out family's intervals calibrated on the other families "
        "only, one score per family, the within-family "
        f"{nominal} quantile of the absolute log error; coverage of the iteration time with its "
        "exact 95% Clopper-Pearson interval):",
        "",
        "| left-out family | workloads | ScaleDL MRE | coverage [95% CI] | median width |",
        "| --- | --- | --- | --- | --- |",
    ]

    def cells(s: dict) -> str:
        width = (
            "unbounded" if s["median_relative_width"] is None else pct(s["median_relative_width"])
        )
        return (
            f"{pct(s['coverage'])} [{pct(s['coverage_ci_low'], 0)}, "
            f"{pct(s['coverage_ci_high'], 0)}] | {width}"
        )

    for family, by in iv["per_family"].items():
        s = by["scaledl"]["iteration"]
        mre = pct(ood["per_family"][family]["scaledl"]["mre"])
        lines.append(f"| {family} | {s['n']} | {mre} | {cells(s)} |")
    pooled = iv["pooled"]["scaledl"]["iteration"]
    lines.append(f"| every family, pooled | {pooled['n']} | {pct(ood['mean_mre']['scaledl'])} "
                 f"(mean) | {cells(pooled)} |")  # fmt: skip
    new = iv["new_family"]["scaledl"]
    if new["high_factor"] is None:
        lines += ["", f"A family never seen, calibrated on all {new['families']} families: the "
                  f"{nominal} interval is unbounded (too few families)."]  # fmt: skip
    else:
        lines += [
            "",
            f"A family never seen, calibrated on all {new['families']} families (as the "
            f"registered predictor is): {nominal} interval [{new['low_factor']:.2f}, "
            f"{new['high_factor']:.2f}] x the prediction, {pct(new['relative_width'])} of it "
            "wide"
            + (
                " (a normal prediction bound over the family scores: too few families for the "
                "conformal quantile)."
                if new.get("family_calibration") == "normal_prediction_bound"
                else "."
            ),
        ]
    return lines


def reference_markdown(result: dict) -> str:
    """The block's Markdown (without markers) from an :func:`evaluate_reference` result.

    Raises:
        KeyError: a section the block needs is missing (the message names the key).
    """
    ds = result["dataset"]
    idd, ood = result["in_distribution"], result["out_of_distribution"]
    curves, seq = result["learning_curves"], result["sequential"]
    lines = [
        f"Reference dataset: {ds['workloads']} workloads, {len(ds['families'])} families, world "
        f"sizes {', '.join(str(w) for w in ds['world_sizes'])} (fixed labels, "
        "`datasets/reference-cpu/DATASHEET.md`).",
        "",
        "| evaluation | ScaleDL | additive | ScaleDL - additive, points [95% CI] |",
        "| --- | --- | --- | --- |",
        f"| in distribution, {idd['folds']}-fold (each workload tested once) | "
        f"{pct(idd['methods']['scaledl']['mre'])} | {pct(idd['methods']['additive']['mre'])} | "
        f"{_interval(idd['comparison'])} |",
        f"| leave-one-family-out, mean over {ood['families']} families | "
        f"{pct(ood['mean_mre']['scaledl'])} | {pct(ood['mean_mre']['additive'])} | "
        f"{_interval(ood['comparison'])} |",
        "",
        *_family_interval_rows(ood),
        "",
        f"Learning curves of ScaleDL (MRE on {curves['test_size']} held-out workloads, mean ± sd "
        f"over {curves['seeds']} seeds, pool of {curves['pool_size']}):",
        "",
        *_curve_rows(curves),
        "",
        "| comparison (paired by seed) | difference, points [95% CI] |",
        "| --- | --- |",
    ]
    for c in curves["comparisons"]:
        lines.append(f"| {c['method_a']} vs {c['method_b']} | {_interval(c)} |")
    if curves.get("halving_full"):
        c = curves["halving_full"]
        lines.append(f"| {c['method_a']} vs {c['method_b']} (halving) | {_interval(c)} |")
    lines += [
        "",
        f"Sequential design: {seq['k']} workloads added to a base design, left-out family's MRE "
        f"over {seq['units']} (family, seed) units: base {pct(seq['mre_base'])}, sequential "
        f"{pct(seq['mre_sequential'])}, random {pct(seq['mre_random'])}; sequential - random "
        f"{_interval(seq['comparison'])}.",
        "",
        "| target | value | met |",
        "| --- | --- | --- |",
    ]
    for t in target_results(result["targets"]):
        met = {True: "yes", False: "no", None: "not evaluated"}[t.met]
        if t.ci_low is None:
            value = pct(t.value)
            if isinstance(t.threshold, tuple):
                value += f" (band {pct(t.threshold[0], 0)}-{pct(t.threshold[1], 0)})"
        else:
            value = f"{100 * t.value:+.1f} points [{100 * t.ci_low:+.1f}, {100 * t.ci_high:+.1f}]"
        lines.append(f"| {t.text} | {value} | {met} |")
    return "\n".join(lines)
