"""Write the README's benchmark block from ``benchmarks/results/*.json`` (``make bench`` ends here).

Every figure of the block comes from a result file a benchmark wrote; a benchmark whose file is
missing is listed as not run, and a file without a field the block needs is an error naming the
file and the field. ``tests/test_benchmark_block.py`` renders the committed files again and
compares them with the README, so a figure typed into the block fails the suite.

Run: ``python benchmarks/readme_block.py [--check]`` (``--check``: exit 1 when the README block
differs from the rendered files, write nothing).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from scaledl.evaluation.summary import markers, read_block, replace_block

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
README = ROOT / "README.md"
BOUNDS = markers("benchmarks", "`make bench` (benchmarks/readme_block.py)")


class BenchmarkResultError(ValueError):
    """A result file lacks a field the README block needs."""


class _Result:
    """A result file's fields; a missing one raises :class:`BenchmarkResultError`."""

    def __init__(self, path: Path, data: dict, prefix: str = "") -> None:
        self.path, self.data, self.prefix = path, data, prefix

    def __getitem__(self, dotted: str):
        value = self.data
        for key in dotted.split("."):
            if not isinstance(value, dict) or key not in value:
                raise BenchmarkResultError(f"{self.path}: field {self.prefix + dotted!r} missing")
            value = value[key]
        if isinstance(value, dict):
            return _Result(self.path, value, f"{self.prefix}{dotted}.")
        return value

    def __iter__(self):
        return iter(self.data)

    def items(self):
        return self.data.items()

    def get(self, key: str, default=None):
        return self.data.get(key, default)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _yes(flag: bool | None) -> str:
    return {True: "met", False: "not met", None: "n/a"}[flag]


def _design(r: _Result) -> str:
    q = r["quick_preset"]
    return (
        f"D-optimal exchange (`bench_design.py`): {r['n_choose']} of {r['n_candidates']:,} "
        f"candidates, {r['n_terms']} model terms, {r['seconds']:.1f} s (target "
        f"{r['target_seconds']:.0f} s: {_yes(r['within_target'])}); log det {r['log_det']:.1f} "
        f"against a random-subset median of {r['random_median_log_det']:.1f} (D-efficiency "
        f"{r['d_efficiency']:.2f} vs {r['random_median_d_efficiency']:.2f}). Quick preset: "
        f"{q['n_workloads']} of {q['n_candidates']:,} candidates in {q['seconds']:.1f} s, log det "
        f"{q['doptimal_log_det']:.1f} (random {q['random_log_det']:.1f}, Latin hypercube "
        f"{q['lhs_log_det']:.1f})."
    )


def _profiling(r: _Result) -> str:
    m, t, before = r["measured"], r["targets"], r["before"]
    walls = ", ".join(f"{p} {r[f'passes.{p}.wall_s']:.0f} s" for p in r["passes"])
    guard = r["guard"]
    lines = [
        f"Profiling (`bench_profiling.py`, {r['workloads']} quick-design workloads, "
        f"{r['profiling_settings.repeats']} launches each; passes {walls}):",
        "",
        "| figure | before | now | target | |",
        "| --- | --- | --- | --- | --- |",
    ]
    names = {
        "label_reproducibility_mre": "label reproducibility, MRE between two passes",
        "label_reproducibility_mre_world_size_1": "... world size 1",
        "label_reproducibility_mre_world_size_2": "... world size 2",
        "median_instrumentation_overhead": "median instrumentation overhead",
        "max_accepted_deviation_from_quiet": "largest accepted label deviation, disturbed pass",
        "disturbed_flagged_or_remeasured_fraction": "disturbed parts re-measured or flagged",
    }
    for key, name in names.items():
        cmp = ">=" if key == "disturbed_flagged_or_remeasured_fraction" else "<="
        lines.append(
            f"| {name} | {_pct(before.get(key))} | {_pct(m[key])} | {cmp} {_pct(t[key])} | "
            f"{_yes(r['reached'][key])} |"
        )
    lines += [
        "",
        f"Before: the disturbed comparison ({_pct(before['label_reproducibility_mre_disturbed'])})"
        f" was two passes, one under load, nothing flagged. Now, pass C ran with a one-core busy "
        f"loop for {r['busy_loop.duration_s']:.0f} s: {guard['disturbed_parts']} parts overlapped "
        f"it, {guard['disturbed_flagged_or_remeasured']} were re-measured or flagged, "
        f"{guard['disturbed_still_flagged']} stayed flagged (quarantined). Median label "
        f"half-width {_pct(r['passes.A.median_label_halfwidth'])}, median label steps "
        f"{r['passes.A.median_label_steps']:.0f} (pass A).",
    ]
    return "\n".join(lines)


