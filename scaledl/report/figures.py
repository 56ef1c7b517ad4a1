"""Figures of the evaluation (matplotlib, Agg backend, PNG).

* ``headline.png``: ScaleDL's predicted vs measured iteration time on ID and left-out-family
  workloads with their calibrated intervals (:mod:`scaledl.report.headline`).
* ``pred_vs_measured.png``: predicted vs measured iteration time, log-log, one panel per method,
  ID split, with the ``y = x`` line.
* ``sweep.png``: epoch time of the sweep family versus batch size and versus sequence length:
  measured points and each method's predicted curve (methods trained on all data).
* ``ood_mre.png``: OOD (leave-one-family-out) iteration MRE per family, grouped bars per method.
* ``learning_curves.png``: iteration MRE versus training workloads per sampler, mean +- std band
  over seeds (dashed: the method's prior fitted on the same subsets).
* ``comparisons.png``: ScaleDL minus each other method (baselines and ablations) per split, with
  the paired 95% intervals (a forest plot; left of 0: ScaleDL has the lower MRE).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scaledl.evaluation.results import (  # noqa: E402
    LearningCurves,
    Metrics,
    OODErrors,
    Skipped,
    Sweep,
)
from scaledl.report.formatting import loglog_identity  # noqa: E402
from scaledl.report.headline import headline_figure  # noqa: E402


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def pred_vs_measured(predictions: pd.DataFrame, path: Path) -> Path:
    """Log-log scatter of predicted vs measured iteration seconds, one panel per method.

    Args:
        predictions: rows with ``method``, ``family``, ``true_iteration_s``,
            ``pred_iteration_s`` (one split).
        path: output PNG.

    Returns:
        ``path``.
    """
    methods = list(dict.fromkeys(predictions["method"]))
    fig, axes = plt.subplots(1, len(methods), figsize=(3.2 * len(methods), 3.2), squeeze=False)
    lo = predictions[["true_iteration_s", "pred_iteration_s"]].min().min() * 0.7
    hi = predictions[["true_iteration_s", "pred_iteration_s"]].max().max() * 1.4
    for ax, method in zip(axes[0], methods, strict=True):
        part = predictions[predictions["method"] == method]
        for family, g in part.groupby("family"):
            ax.scatter(g["true_iteration_s"], g["pred_iteration_s"], s=14, label=family)
        loglog_identity(ax, lo, hi, title=method, xlabel="measured iteration [s]")
    axes[0][0].set_ylabel("predicted iteration [s]")
    axes[0][-1].legend(fontsize=7)
    return _save(fig, path)


def sweep_figure(sweep: Sweep, path: Path) -> Path:
    """Epoch time vs batch size and vs sequence length: measured points, predicted curves.

    Args:
        sweep: the metrics' sweep section.
        path: output PNG.

    Returns:
        ``path``.
    """
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, (name, s) in zip(axes, sweep.sweeps.items(), strict=True):
        for method, ys in s.pred_epoch_s.items():
            ax.plot(s.values, ys, marker=".", label=method)
        ax.scatter(s.measured_values, s.measured_epoch_s, c="k", zorder=5, label="measured")
        ax.set_xscale("log", base=2)
        ax.set_xticks(s.values, [str(v) for v in s.values])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set(
            yscale="log",
            xlabel=name,
            ylabel="epoch time [s]",
            title=f"{sweep.family}: epoch time vs {name}",
        )
    axes[1].legend(fontsize=7)
    return _save(fig, path)


def ood_bars(ood: OODErrors, path: Path, methods: list[str] | None = None) -> Path:
    """Grouped bars of OOD iteration MRE per family and method.

    Args:
        ood: the metrics' leave-one-family-out split.
        path: output PNG.
        methods: the methods drawn (default: all).

    Returns:
        ``path``.
    """
    families = list(ood.per_family)
    methods = list(ood.mean) if methods is None else methods
    width = 0.8 / len(methods)
    x = np.arange(len(families) + 1)
    fig, ax = plt.subplots(figsize=(1.4 * len(x) + 2, 3.6))
    for k, method in enumerate(methods):
        values = [ood.per_family[f][method].mre for f in families]
        values.append(ood.mean[method].mre)
        ax.bar(x + (k - (len(methods) - 1) / 2) * width, values, width, label=method)
    ax.set_xticks(x, [*families, "mean"])
    ax.set(yscale="log", ylabel="iteration MRE (log scale)", title="Leave-one-family-out MRE")
    ax.legend(fontsize=7)
    return _save(fig, path)


def learning_curve_figure(curves: LearningCurves, path: Path, title: str = "") -> Path:
    """Mean +- std iteration MRE versus training workloads, one line per sampler.

    Args:
        curves: one method's learning curves.
        path: output PNG.
        title: figure title.

    Returns:
        ``path``.
    """
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for sampler, c in curves.samplers.items():
        mean, std = np.array(c.mre_mean), np.array(c.mre_std)
        (line,) = ax.plot(c.sizes, mean, marker="o", label=sampler)
        ax.fill_between(c.sizes, mean - std, mean + std, alpha=0.2)
        if c.prior_mre_mean is not None:
            ax.plot(c.sizes, c.prior_mre_mean, ls="--", color=line.get_color(),
                    label=f"{sampler}: prior")  # fmt: skip
    ax.set(xlabel="profiled training workloads", ylabel="test iteration MRE", title=title)
    ax.legend(fontsize=7)
    return _save(fig, path)


def comparison_forest(metrics: Metrics, path: Path) -> Path:
    """ScaleDL minus every other method per split: difference and 95% interval (forest plot).

    Args:
        metrics: the evaluation metrics (``significance``).
        path: output PNG.

    Returns:
        ``path``.
    """
    splits = {k: v for k, v in metrics.significance.splits.items() if "/" not in k}
    others = list(dict.fromkeys(
        c.method_b for s in splits.values() for c in s.comparisons if c.method_a == "scaledl"
    ))  # fmt: skip
    fig, ax = plt.subplots(figsize=(6.4, 0.35 * len(others) * len(splits) + 1.2))
    y, ticks, labels = 0, [], []
    for k, (key, split) in enumerate(splits.items()):
        for other in others:
            c = split.find("scaledl", other)
            if c is None:
                continue
            color = {"better": "tab:green", "worse": "tab:red"}.get(c.verdict, "tab:gray")
            ax.errorbar(100 * c.mre_difference, y, fmt="o", color=color,
                        xerr=[[100 * (c.mre_difference - c.ci_low)],
                              [100 * (c.ci_high - c.mre_difference)]])  # fmt: skip
            ticks.append(y)
            labels.append(f"{key}: vs {other}")
            y -= 1
        y -= 0.5 if k < len(splits) - 1 else 0
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(ticks, labels, fontsize=7)
    ax.set(xlabel="ScaleDL MRE minus other MRE [points], 95% paired interval")
    # A figure title: the long tick labels push the axes right, an axes title would be clipped.
    fig.suptitle("ScaleDL against each method (green: better, red: worse)", fontsize=10)
    return _save(fig, path)


def draw_all(metrics: Metrics, predictions: pd.DataFrame, folder: Path) -> dict[str, Path]:
    """Draw every figure the metrics allow.

    Args:
        metrics: the evaluation metrics.
        predictions: all per-workload predictions (``split`` column).
        folder: output folder.

    Returns:
        Figure key -> PNG path (keys ``headline``: ScaleDL with its intervals, when the
        predictions have interval bounds; ``pred_vs_measured``, ``sweep``, ``ood_mre``,
        ``comparisons``, ``learning_curves_<method>``) for the figures drawn. The headline and
        the scatter show the first model seed (the seed of the registered predictor, the one
        the intervals were calibrated for); the scatter and the bars the methods without
        ScaleDL's ablations.
    """
    folder = Path(folder)
    first = predictions[predictions["seed"] == predictions["seed"].min()]
    out = {}
    if "pred_iteration_s_low" in first and (first["method"] == "scaledl").any():
        out["headline"] = headline_figure(first, folder / "headline.png")
    main = metrics.main_methods
    shown = first[(first["split"] == "id") & first["method"].isin(main)]
    out["pred_vs_measured"] = pred_vs_measured(shown, folder / "pred_vs_measured.png")
    if not isinstance(metrics.sweep, Skipped):
        out["sweep"] = sweep_figure(metrics.sweep, folder / "sweep.png")
    if isinstance(metrics.splits.ood, OODErrors):
        out["ood_mre"] = ood_bars(metrics.splits.ood, folder / "ood_mre.png", main)
    if any(c.method_a == "scaledl" for s in metrics.significance.splits.values()
           for c in s.comparisons):  # fmt: skip
        out["comparisons"] = comparison_forest(metrics, folder / "comparisons.png")
    curves_by_method = (
        {} if isinstance(metrics.learning_curves, Skipped) else (metrics.learning_curves.methods)
    )
    for method, curves in curves_by_method.items():
        out[f"learning_curves_{method}"] = learning_curve_figure(
            curves, folder / f"learning_curves_{method}.png", f"learning curve: {method}"
        )
    return out
