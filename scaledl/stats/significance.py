"""Paired comparison of two predictors on the same workloads: MRE difference and its interval.

Two methods evaluated on one set of test workloads are compared *paired*: the unit is the
workload, and the statistic is the difference of the mean relative errors,
``MRE_A - MRE_B = mean_i(re_A[i] - re_B[i])``. Its 95% confidence interval comes from the paired
bootstrap (Efron & Tibshirani 1993, "An Introduction to the Bootstrap", ch. 14: workloads are
resampled with replacement, both methods' errors of a workload travel together), computed by
:func:`scipy.stats.bootstrap` with ``paired=True`` and the bias-corrected and accelerated (BCa)
interval. Pairing removes the workload-to-workload spread that two independent MREs carry, so a
difference of a few points on twenty workloads can be told apart from noise, and two runs on
different splits (or different data) are never compared at all.

Several seeds or repeated runs of a method (shape ``(n_repeats, n_workloads)``) are pooled by
averaging each workload's relative error over the repeats before resampling: the workload stays
the resampling unit, the repeats only lower each workload's noise.

Optional per-workload ``weights`` turn both MREs into weighted means (``sum(w re) / sum(w)``),
e.g. ``1 / (workloads of its family)`` so that the leave-one-family-out MRE is the unweighted
mean over families, as reported; a workload and its weight are resampled together.

Verdict of A against B: ``"better"`` when the whole interval lies below 0 (A has the lower
MRE), ``"worse"`` when it lies above 0, ``"not distinguishable"`` when it contains 0.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

Verdict = Literal["better", "worse", "not distinguishable"]

#: Fewest workloads a paired interval is computed from.
MIN_WORKLOADS = 2


class Comparison(BaseModel):
    """Method (or sampler) A against B, paired: the MRE difference, its interval and a verdict.

    The one type of a comparison: :func:`paired_comparison` returns it, ``metrics.json`` stores
    it (:mod:`scaledl.evaluation.results`), the registration policy decides on it. Strict as
    every ``metrics.json`` section: unknown keys and non-finite numbers are errors.

    Attributes:
        method_a: A (a sampler at a size in learning curves: ``doptimal@19``).
        method_b: B.
        mre_a: A's MRE (repeats pooled per unit; weighted for leave-one-family-out).
        mre_b: B's MRE.
        mre_difference: ``mre_a - mre_b`` (negative: A has the lower error).
        ci_low: lower bound of the paired bootstrap interval of the difference.
        ci_high: upper bound.
        confidence_level: the interval's coverage (0.95).
        interval_method: ``BCa``, ``percentile`` (when BCa is undefined on the sample, e.g.
            two workloads) or ``exact`` (every paired difference equal: no spread to resample).
        unit: what was resampled: ``workload`` (test workloads), ``seed`` (learning curves) or
            ``family-seed`` (the reference dataset's sequential-design units).
        n_units: units compared.
        n_repeats_a: A's repeats (model seeds, runs) pooled per unit.
        n_repeats_b: B's.
        n_resamples: bootstrap resamples.
        verdict: ``better``, ``worse`` or ``not distinguishable`` (A relative to B).
        label_repeats: mean launch labels per workload the errors were averaged over (1 when
            the errors are against one label).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    method_a: str
    method_b: str
    mre_a: float
    mre_b: float
    mre_difference: float
    ci_low: float
    ci_high: float
    confidence_level: float
    interval_method: Literal["BCa", "percentile", "exact"]
    unit: Literal["workload", "seed", "family-seed"]
    n_units: int
    n_repeats_a: int
    n_repeats_b: int
    n_resamples: int
    verdict: Verdict
    label_repeats: float

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-serialisable builtins."""
        return self.model_dump()

    def describe(self) -> str:
        """The comparison in one sentence.

        Returns:
            E.g. ``"candidate vs current: MRE 12.1% vs 14.0%, difference -1.9 points (95% CI
            -3.2 to -0.6, 24 workloads): better"``.
        """
        level = f"{100 * self.confidence_level:g}%"
        return (
            f"{self.method_a} vs {self.method_b}: MRE {100 * self.mre_a:.1f}% vs "
            f"{100 * self.mre_b:.1f}%, difference {100 * self.mre_difference:+.1f} points "
            f"({level} CI {100 * self.ci_low:+.1f} to {100 * self.ci_high:+.1f}, "
            f"{self.n_units} {self.unit}s): {self.verdict}"
        )


def _per_workload(errors: Any, name: str) -> tuple[np.ndarray, int]:
    """Relative errors pooled over repeats: shape (n_workloads,), and the number of repeats."""
    array = np.asarray(errors, dtype=float)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[0] < 1:
        raise ValueError(
            f"relative errors of {name!r}: expected shape (n_workloads,) or "
            f"(n_repeats, n_workloads), got {np.shape(errors)}"
        )
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        bad = array[~np.isfinite(array) | (array < 0)][0]
        raise ValueError(f"relative errors of {name!r} must be finite and >= 0, got {bad}")
    return array.mean(axis=0), array.shape[0]


def _mean_difference(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a - b, axis=axis)


def _weighted_mean_difference(
    a: np.ndarray, b: np.ndarray, w: np.ndarray, axis: int = -1
) -> np.ndarray:
    return np.sum(w * (a - b), axis=axis) / np.sum(w, axis=axis)


def verdict_of(ci_low: float, ci_high: float) -> Verdict:
    """``"better"`` if the interval of ``MRE_A - MRE_B`` lies below 0, ``"worse"`` above."""
    if ci_high < 0:
        return "better"
    if ci_low > 0:
        return "worse"
    return "not distinguishable"


def paired_comparison(
    relative_errors_a: Any,
    relative_errors_b: Any,
    method_a: str = "a",
    method_b: str = "b",
    confidence_level: float = 0.95,
    n_resamples: int = 9999,
    seed: int = 0,
    weights: Any = None,
    unit: Literal["workload", "seed", "family-seed"] = "workload",
    label_repeats: float = 1.0,
) -> Comparison:
    """Compare two methods' relative errors on the same workloads (paired bootstrap).

    Args:
        relative_errors_a: ``|pred - true| / true`` of method A per workload, shape
            (n_workloads,), or (n_repeats_a, n_workloads) for several seeds/runs (pooled per
            workload). Column ``i`` must be the same workload as in ``relative_errors_b``.
        relative_errors_b: the same for method B, shape (n_workloads,) or
            (n_repeats_b, n_workloads).
        method_a: name of A in the result.
        method_b: name of B.
        confidence_level: coverage of the interval, in (0, 1).
        n_resamples: bootstrap resamples.
        seed: seed of the resampling (the same inputs and seed give the same interval).
        weights: positive weight per workload, shape (n_workloads,); ``None``: equal weights.
        unit: what a column is (``workload``; ``seed`` or ``family-seed`` when comparing MREs
            per seed or per unit).
        label_repeats: mean launch labels the errors were averaged over (recorded).

    Returns:
        The :class:`Comparison` of A against B.

    Raises:
        ValueError: the two have different numbers of workloads, fewer than
            :data:`MIN_WORKLOADS`, a negative or non-finite error, weights that are not
            positive and finite or of another length, or a confidence level outside (0, 1).
        RuntimeError: neither the BCa nor the percentile interval is finite.

    Shapes:
        ``relative_errors_a``: (n_workloads,) or (n_repeats_a, n_workloads);
        ``relative_errors_b``: (n_workloads,) or (n_repeats_b, n_workloads).
    """
    if not 0 < confidence_level < 1:
        raise ValueError(f"confidence_level must be in (0, 1), got {confidence_level}")
    a, repeats_a = _per_workload(relative_errors_a, method_a)
    b, repeats_b = _per_workload(relative_errors_b, method_b)
    w = _paired_weights(a, b, weights, method_a, method_b)
    point = float(_weighted_mean_difference(a, b, w))
    if np.ptp(a - b) <= 1e-12:
        # Every resample has the same mean (up to rounding): the interval is the point (scipy
        # returns NaN on such degenerate data).
        low, high, method = point, point, "exact"
    else:
        resampled = (a, b) if weights is None else (a, b, w)
        low, high, method = _bootstrap_interval(
            resampled, confidence_level, n_resamples, seed, f"{method_a!r} - {method_b!r}"
        )
    return Comparison(
        method_a=method_a,
        method_b=method_b,
        mre_a=float(np.sum(w * a) / np.sum(w)),
        mre_b=float(np.sum(w * b) / np.sum(w)),
        mre_difference=point,
        ci_low=low,
        ci_high=high,
        confidence_level=confidence_level,
        interval_method=method,
        unit=unit,
        n_units=int(a.size),
        n_repeats_a=repeats_a,
        n_repeats_b=repeats_b,
        n_resamples=n_resamples,
        verdict=verdict_of(low, high),
        label_repeats=float(label_repeats),
    )


def _paired_weights(
    a: np.ndarray, b: np.ndarray, weights: Any, method_a: str, method_b: str
) -> np.ndarray:
    """The per-workload weights (ones for ``None``), after checking both sides pair up.

    Raises:
        ValueError: different numbers of workloads, fewer than :data:`MIN_WORKLOADS`, or
            weights that are not positive, finite and one per workload.
    """
    if a.shape != b.shape:
        raise ValueError(
            f"{method_a!r} has {a.size} workloads and {method_b!r} {b.size}: a paired comparison "
            "needs the errors of both on the same workloads"
        )
    if a.size < MIN_WORKLOADS:
        raise ValueError(
            f"{a.size} workload(s) to compare {method_a!r} with {method_b!r}: a paired interval "
            f"needs at least {MIN_WORKLOADS}"
        )
    if weights is None:
        return np.ones(a.size)
    w = np.asarray(weights, dtype=float)
    if w.shape != a.shape or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(
            f"weights of the comparison of {method_a!r} with {method_b!r}: expected "
            f"{a.size} positive finite values, got shape {w.shape}"
        )
    return w


def _bootstrap_interval(
    samples: tuple[np.ndarray, ...],
    confidence_level: float,
    n_resamples: int,
    seed: int,
    what: str,
) -> tuple[float, float, str]:
    """The paired bootstrap interval of the (weighted) mean difference: BCa, else percentile.

    Args:
        samples: ``(a, b)`` or ``(a, b, weights)``, each of shape (n_workloads,).
        confidence_level: coverage of the interval.
        n_resamples: bootstrap resamples.
        seed: seed of the resampling.
        what: the difference, for the error message.

    Returns:
        ``(low, high, method)`` with ``method`` ``"BCa"`` or ``"percentile"``.

    Raises:
        RuntimeError: neither interval is finite.
    """
    # scipy.stats: a noticeable import, only the bootstrap needs it.
    from scipy.stats import DegenerateDataWarning, bootstrap

    statistic = _mean_difference if len(samples) == 2 else _weighted_mean_difference
    low, high = math.nan, math.nan
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            # BCa is undefined on some tiny samples: scipy warns and returns NaN, and the
            # percentile interval is used instead (named in ``interval_method``).
            warnings.simplefilter("ignore", DegenerateDataWarning)
            result = bootstrap(
                samples,
                statistic,
                paired=True,
                vectorized=True,
                confidence_level=confidence_level,
                n_resamples=n_resamples,
                method=method,
                rng=np.random.default_rng(seed),
            )
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
        if math.isfinite(low) and math.isfinite(high):
            return low, high, method
    raise RuntimeError(
        f"bootstrap interval of {what} is not finite ({low}, {high}) on {samples[0].size} workloads"
    )