def _predict(r: _Result) -> str:
    fits = ", ".join(f"{k} {v:.1f} s" for k, v in r["fit_seconds"].items())
    return (
        f"Prediction (`bench_predict.py`): {r['n_workloads']:,} workloads in one batch, "
        f"{r['predict_seconds_warm']:.1f} s warm, {r['predict_seconds_cold']:.1f} s cold in a "
        f"fresh process (target {r['predict_target_seconds']:.0f} s: warm "
        f"{_yes(r['predict_within_target_warm'])}, cold {_yes(r['predict_within_target_cold'])}); "
        f"bundle load {r['bundle_load_seconds_fresh_process']:.1f} s in a fresh process, "
        f"{r['bundle_load_seconds_after_imports']:.1f} s after imports (target "
        f"{r['bundle_load_target_seconds']:.0f} s: {_yes(r['bundle_load_within_target'])}); "
        f"first prediction in a fresh process {r['first_prediction_seconds_fresh_process']:.1f} s."
        f" Fitting on the {r['training_workloads']} profiled workloads: {fits}."
    )


def _predict_gpu(r: _Result) -> str:
    return (
        f"GPU prediction (`bench_predict_gpu.py`): {r['n_workloads']:,} workloads "
        f"({r['architectures']} architectures, {len(r['gpus'])} GPUs, "
        f"{_pct(r['unseen_gpu_share'])} on GPUs never trained on) in "
        f"{r['predict_seconds_warm']:.1f} s warm, {r['predict_seconds_cold']:.1f} s cold (target "
        f"{r['predict_target_seconds']:.0f} s warm: {_yes(r['predict_within_target_warm'])}); "
        f"fitted on {r['training_workloads']} imported workloads in {r['fit_seconds']:.0f} s."
    )


def _plan(r: _Result) -> str:
    return (
        f"Planner (`bench_plan.py`): {r['n_candidates']} candidates planned in "
        f"{r['plan_seconds_cold']:.1f} s cold, {r['plan_seconds_warm']:.1f} s warm (target "
        f"{r['target_seconds']:.0f} s cold: {_yes(r['within_target_cold'])}); Pareto front of "
        f"{r['pareto_front_size']}, {r['in_domain_candidates']} candidates in domain."
    )


#: Result file -> renderer, in the block's order.
SECTIONS: dict[str, Callable[[_Result], str]] = {
    "design.json": _design,
    "profiling.json": _profiling,
    "predict.json": _predict,
    "predict_gpu.json": _predict_gpu,
    "plan.json": _plan,
}


def benchmark_markdown(results: Path = RESULTS) -> str:
    """The README's benchmark block from the result files in ``results``.

    Args:
        results: the folder ``make bench`` writes to.

    Returns:
        Markdown: one paragraph (the profiling one with a table) per benchmark, each with the
        date it ran.

    Raises:
        BenchmarkResultError: a result file lacks a field the block needs.
        json.JSONDecodeError: a result file is not JSON.
    """
    parts = []
    for name, render in SECTIONS.items():
        path = results / name
        if not path.exists():
            parts.append(f"* `{name}`: not run yet (`make bench` writes it).")
            continue
        text = render(_Result(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path,
                              json.loads(path.read_text())))  # fmt: skip
        parts.append("* " + text.replace("\n", "\n  ").replace("\n  \n", "\n\n"))
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    check = parser.parse_args().check
    block = benchmark_markdown()
    text = README.read_text()
    if check:
        if read_block(text, str(README), BOUNDS) != block:
            sys.exit(f"{README}: the benchmark block differs from {RESULTS}: run make bench")
        return
    README.write_text(replace_block(text, block, str(README), BOUNDS))
    print(f"{README}: benchmark block written from {RESULTS}")


if __name__ == "__main__":
    main()
