"""The targets of :data:`scaledl.evaluation.targets.TARGETS`, measured and worded for a reader.

:func:`target_rows` gives the report's and README's targets table: every target of
``metrics.json`` as a :class:`~scaledl.evaluation.targets.TargetResult` (the entry shape of
every result file), measured on the metrics where the file keeps no entry (the CPU splits) and
read from it where it does (GPU, intervals). The thresholds and comparators come from the table;
only the wording of a measured value is here.
"""

from __future__ import annotations

from scaledl.evaluation.results import Metrics, Skipped
from scaledl.evaluation.targets import Target, TargetResult, gpu_targets, group, target
from scaledl.report.formatting import interval_text, pct, ratio


def _noise(metrics: Metrics) -> float | None:
    rep = metrics.label_reproducibility
    return None if isinstance(rep, Skipped) else rep.mre


def _error_row(t: Target, metrics: Metrics) -> TargetResult:
    """A ``<=``/``>=`` target on the CPU splits' errors (ratios written as factors)."""
    value, noise = t.value(metrics), _noise(metrics)
    extra = {}
    if t.over is not None:
        measured = ratio(value)
    elif t.noise_factor is not None:
        floor = f"max({t.threshold:.0%}, {t.noise_factor:g} x {pct(noise, 2)})"
        measured = f"{pct(value, 2)} vs {floor}"
        extra = {} if noise is None else {"label_noise_mre": noise}
    else:
        measured = pct(value, 2)
    return t.result(measured, t.check(value, noise), value=value, extra=extra)


def _comparison_row(t: Target, metrics: Metrics) -> TargetResult:
    """A paired target: ScaleDL beats a baseline on a split."""
    c = t.value(metrics)
    if c is None:
        return t.result("not compared", None)
    return t.result(f"{interval_text(c)}: {c.verdict}", t.check(c), value=c.mre_difference,
                    ci_low=c.ci_low, ci_high=c.ci_high)  # fmt: skip


def _halving_row(metrics: Metrics) -> TargetResult:
    """D-optimal at half the workloads against random at the final size, paired by seed."""
    t = target("doptimal_halving")
    c = t.value(metrics)
    if c is None:
        return t.result("not evaluated", None)
    measured = (
        f"{c.method_a} vs {c.method_b}: {pct(c.mre_a, 2)} vs {pct(c.mre_b, 2)}, "
        f"{interval_text(c)} over {c.n_units} seeds: {c.verdict}"
    )
    return t.result(measured, t.check(c), value=c.mre_difference, ci_low=c.ci_low,
                    ci_high=c.ci_high)  # fmt: skip


def target_rows(metrics: Metrics) -> list[TargetResult]:
    """Every target with its measured value and whether it is reached, in the table's order.

    Args:
        metrics: the evaluation metrics.

    Returns:
        One entry per target (the GPU targets of
        :func:`~scaledl.evaluation.targets.gpu_targets`, the interval targets per left-out
        family as ``metrics.json`` records them; a skipped GPU evaluation as one entry saying
        why).
    """
    rows = [_error_row(t, metrics) for t in (*group("id_"), *group("ood_"))]
    rows += [_comparison_row(t, metrics) for t in group("beats_")]
    rows.append(_halving_row(metrics))
    if isinstance(metrics.gpu, Skipped):
        worst = target("gpu_lomo_worst")
        rows.append(worst.result(f"not evaluated ({metrics.gpu.skipped})", None))
    else:
        rows += gpu_targets(metrics.gpu.model_dump(mode="json"))
    rows += metrics.intervals.targets
    return rows
