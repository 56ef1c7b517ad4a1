"""When to stop measuring label steps: a target confidence half-width of the median.

Benchmark harnesses measure until the estimate is precise enough rather than for a fixed count
(pyperf calibrates its loops and runs until the spread is small; Google Benchmark runs until a
minimum time is spent). ScaleDL's labels are medians of step times, so the rule is on the median:
keep measuring whole epochs until the 95% confidence interval of the median is narrower than
``target_rel_halfwidth`` of the median (and at least ``min_steps`` were measured), or
``max_steps`` steps or ``budget_s`` seconds are spent, whichever comes first.

The interval is the Hettmansperger-Sheather interpolated order-statistic interval of the median
(``scipy.stats.mstats.median_cihs``; Hettmansperger & Sheather 1986), which assumes no
distribution; it needs at least 6 values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats.mstats import median_cihs

#: Fewest values :func:`median_halfwidth` accepts (``median_cihs`` fails below 6).
MIN_VALUES = 6


def median_halfwidth(values, confidence: float = 0.95) -> float:
    """Relative half-width of the confidence interval of the median.

    Args:
        values: step times, shape (n,), n >= :data:`MIN_VALUES`, all positive.
        confidence: confidence level of the interval.

    Returns:
        ``(high - low) / 2 / median``, a fraction.

    Raises:
        ValueError: fewer than :data:`MIN_VALUES` values, or a non-positive median.
    """
    values = np.asarray(values, dtype=float)
    if values.size < MIN_VALUES:
        raise ValueError(f"median interval: {values.size} values, need >= {MIN_VALUES}")
    median = float(np.median(values))
    if not median > 0:
        raise ValueError(f"median interval: median must be > 0, got {median}")
    low, high = median_cihs(values, alpha=1.0 - confidence)
    return float(high - low) / 2.0 / median


@dataclass(frozen=True)
class StopRule:
    """The adaptive stop rule of the label measurement.

    Attributes:
        target_rel_halfwidth: stop once the median's 95% half-width is below this fraction.
        min_steps: never stop with fewer steps (>= :data:`MIN_VALUES`).
        max_steps: always stop at this many steps.
        budget_s: stop once this many seconds of label measurement are spent.
    """

    target_rel_halfwidth: float = 0.01
    min_steps: int = 16
    max_steps: int = 400
    budget_s: float = 3.0

    def __post_init__(self) -> None:
        if self.min_steps < MIN_VALUES or self.max_steps < self.min_steps:
            raise ValueError(
                f"stop rule: need {MIN_VALUES} <= min_steps <= max_steps, got "
                f"min_steps={self.min_steps}, max_steps={self.max_steps}"
            )
        if not self.target_rel_halfwidth > 0 or not self.budget_s > 0:
            raise ValueError(
                "stop rule: target_rel_halfwidth and budget_s must be > 0, got "
                f"{self.target_rel_halfwidth} and {self.budget_s}"
            )

    def reason_to_stop(self, step_ms, elapsed_s: float) -> str | None:
        """Why to stop now, or ``None`` to measure another epoch.

        Args:
            step_ms: the label step times so far, shape (n,).
            elapsed_s: seconds of label measurement so far.

        Returns:
            ``"precise"``, ``"max_steps"``, ``"budget"`` or ``None``.
        """
        n = len(step_ms)
        if n >= self.max_steps:
            return "max_steps"
        if n >= self.min_steps and median_halfwidth(step_ms) <= self.target_rel_halfwidth:
            return "precise"
        if elapsed_s >= self.budget_s and n >= MIN_VALUES:
            return "budget"
        return None
