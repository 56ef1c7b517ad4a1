"""The layouts page's block, rendered from ``docs/results/layouts.json``.

``scaledl evaluate-layouts --readme docs/results/layouts.md`` writes both, ``scaledl docs
render`` the block alone (:mod:`scaledl.report.blocks.registry`).
"""

from __future__ import annotations

import datetime as dt

import numpy as np

from scaledl.evaluation.targets import TargetResult, target, target_results
from scaledl.report.formatting import pct


def _interval(c: dict | None) -> str:
    if not c:
        return "n/a"
    return (
        f"{100 * c['mre_difference']:+.1f} [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}]"
        f" ({c['verdict']})"
    )


def _value(t: TargetResult, value: float) -> str:
    """A tau with two decimals, an MRE as a percentage."""
    return f"{value:.2f}" if t.name == "layouts_tau" else pct(value)


def layouts_markdown(result: dict) -> str:
    """The block's Markdown (without markers) from an :func:`evaluate_layouts` result.

    Args:
        result: the result (``docs/results/layouts.json``).

    Returns:
        Markdown: the targets table (the headline variant) and those of each repeated
        profile (``repeats``), every profile's targets side by side when there are further
        profiles (``across``), one row per held-out kind and the ranking per model.
    """
    n, head = result["n_by_kind"], result["headline"]
    lines = [
        f"Layouts profiled ({result['dataset']}): {n['ddp']} data-parallel, {n['fsdp']} "
        f"sharded (ZeRO-1/2, FSDP), {n['tp']} tensor-parallel, {n['pp']} pipeline workloads; "
        "each layout kind held out in turn, every model of a fold fitted on the other kinds. "
        f"Targets judged on `{head}`, the product's layout recipe.",
        "",
        "| target | value | target | |",
        "| --- | --- | --- | --- |",
    ]
    for t in target_results(result["targets"]):
        cmp = target(t.name).comparator
        verdict = "met" if t.met else "not met"
        value, bound = _value(t, t.value), _value(t, t.threshold)
        lines.append(f"| {t.text} | {value} | {cmp} {bound} | {verdict} |")
    for rep in result.get("repeats", []):
        values = "; ".join(
            f"{t.text.replace('leave-one-layout-out MRE, ', '')} "
            f"{_value(t, t.value)} ({'met' if t.met else 'not met'})"
            for t in target_results(rep["targets"], "repeats.targets")
        )
        lines += ["", f"The same on another profile of these workloads ({rep['dataset']}, "
                      f"`{rep['headline']}`): {values}."]  # fmt: skip
        agreement = rep.get("measured_tau")
        if agreement and agreement["worst"] is not None:
            per_model = ", ".join(f"{m['model']} {_tau(m['tau'])}" for m in agreement["models"])
            lines[-1] += (
                " Kendall tau between the two profiles' *measured* iteration times (the ranking"
                f" target's resolution on these labels): worst model {agreement['worst']:.2f}"
                f" ({per_model})."
            )
    lines += _profiles_lines(result)
    lines += ["", "| held out | workloads | composed MRE | corrected MRE "
              "| corrected - composed [95% CI] |", "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for kind, f in result["folds"].items():
        if kind != "ddp":
            lines.append(
                f"| {kind} | {f['n_workloads']} | {pct(f['mre_composed'])} | "
                f"{pct(f['mre_corrected'])} | {_interval(f.get('corrected_vs_composed'))} |"
            )
    models = result["ranking"]["models"]
    lines += ["", "| Kendall tau | " + " | ".join(m["model"] for m in models) + " |",
              "| --- |" + " --- |" * len(models)]  # fmt: skip
    for name in ("composed", "corrected"):
        taus = " | ".join(_tau(m[f"tau_{name}"]) for m in models)
        lines.append(f"| {head}, {name} | {taus} |")
    return "\n".join(lines)


def _window(measured_utc: list[str] | None) -> str:
    """``YYYY-MM-DD HH:MM-HH:MM`` from a profile's ``[first start, last end]`` (ISO 8601)."""
    if not measured_utc:
        return "n/a"
    start, end = (dt.datetime.fromisoformat(t) for t in measured_utc)
    return f"{start:%Y-%m-%d %H:%M}-{end:%H:%M}"


def _short(name: str) -> str:
    return (
        "worst tau"
        if name.startswith("Kendall")
        else name.replace("leave-one-layout-out MRE, ", "")
    )


def _profiles_lines(result: dict) -> list[str]:
    """Every profile's targets in one table and how many profiles meet each (``across``).

    Rendered only when the result has ``across`` profiles (``scaledl evaluate-layouts
    --across``): the main profile, each repeat, each further profile; the targets' spread over
    them is the day-to-day spread of the product's layout figures.
    """
    if not result.get("across"):
        return []
    profiles = [result, *result.get("repeats", []), *result["across"]]
    judged = [target_results(p["targets"]) for p in profiles]
    names = [t.text for t in judged[0]]
    header = ["profile", "measured (UTC)", *map(_short, names),
              "measured tau vs the main profile", "targets met"]  # fmt: skip
    lines = ["", "The recipe's targets on every profile of these workloads (each evaluated "
             "alone; `--repeat` and `--across`):", "",
             "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]  # fmt: skip
    for prof, entries in zip(profiles, judged, strict=True):
        by_text = {t.text: t for t in entries}
        cells = [_value(by_text[n], by_text[n].value) if n in by_text else "n/a" for n in names]
        agreement = prof.get("measured_tau")
        tau = "-" if prof is result else _tau((agreement or {}).get("worst"))
        met = sum(bool(t.met) for t in entries)
        lines.append(
            f"| {prof['dataset']} | {_window(prof.get('measured_utc'))} | "
            + " | ".join(cells)
            + f" | {tau} | {met} of {len(entries)} |"
        )
    summary = []
    for first in judged[0]:
        got = [t for entries in judged for t in entries if t.text == first.text]
        values = sorted(t.value for t in got)
        summary.append(
            f"{_short(first.text)} met on {sum(bool(t.met) for t in got)} of {len(got)} (median "
            f"{_value(first, float(np.median(values)))}, {_value(first, values[0])}-"
            f"{_value(first, values[-1])})"
        )
    lines += ["", f"Over these {len(profiles)} profiles: " + "; ".join(summary) + "."]
    return lines


def _tau(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
