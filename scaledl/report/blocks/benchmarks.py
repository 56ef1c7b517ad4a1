"""The benchmarks page's block, rendered from ``benchmarks/results/*.json``.

Every figure of the block comes from a result file a benchmark wrote; a benchmark whose file is
missing is listed as not run, and a file without a field the block needs is an error naming the
file and the field. ``make bench`` ends with ``scaledl docs render --block benchmarks``
(:mod:`scaledl.report.blocks.registry`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from scaledl.io.safe import read_json
from scaledl.report.formatting import pct


class BenchmarkResultError(ValueError):
    """A result file lacks a field the block needs."""


class BenchmarkResult:
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
            return BenchmarkResult(self.path, value, f"{self.prefix}{dotted}.")
        return value

    def __iter__(self):
        return iter(self.data)

    def items(self):
        """The fields of this level, as ``dict.items`` (values unchecked)."""
        return self.data.items()

    def get(self, key: str, default=None):
        """A field that may be absent, as ``dict.get``."""
        return self.data.get(key, default)


def _yes(flag: bool | None) -> str:
    return {True: "met", False: "not met", None: "n/a"}[flag]


def _design(r: BenchmarkResult) -> str:
    q = r["quick_preset"]
    return (
        f"D-optimal exchange (`bench_design.py`): {r['n_choose']} of {r['n_candidates']:,} "
        f"candidates, {r['n_terms']} model terms, {r['seconds']:.1f} s (target "
        f"{r['target_seconds']:.0f} s: {_yes(r['within_target'])}); log det {r['log_det']:.1f} "
        f"against a random-subset median of {r['random_median_log_det']:.1f} (D-efficiency "
        f"{r['d_efficiency']:.2f} vs {r['random_median_d_efficiency']:.2f}). Quick preset: "
        f"tracing its {q['n_candidates']:,} candidates {q['trace_seconds']:.1f} s, then "
        f"{q['n_workloads']} chosen in {q['seconds']:.1f} s (best of {q['n_starts']} starts); "
        f"matched criterion {q['doptimal_matched_criterion']:.2f} (random "
        f"{q['random_matched_criterion']:.2f}, Latin hypercube {q['lhs_matched_criterion']:.2f});"
        f" response-surface log det {q['doptimal_log_det']:.1f} (random "
        f"{q['random_log_det']:.1f}, Latin hypercube {q['lhs_log_det']:.1f})."
    )


def _minutes(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} min"


def _points(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} points"


#: Figures of the profiling table: key -> (name, formatter).
_PROFILING_ROWS = {
    "label_mre_between_runs": ("label MRE between two separate runs", pct),
    "label_mre_between_runs_world_size_1": ("... world size 1", pct),
    "label_mre_between_runs_world_size_2": ("... world size 2", pct),
    "design_share_compared": ("share of the design compared", pct),
    "kept_share_min": ("parts kept (worse run)", pct),
    "profiling_minutes_max": ("quick-preset profiling (slower run)", _minutes),
    "make_run_minutes_max": ("`make run` (slower run, installs excluded)", _minutes),
    "headline_id_difference_points": ("headline ID MRE, difference between runs", _points),
    "headline_ood_difference_points": ("headline LOFO MRE, difference between runs", _points),
}


def _profiling(r: BenchmarkResult) -> str:
    m, t, before, reached = r["measured"], r["targets"], r["before"], r["reached"]
    cross, chosen = r["cross_run"], r["label_candidate"]
    lines = [
        f"Profiling on a drifting host (`bench_profiling.py`, {r['mode']}, "
        f"{cross['n_workloads']} of {r['workloads']} quick-design workloads in both runs, "
        f"{r['profiling_settings.repeats']} launches each, runs {r['gap_minutes']:.0f} min "
        f"apart; label: {chosen}):",
        "",
        "| figure | before | now | target | |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key, (name, fmt) in _PROFILING_ROWS.items():
        cmp = ">=" if key in ("design_share_compared", "kept_share_min") else "<="
        lines.append(
            f"| {name} | {fmt(before.get(key))} | {fmt(m[key])} | {cmp} {fmt(t[key])} | "
            f"{_yes(reached[key])} |"
        )
    candidates = ", ".join(f"{name} {pct(c['mre'])}" for name, c in cross["candidates"].items())
    versus = "; ".join(
        f"{name} {100 * c['mre_difference']:+.1f} points [{100 * c['ci_low']:+.1f}, "
        f"{100 * c['ci_high']:+.1f}] ({c['verdict']})"
        for name, c in cross["comparisons"].items()
    )
    lines += ["", f"Label candidates, MRE between the runs: {candidates}. Paired against raw: "
              f"{versus}."]  # fmt: skip
    runs = ", ".join(
        f"{name}: {run['kept']} of {run['parts']} parts kept, {run['remeasured_parts']} "
        f"re-measured, launch MRE {pct(run['launch_mre_corrected'])} corrected vs "
        f"{pct(run['launch_mre_raw'])} raw"
        for name, run in r["runs"].items()
    )
    lines += ["", f"Per run: {runs}."]
    heads = r["headlines"]
    if len(heads) == 2 and all(h is not None for h in heads):
        lines += [
            "",
            f"Headline ScaleDL iteration MRE of the two runs (A / B): in-distribution "
            f"{pct(heads[0]['id_mre'])} / {pct(heads[1]['id_mre'])}, leave-one-family-out "
            f"{pct(heads[0]['ood_mre'])} / {pct(heads[1]['ood_mre'])}; `make run` "
            + " / ".join(_minutes(x) for x in r["make_run_minutes"])
            + " (installs excluded).",
        ]
    if r.get("dagster_vs_cli") is not None:
        d = r["dagster_vs_cli"]
        lines += [
            "",
            f"Dagster vs CLI: {d['n_workloads']} workloads of run B profiled again with "
            f"`scaledl profile`: CLI / Dagster label "
            f"{d['corrected.mean_ratio_cli_over_dagster']:.3f}"
            f" (95% CI {d['corrected.ci95'][0]:.3f}-{d['corrected.ci95'][1]:.3f}, corrected; "
            f"raw {d['raw.mean_ratio_cli_over_dagster']:.3f}): "
            f"{'systematic' if d['corrected.systematic'] else 'no systematic difference'}.",
        ]
    return "\n".join(lines)


def _drift(r: BenchmarkResult) -> str:
    parts = []
    for name, w in r["workloads"].items():
        phases, fit = w["slow_phases"], w["explained_by_probes"]
        per_type = ", ".join(
            f"{t} {f['r2']:.2f}" for t, f in w["explained_by_probes_per_layer_type"].items()
        )
        parts.append(
            f"{name}: p50 / p95 / max label {w['label_ratio_p50']:.2f} / "
            f"{w['label_ratio_p95']:.2f} / {w['label_ratio_max']:.2f} x quiet; "
            f"{phases['count']} slow phases (> 5%), median {phases['median_s']:.0f} s, longest "
            f"{phases['longest_s']:.0f} s, {pct(phases['share_of_time'])} of the time; spread "
            f"of log labels below / above the median {w['lower_spread_log']:.3f} / "
            f"{w['upper_spread_log']:.3f} (noise only adds time: "
            f"{'yes' if w['noise_only_adds_time'] else 'no'}); probes explain R^2 "
            f"{fit['r2']:.2f} of the label (GEMM exponent {fit['gemm_exponent']:.2f}, memory "
            f"{fit['memory_exponent']:.2f}); per layer type R^2: {per_type}"
        )
    return (
        f"Host drift (`bench_drift.py`, {r['minutes']:.0f} min, a cycle every "
        f"{r['cycle_s']:.1f} s, one pinned core): " + "; ".join(parts) + "."
    )


def _predict(r: BenchmarkResult) -> str:
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


def _load(r: BenchmarkResult) -> str:
    imports = ", ".join(f"{k} {v:.1f} s" for k, v in r["import_self_seconds_by_package"].items())
    return (
        f"Predictor load (`bench_load.py`): `import scaledl; scaledl.load_predictor(...)` in a "
        f"fresh process, median of {r['repeats']} processes {r['load_seconds_median']:.1f} s "
        f"(target {r['load_target_seconds']:.0f} s: {_yes(r['load_within_target'])}; load "
        f"average {r['load_avg_1min']:.1f} on {r['cores']} cores); import time by package: "
        f"{imports}."
    )


def _predict_gpu(r: BenchmarkResult) -> str:
    return (
        f"GPU prediction (`bench_predict_gpu.py`): {r['n_workloads']:,} workloads "
        f"({r['architectures']} architectures, {len(r['gpus'])} GPUs, "
        f"{pct(r['unseen_gpu_share'])} on GPUs never trained on) in "
        f"{r['predict_seconds_warm']:.1f} s warm, {r['predict_seconds_cold']:.1f} s cold (target "
        f"{r['predict_target_seconds']:.0f} s warm: {_yes(r['predict_within_target_warm'])}); "
        f"fitted on {r['training_workloads']} imported workloads in {r['fit_seconds']:.0f} s."
    )


def _plan(r: BenchmarkResult) -> str:
    return (
        f"Planner (`bench_plan.py`): {r['n_candidates']} candidates planned in "
        f"{r['plan_seconds_cold']:.1f} s cold, {r['plan_seconds_warm']:.1f} s warm (target "
        f"{r['target_seconds']:.0f} s cold: {_yes(r['within_target_cold'])}); Pareto front of "
        f"{r['pareto_front_size']}, {r['in_domain_candidates']} candidates in domain."
    )


def _plan_layouts(r: BenchmarkResult) -> str:
    warm = ", ".join(f"{run['warm_s']:.1f}" for run in r["runs"])
    return (
        f"Layout planner (`bench_plan_layouts.py`): {r['n_candidates']:,} candidates (data x "
        f"tensor x pipeline x micro-batches x schedule x sharding x batch) planned in {warm} s "
        f"warm over {len(r['runs'])} runs (target {r['target_seconds']:.0f} s for "
        f"{r['target_candidates']:,}: {_yes(r['within_target'])}); {r['fitting_candidates']:,} "
        f"fit in memory, Pareto front of {r['pareto_front_size']}, a fastest layout for "
        f"{r['world_sizes_with_a_best_layout']} world sizes; layout recipe "
        f"`{r['layout_recipe']}`."
    )


def _plan_gpu_layouts(r: BenchmarkResult) -> str:
    warm = ", ".join(f"{run['warm_s']:.1f}" for run in r["runs"])
    cold = ", ".join(f"{run['cold_s']:.1f}" for run in r["runs"])
    fastest = ", ".join(f"{ws} {lay}" for ws, lay in
                        enumerate(r["fastest_layout_per_world_size"], start=1))  # fmt: skip
    return (
        f"GPU layout planner (`bench_plan_gpu_layouts.py`): {r['model']} on "
        f"{r['device_name'].split(':', 1)[-1]}, {r['n_candidates']:,} candidates (world sizes "
        f"1-8 x tensor x pipeline x micro-batches x schedule x batch, no sharding) composed by "
        f"`{r['layout_recipe']}` in {warm} s warm, {cold} s cold over {len(r['runs'])} runs "
        f"(target {r['target_seconds']:.0f} s warm: {_yes(r['within_target'])}); "
        f"{r['fitting_candidates']:,} fit in memory, Pareto front of {r['pareto_front_size']}; "
        f"fastest layout per world size: {fastest}."
    )


def _scale(r: BenchmarkResult) -> str:
    within, targets = r["within_target"], r["targets"]
    return (
        f"Prediction at planner scale (`bench_scale.py`, runs {r['predict_seconds_warm.runs']}): "
        f"{r['n_rows']:,} distinct workloads of the quick preset's space "
        f"({r['distinct_specs_less_dataset_size']:,} distinct less their dataset size) in "
        f"{r['predict_seconds_warm.median']:.1f} s warm, "
        f"{r['predict_seconds_cold.median']:.1f} s for the first call, peak "
        f"{r['predict_peak_gb']:.2f} GB (target {targets['predict_warm_s']:.0f} s and "
        f"{targets['peak_gb']:.0f} GB: {_yes(within['predict_warm'])}); streamed from CSV by "
        f"`scaledl predict` in a fresh process {r['predict_streamed_seconds.median']:.1f} s, "
        f"peak {r['predict_streamed_peak_gb']:.2f} GB. `scaledl plan` over "
        f"{r['plan_candidates']:,} candidates {r['plan_seconds.median']:.1f} s, peak "
        f"{r['plan_peak_gb']:.2f} GB (target {targets['plan_s']:.0f} s and "
        f"{targets['peak_gb']:.0f} GB: {_yes(within['plan'])}). A fresh process loading the "
        f"predictor and predicting {r['first_prediction_rows']:,} workloads: "
        f"{r['first_prediction_seconds_cache_warm.median']:.1f} s with the trace cache beside "
        f"the bundle filled, {r['first_prediction_seconds_cache_empty.median']:.1f} s with it "
        f"empty (target {targets['first_prediction_s']:.0f} s: "
        f"{_yes(within['first_prediction'])})."
    )


def _llm_plan(r: BenchmarkResult) -> str:
    runs = r["runs"]
    warm = " and ".join(f"{run['warm_s']:.1f} s" for run in runs)
    loads = ", ".join(f"{run['load_average_1min']:.1f}" for run in runs)
    return (
        f"LLM job planning (`bench_llm_plan.py`, `{r['job']}`): {r['combinations']:,} "
        f"combinations over {len(r['gpu_counts'])} GPU counts, {r['n_candidates']:,} valid "
        f"layouts ({r['refused.memory']:,} over memory, {r['composed_candidates']:,} composed) "
        f"planned in {warm} warm over {len(runs)} runs (target {r['target_seconds']:.0f} s for "
        f"{r['target_candidates']:,}: {_yes(r['within_target'])}; load average {loads} on "
        f"{r['cpu_count']} cores)."
    )


#: Result file -> renderer, in the block's order.
SECTIONS: dict[str, Callable[[BenchmarkResult], str]] = {
    "design.json": _design,
    "drift.json": _drift,
    "profiling.json": _profiling,
    "predict.json": _predict,
    "load.json": _load,
    "predict_gpu.json": _predict_gpu,
    "plan.json": _plan,
    "plan_layouts.json": _plan_layouts,
    "plan_gpu_layouts.json": _plan_gpu_layouts,
    "llm_plan.json": _llm_plan,
    "scale.json": _scale,
}


def read_benchmark_results(folder: Path) -> dict[str, BenchmarkResult | None]:
    """The result file of each benchmark of :data:`SECTIONS` in ``folder`` (``None``: not run).

    Raises:
        scaledl.io.safe.UnsafeInputError: a result file is not a regular file or not JSON.
    """
    return {
        name: BenchmarkResult(folder / name, read_json(folder / name))
        if (folder / name).exists() else None
        for name in SECTIONS
    }  # fmt: skip


def benchmark_markdown(results: dict[str, BenchmarkResult | None]) -> str:
    """The benchmarks page's block from :func:`read_benchmark_results`.

    Returns:
        Markdown: one paragraph (the profiling one with a table) per benchmark.

    Raises:
        BenchmarkResultError: a result file lacks a field the block needs.
    """
    parts = []
    for name, render in SECTIONS.items():
        result = results.get(name)
        if result is None:
            parts.append(f"* `{name}`: not run yet (`make bench` writes it).")
            continue
        parts.append("* " + render(result).replace("\n", "\n  ").replace("\n  \n", "\n\n"))
    return "\n".join(parts)
