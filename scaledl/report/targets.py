"""The targets of :data:`scaledl.evaluation.targets.TARGETS`, measured and worded for a reader.

:func:`target_rows` gives the report's and README's targets table: every target with its
measured value as text and whether it is reached (``None`` when it cannot be measured). The
thresholds and comparators come from the table; only the wording of a measured value is here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scaledl.evaluation.results import Metrics, Skipped
from scaledl.evaluation.targets import Target, group, resolve, target
from scaledl.report.formatting import interval_text, pct, ratio


@dataclass(frozen=True)
class TargetRow:
    """One accuracy target and how far the evaluation got.

    Attributes:
        target: what is aimed at.
        measured: the measured value, as text.
        reached: whether it is reached (``None`` when it could not be measured).
    """

    target: str
    measured: str
    reached: bool | None


def _noise(metrics: Metrics) -> float | None:
    rep = metrics.label_reproducibility
    return None if isinstance(rep, Skipped) else rep.mre


def _error_row(t: Target, metrics: Metrics) -> TargetRow:
    """A ``<=``/``>=`` target on the CPU splits' errors (ratios written as factors)."""
    value, noise = t.value(metrics), _noise(metrics)
    if t.over is not None:
        measured = ratio(value)
    elif t.noise_factor is not None:
        floor = f"max({t.threshold:.0%}, {t.noise_factor:g} x {pct(noise, 2)})"
        measured = f"{pct(value, 2)} vs {floor}"
    else:
        measured = pct(value, 2)
    return TargetRow(t.text, measured, t.check(value, noise))


def _comparison_row(t: Target, metrics: Metrics) -> TargetRow:
    """A paired target: ScaleDL beats a baseline on a split."""
    c = t.value(metrics)
    measured = "not compared" if c is None else f"{interval_text(c)}: {c.verdict}"
    return TargetRow(t.text, measured, t.check(c))


def _halving_row(metrics: Metrics) -> TargetRow:
    """D-optimal at half the workloads against random at the final size, paired by seed."""
    t = target("doptimal_halving")
    c = t.value(metrics)
    if c is None:
        return TargetRow(t.text, "not evaluated", None)
    measured = (
        f"{c.method_a} vs {c.method_b}: {pct(c.mre_a, 2)} vs {pct(c.mre_b, 2)}, "
        f"{interval_text(c)} over {c.n_units} seeds: {c.verdict}"
    )
    return TargetRow(t.text, measured, t.check(c))


def gpu_target_rows(gpu: dict[str, Any]) -> list[TargetRow]:
    """The GPU targets, measured on the ``gpu`` section of ``metrics.json`` (a dict).

    Args:
        gpu: the section (:class:`~scaledl.evaluation.results.GpuResults` as a dict).

    Returns:
        Rows for the protocols the section holds (leave one model out: mean, worst GPU and,
        with the analytical baseline, the ratio; leave one GPU out: mean).
    """
    root = {"gpu": gpu}
    rows = []
    lomo = gpu.get("leave_one_model_out")
    if lomo:
        mean, worst = target("gpu_lomo_mean"), target("gpu_lomo_worst")
        per_gpu = lomo["per_gpu"]
        worst_gpu = max(per_gpu, key=lambda g: per_gpu[g]["scaledl"]["mre"])
        under = sum(worst.check(v["scaledl"]["mre"]) for v in per_gpu.values())
        m, w = mean.value(root), worst.value(root)
        rows += [
            TargetRow(mean.text, pct(m), mean.check(m)),
            TargetRow(worst.text, f"worst {pct(w)} ({worst_gpu}); {under}/{len(per_gpu)} GPUs "
                      f"<= {worst.threshold:.0%}", worst.check(w)),
        ]  # fmt: skip
        versus = target("gpu_lomo_vs_analytical")
        if "analytical" in lomo["mean_over_gpus"]:
            r, analytical = versus.value(root), resolve(root, versus.path)
            measured = f"{ratio(r)} ({pct(analytical)} vs {pct(m)})"
            rows.append(TargetRow(versus.text, measured, versus.check(r)))
    if gpu.get("leave_one_gpu_out"):
        logo = target("gpu_logo_mean")
        value = logo.value(root)
        rows.append(TargetRow(logo.text, pct(value), logo.check(value)))
    return rows


def target_rows(metrics: Metrics) -> list[TargetRow]:
    """Every target with its measured value and whether it is reached, in the table's order.

    Args:
        metrics: the evaluation metrics.

    Returns:
        One :class:`TargetRow` per target (the interval targets per left-out family, as
        ``metrics.json`` records them; a skipped GPU evaluation as one row saying why).
    """
    rows = [_error_row(t, metrics) for t in (*group("id_"), *group("ood_"))]
    rows += [_comparison_row(t, metrics) for t in group("beats_")]
    rows.append(_halving_row(metrics))
    if isinstance(metrics.gpu, Skipped):
        worst = target("gpu_lomo_worst")
        rows.append(TargetRow(worst.text, f"not evaluated ({metrics.gpu.skipped})", None))
    else:
        rows += gpu_target_rows(metrics.gpu.model_dump(mode="json"))
    rows += [TargetRow(**t.model_dump()) for t in metrics.intervals.targets]
    return rows
