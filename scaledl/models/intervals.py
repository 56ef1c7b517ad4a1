"""Calibrated prediction intervals: Mondrian split-conformal regression in log space (crepes).

A runtime error is multiplicative (a model 30% off on a 10 ms iteration is 30% off on a 1 s
one), so the non-conformity score of a prediction is its absolute log ratio
``|log(measured) - log(predicted)|``. For a coverage ``c`` and a set of calibration scores, the
conformal half-width ``q`` is the ``ceil(c (n + 1))``-th smallest score (split conformal
regression, Vovk et al. 2005; Papadopoulos et al. 2002) and the interval is
``[predicted * exp(-q), predicted * exp(q)]``; for a new prediction exchangeable with the
calibration ones it holds the measured time with probability at least ``c``. The quantile
comes from ``crepes.ConformalRegressor`` (Boström, COPA 2022), never from code of ours.

Calibration is Mondrian (one quantile per category, Vovk 2012): the category, or *stratum*, of
a prediction is how far it lies from the training data, decided by the domain guard
(:mod:`scaledl.models.guard`), and each stratum is calibrated on out-of-sample predictions of
the same kind:

* ``in_domain``: the random held-out (ID) split of the evaluation: workloads of families the
  model was trained on;
* ``unseen_family``: the leave-one-family-out splits: each family predicted by models trained
  without it, calibrated with *families as the exchangeable units*
  (:func:`family_conformal_half_width`), not workloads: a family's workloads share its error,
  so pooling them calibrates the average workload, not a new family;
* ``beyond_range``: the extrapolation split: the largest workloads predicted by models trained
  on the smaller ones;
* ``unseen_device``: a device never trained on, predicted from its specs: the GPU
  evaluation's leave-one-GPU-out predictions (:mod:`scaledl.evaluation.gpu_calibration`; the
  GPU predictor's ``in_domain`` and ``unseen_family`` strata come from its leave-one-model-out
  predictions).

The scores come from the evaluation's predictions (:meth:`IntervalCalibration.from_predictions`:
no extra fit), made by models of the same training recipe fitted on less data than the
registered predictor, which makes the intervals, if anything, conservative. Iteration and epoch
time are calibrated separately. The calibration travels in the predictor bundle
(``calibration.json``, checksummed) and records the SHA-256 of the profile tables it came from.

A stratum with too few scores for the coverage asked (fewer than ``c / (1 - c)``: 9 for 90%,
:func:`conformal_min_scores`; :data:`CONFIDENCE_ROUNDING` keeps crepes' floating-point index
from taking one rank too many) gives an unbounded interval ``[0, inf)``, as crepes does, never
a narrower guess. For ``unseen_family`` the scores are families, so the conformal quantile of a
90% interval for a new family needs at least 9 calibration families; with 3 to 8 the stratum
takes a normal-theory prediction bound over the family scores instead
(:func:`family_half_width`, decided by the number of families alone), and every interval
reports which of the two it used (:data:`IntervalMethod`).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import numpy as np
import pandas as pd
from pydantic import Field, model_validator
from scipy.special import stdtrit

from scaledl.io.atomic import write_atomic
from scaledl.io.safe import UnsafeInputError, read_json
from scaledl.io.schema import Artefact, parse_artefact

#: Strata, from the closest to the training data to the farthest.
Stratum = Literal["in_domain", "unseen_family", "beyond_range", "unseen_device"]
STRATA: tuple[str, ...] = get_args(Stratum)
#: The targets calibrated, as named in prediction frames (``iteration_s``, ``epoch_s``).
Target = Literal["iteration", "epoch"]
TARGETS: tuple[str, ...] = get_args(Target)
#: Split name prefix of the evaluation's predictions -> stratum.
SPLIT_STRATA = {"id": "in_domain", "ood/": "unseen_family", "extrapolation": "beyond_range"}
SCORE = "abs log ratio |log(measured) - log(predicted)|"
#: Strata calibrated with families as the exchangeable units (:func:`family_conformal_half_width`).
FAMILY_STRATA: tuple[str, ...] = ("unseen_family",)
FORMAT = 2
#: How a half-width was obtained: the split-conformal quantile (of residuals, or of family
#: scores), the normal prediction bound over family scores (:func:`normal_prediction_bound`),
#: or none (unbounded: too few scores).
IntervalMethod = Literal["conformal", "normal_prediction_bound", "unbounded"]
#: The rule a calibration applies to its family strata (:func:`family_half_width`):
#: ``conformal`` alone (unbounded below :func:`conformal_min_scores` families: calibrations
#: written before the normal bound, whose files lack ``family_rule``), or the conformal
#: quantile else the normal prediction bound.
FamilyRule = Literal["conformal", "conformal_else_normal_prediction_bound"]
FAMILY_RULE: str = "conformal_else_normal_prediction_bound"
#: Fewest families the normal prediction bound uses: with 2 its standard deviation has one
#: degree of freedom and the bound rests on a single difference.
MIN_BOUND_FAMILIES = 3


class CalibrationError(ValueError):
    """A calibration is malformed, or cannot give the interval asked (names file and key)."""


def log_residuals(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Signed log residuals ``log(true) - log(pred)``.

    Args:
        pred: predicted times, shape (n,), > 0.
        true: measured times, shape (n,), > 0.

    Returns:
        Shape (n,).
    """
    return np.log(np.asarray(true, dtype=float)) - np.log(np.asarray(pred, dtype=float))


#: Subtracted from the confidence given to crepes, whose quantile index is
#: ``int((1 - confidence) (n + 1))``: in floating point ``(1 - 0.9) * 20`` is
#: ``1.9999999999999996``, which truncates to 1 and takes the quantile one rank too high (the
#: 19th of 19 residuals at 90% instead of the 18th, ``ceil(0.9 * 20)``). The tolerance is far
#: below any real step of ``(1 - confidence) (n + 1)`` and far above the rounding error.
CONFIDENCE_ROUNDING = 1e-12


def conformal_half_widths(
    residuals: np.ndarray, bins: np.ndarray, coverage: float
) -> dict[str, float]:
    """The Mondrian conformal half-width of each bin (``crepes.ConformalRegressor``).

    Args:
        residuals: calibration residuals (the absolute value is the score), shape (n,).
        bins: their category, shape (n,).
        coverage: confidence level, in (0, 1).

    Returns:
        Bin -> half-width (``inf`` when the bin has too few residuals for ``coverage``).

    Raises:
        CalibrationError: ``coverage`` outside (0, 1) or no residual.
    """
    # crepes: only fitting a conformal calibration needs it.
    from crepes import ConformalRegressor

    if not 0.0 < coverage < 1.0:
        raise CalibrationError(f"coverage must lie in (0, 1), got {coverage!r}")
    residuals, bins = np.asarray(residuals, dtype=float), np.asarray(bins, dtype=str)
    if residuals.size == 0:
        raise CalibrationError("no calibration residual")
    labels = np.unique(bins)
    with warnings.catch_warnings():
        # crepes warns and returns an unbounded interval for a bin too small: we report it.
        warnings.filterwarnings("ignore", message="the no. of calibration examples is too small")
        cr = ConformalRegressor().fit(residuals, bins=bins)
        bounds = cr.predict_int(
            np.zeros(len(labels)), bins=labels, confidence=coverage - CONFIDENCE_ROUNDING
        )
    return {str(b): float(hi) for b, hi in zip(labels, bounds[:, 1], strict=True)}


def conformal_half_width(residuals: np.ndarray, coverage: float) -> float:
    """The split-conformal half-width of one calibration set (``inf`` when too small)."""
    residuals = np.asarray(residuals, dtype=float)
    return conformal_half_widths(residuals, np.zeros(len(residuals), dtype=int), coverage)["0"]


def family_scores(residuals: np.ndarray, families: np.ndarray, coverage: float) -> dict[str, float]:
    """Each family's score: the smallest half-width covering a share ``coverage`` of it.

    The score of family ``k`` with ``n_k`` residuals is the ``ceil(coverage * n_k)``-th
    smallest ``|residual|`` of the family (the empirical quantile, ``inverted_cdf``): a
    half-width ``q`` covers at least ``coverage`` of the family's workloads iff ``q`` is at
    least its score.

    Args:
        residuals: log residuals, shape (n,).
        families: the family of each, shape (n,).
        coverage: in (0, 1).

    Returns:
        Family -> score (log space), in sorted family order.

    Raises:
        CalibrationError: ``coverage`` outside (0, 1), no residual, or shapes that differ.
    """
    if not 0.0 < coverage < 1.0:
        raise CalibrationError(f"coverage must lie in (0, 1), got {coverage!r}")
    scores = np.abs(np.asarray(residuals, dtype=float))
    families = np.asarray(families, dtype=str)
    if scores.size == 0:
        raise CalibrationError("no calibration residual")
    if families.shape != scores.shape:
        raise CalibrationError(
            f"{scores.size} residuals but {families.size} family labels: one label per residual"
        )
    return {
        str(f): float(np.quantile(scores[families == f], coverage, method="inverted_cdf"))
        for f in np.unique(families)
    }


def family_conformal_half_width(
    residuals: np.ndarray, families: np.ndarray, coverage: float
) -> float:
    """Group-conformal half-width for a family never seen: families are the exchangeable units.

    Each of the ``K`` calibration families gets one score (:func:`family_scores`: the
    within-family ``coverage`` quantile of ``|residual|``, from a model that never saw that
    family), and the half-width is the split-conformal quantile of the ``K`` family scores,
    the ``ceil(coverage (K + 1))``-th smallest (``crepes.ConformalRegressor`` on the family
    scores). If a new family is exchangeable with the calibration families, its own score is at
    most the half-width with probability at least ``coverage``: with that probability at least
    a share ``coverage`` of the new family's workloads is covered. Each family counts once, so a
    large family does not dominate, and the correlated errors of one family are not counted as
    independent evidence.

    Source: split conformal over exchangeable groups (Dunn, Wasserman and Ramdas, "Distribution-
    free prediction sets for two-layer hierarchical models", JASA 118, 2023: one score per group;
    Lee, Barber and Willett, "Distribution-free inference with hierarchical data", NeurIPS 2023)
    with the cross-validation scores of CV+ (Barber, Candes, Ramdas and Tibshirani, "Predictive
    inference with the jackknife+", Ann. Statist. 49, 2021) taken over families as folds.

    Args:
        residuals: log residuals, each from a model trained without its family, shape (n,).
        families: the family of each residual, shape (n,).
        coverage: in (0, 1); both the share of a family covered and the probability.

    Returns:
        The log-space half-width; ``inf`` when ``K`` is too small (``K < coverage / (1 -
        coverage)``: fewer than 9 families for 90%).

    Raises:
        CalibrationError: as :func:`family_scores`.
    """
    scores = family_scores(residuals, families, coverage)
    return conformal_half_width(np.fromiter(scores.values(), dtype=float), coverage)


def conformal_min_scores(coverage: float) -> int:
    """The fewest calibration scores that give a finite split-conformal quantile at ``coverage``.

    crepes takes the ``int((1 - coverage) (n + 1))``-th largest of ``n`` scores, unbounded
    when that index is 0: the smallest ``n`` with ``int((1 - coverage) (n + 1)) >= 1``, with
    the confidence passed as :func:`conformal_half_widths` passes it (9 at 0.9, 4 at 0.8).

    Raises:
        CalibrationError: ``coverage`` outside (0, 1).
    """
    if not 0.0 < coverage < 1.0:
        raise CalibrationError(f"coverage must lie in (0, 1), got {coverage!r}")
    n = 1
    while int((1.0 - (coverage - CONFIDENCE_ROUNDING)) * (n + 1)) < 1:
        n += 1
    return n


def normal_prediction_bound(scores: np.ndarray, coverage: float) -> float:
    """One-sided upper normal prediction bound of one future score, on the log scale.

    The ``K`` scores are taken as independent draws with ``log(score)`` normal; the bound for
    a new draw at confidence ``coverage`` is ``exp(m + t(coverage; K - 1) s sqrt(1 + 1 / K))``,
    ``m`` and ``s`` the mean and sample standard deviation of the log scores and ``t`` the
    Student-t quantile (the prediction interval to contain one future observation of a normal
    distribution: Meeker, Hahn and Escobar, "Statistical Intervals: A Guide for Practitioners
    and Researchers", 2nd ed., Wiley 2017, ch. 4; Hahn and Meeker 1991, ch. 4). Unlike the
    conformal quantile it is finite for any ``K >= 2``; its coverage rests on the normality of
    the log scores, not on exchangeability alone.

    Args:
        scores: the calibration scores, shape (K,), each > 0.
        coverage: the confidence of the bound, in (0, 1).

    Returns:
        The bound (same units as the scores).

    Raises:
        CalibrationError: ``coverage`` outside (0, 1), fewer than 2 scores, or a score not
            finite and > 0 (its log is undefined).
    """
    if not 0.0 < coverage < 1.0:
        raise CalibrationError(f"coverage must lie in (0, 1), got {coverage!r}")
    scores = np.asarray(scores, dtype=float)
    if scores.size < 2:
        raise CalibrationError(f"normal prediction bound: {scores.size} scores, at least 2")
    if not (np.isfinite(scores) & (scores > 0)).all():
        raise CalibrationError(
            f"normal prediction bound: scores must be finite and > 0, got {scores.tolist()}"
        )
    logs = np.log(scores)
    k = logs.size
    spread = stdtrit(k - 1, coverage) * logs.std(ddof=1) * np.sqrt(1.0 + 1.0 / k)
    return float(np.exp(logs.mean() + spread))


@dataclass(frozen=True)
class CalibratedWidth:
    """A stratum's half-width and how it was obtained.

    Attributes:
        half_width: log-space half-width, ``inf`` when unbounded.
        method: ``conformal``, ``normal_prediction_bound`` or ``unbounded``
            (:data:`IntervalMethod`).
        families: the number ``K`` of calibration families (0: a stratum not calibrated by
            family).
        reason: why this method, one line naming ``K`` and the thresholds.
    """

    half_width: float
    method: str
    families: int
    reason: str


def family_half_width(
    residuals: np.ndarray, families: np.ndarray, coverage: float, rule: str = FAMILY_RULE
) -> CalibratedWidth:
    """The half-width of an interval for a family never seen, and the method that gave it.

    Decided by the number ``K`` of calibration families alone, before any score is looked at:

    * ``K >= conformal_min_scores(coverage)`` (9 at 90%): the group-conformal quantile
      (:func:`family_conformal_half_width`), distribution-free;
    * ``MIN_BOUND_FAMILIES <= K`` below that, with ``rule`` :data:`FAMILY_RULE`: the normal
      prediction bound over the ``K`` family scores (:func:`normal_prediction_bound` of
      :func:`family_scores`), which assumes their logs are normal;
    * otherwise: unbounded (``inf``), with the reason.

    Args:
        residuals: log residuals, each from a model trained without its family, shape (n,).
        families: the family of each residual, shape (n,).
        coverage: in (0, 1); both the share of a family covered and the probability.
        rule: ``conformal_else_normal_prediction_bound`` (:data:`FAMILY_RULE`) or
            ``conformal`` (never the normal bound: calibrations written before it).

    Returns:
        The half-width, its method, ``K`` and the reason.

    Raises:
        CalibrationError: as :func:`family_scores`, an unknown ``rule``, or a family score of 0
            where the normal bound applies (its log is undefined).
    """
    if rule not in get_args(FamilyRule):
        raise CalibrationError(f"family rule {rule!r}: not one of {get_args(FamilyRule)}")
    scores = np.fromiter(family_scores(residuals, families, coverage).values(), dtype=float)
    k, needed = scores.size, conformal_min_scores(coverage)
    if k >= needed:
        reason = f"{k} families: conformal quantile of the family scores ({needed} needed)"
        return CalibratedWidth(conformal_half_width(scores, coverage), "conformal", k, reason)
    short = f"{k} families, fewer than the {needed} the conformal quantile needs at {coverage:.0%}"
    if rule == "conformal":
        reason = (
            f"{short} (family rule 'conformal': a calibration written before the normal "
            f"prediction bound, which a predictor fitted now uses from {MIN_BOUND_FAMILIES} "
            "families)"
        )
        return CalibratedWidth(np.inf, "unbounded", k, reason)
    if k < MIN_BOUND_FAMILIES:
        reason = f"{short} and the {MIN_BOUND_FAMILIES} the normal prediction bound needs"
        return CalibratedWidth(np.inf, "unbounded", k, reason)
    reason = f"{short}: normal prediction bound over the log family scores"
    bound = normal_prediction_bound(scores, coverage)
    return CalibratedWidth(bound, "normal_prediction_bound", k, reason)


def stratum_of_split(split: str) -> str:
    """The stratum an evaluation split's out-of-sample predictions calibrate.

    Raises:
        CalibrationError: an unknown split name.
    """
    for prefix, stratum in SPLIT_STRATA.items():
        if split == prefix or (prefix.endswith("/") and split.startswith(prefix)):
            return stratum
    raise CalibrationError(f"split {split!r}: not an evaluation split ({list(SPLIT_STRATA)})")


@dataclass(frozen=True)
class IntervalCalibration:
    """Calibration residuals per target and stratum, from out-of-sample predictions.

    Attributes:
        residuals: target (``iteration``, ``epoch``) -> stratum -> signed log residuals
            ``log(measured / predicted)`` (a stratum without residuals is absent).
        method: the method whose predictions were scored (``scaledl``).
        training_data_sha256: SHA-256 of the profile tables the predictions came from
            (:func:`scaledl.registry.bundle.tables_sha256`), ``""`` when unknown.
        source: where the residuals came from (a ``predictions.parquet`` or description).
        families: target -> stratum -> the family of each residual, for the strata calibrated
            by family (:data:`FAMILY_STRATA`, :func:`family_conformal_half_width`); a stratum
            without families is calibrated by split conformal over its residuals (the GPU
            predictor's, whose data have one family).
        family_rule: how the strata with families are calibrated (:func:`family_half_width`):
            :data:`FAMILY_RULE`, or ``conformal`` for a calibration file written before the
            normal prediction bound (no ``family_rule`` key).

    Raises:
        CalibrationError: a family list whose length differs from its residuals', families
            for a stratum not in :data:`FAMILY_STRATA` or without residuals, or an unknown
            family rule.
    """

    residuals: dict[str, dict[str, np.ndarray]]
    method: str = "scaledl"
    training_data_sha256: str = ""
    source: str = ""
    families: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    family_rule: str = FAMILY_RULE
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.family_rule not in get_args(FamilyRule):
            raise CalibrationError(
                f"{self.source or 'calibration'}: family rule {self.family_rule!r}: not one of "
                f"{get_args(FamilyRule)}"
            )
        for target, by in self.families.items():
            for stratum, labels in by.items():
                where = f"{self.source or 'calibration'}: families.{target}.{stratum}"
                if stratum not in FAMILY_STRATA:
                    raise CalibrationError(f"{where}: not calibrated by family ({FAMILY_STRATA})")
                n = len(self.residuals.get(target, {}).get(stratum, ()))
                if len(labels) != n:
                    raise CalibrationError(f"{where}: {len(labels)} labels for {n} residuals")

    @classmethod
    def from_predictions(
        cls,
        predictions: pd.DataFrame,
        method: str = "scaledl",
        training_data_sha256: str = "",
        source: str = "",
    ) -> IntervalCalibration:
        """The calibration of one method's out-of-sample evaluation predictions.

        Args:
            predictions: rows with ``split`` (``id``, ``ood/<family>``, ``extrapolation``),
                ``method``, ``true_iteration_s``, ``pred_iteration_s``, ``true_epoch_s``,
                ``pred_epoch_s`` (the evaluation's ``predictions.parquet``).
            method: the method to calibrate.
            training_data_sha256: SHA-256 of the profile tables evaluated.
            source: where the predictions came from.

        Returns:
            The calibration (rows with a missing or non-positive time are left out); the
            ``unseen_family`` residuals carry their family (the split's ``ood/<family>``).

        Raises:
            CalibrationError: ``method`` has no prediction, or no stratum has a residual.
        """
        rows = predictions[predictions["method"] == method]
        if rows.empty:
            raise CalibrationError(f"{source or 'predictions'}: no prediction of {method!r}")
        strata = rows["split"].map(stratum_of_split).to_numpy()
        split = rows["split"].astype(str).to_numpy()
        family = np.array([s.split("/", 1)[1] if "/" in s else "" for s in split], dtype=str)
        residuals: dict[str, dict[str, np.ndarray]] = {}
        families: dict[str, dict[str, np.ndarray]] = {}
        for target in TARGETS:
            true = rows[f"true_{target}_s"].to_numpy(dtype=float)
            pred = rows[f"pred_{target}_s"].to_numpy(dtype=float)
            ok = np.isfinite(true) & np.isfinite(pred) & (true > 0) & (pred > 0)
            r = np.full(len(rows), np.nan)
            r[ok] = log_residuals(pred[ok], true[ok])
            residuals[target] = {
                s: r[ok & (strata == s)] for s in STRATA if (ok & (strata == s)).any()
            }
            families[target] = {
                s: family[ok & (strata == s)] for s in FAMILY_STRATA if s in residuals[target]
            }
        if not residuals["iteration"]:
            raise CalibrationError(f"{source or 'predictions'}: no usable {method!r} prediction")
        return cls(residuals, method, training_data_sha256, source, families)

    def strata(self, target: str = "iteration") -> list[str]:
        """Strata with residuals for ``target``, in :data:`STRATA` order."""
        return [s for s in STRATA if s in self.residuals.get(target, {})]

    def sizes(self) -> dict[str, dict[str, int]]:
        """Target -> stratum -> number of residuals."""
        return {t: {s: len(r) for s, r in by.items()} for t, by in self.residuals.items()}

    def half_widths(self, target: str, coverage: float) -> dict[str, float]:
        """Log-space half-width per stratum for ``target`` at ``coverage``.

        Mondrian split conformal per stratum, except a stratum with families, calibrated by
        :func:`family_half_width` under :attr:`family_rule` (:meth:`methods` says how each
        was obtained).

        Raises:
            CalibrationError: unknown target, no residual for it, or a bad coverage.
        """
        return {s: w.half_width for s, w in self._calibrate(target, coverage).items()}

    def methods(self, target: str, coverage: float) -> dict[str, CalibratedWidth]:
        """Per stratum for ``target`` at ``coverage``: its half-width, method, and why.

        A stratum without families reports ``conformal`` (or ``unbounded``) with ``families``
        0; one with families, :func:`family_half_width`'s answer.

        Raises:
            CalibrationError: as :meth:`half_widths`.
        """
        return dict(self._calibrate(target, coverage))

    def _calibrate(self, target: str, coverage: float) -> dict[str, CalibratedWidth]:
        if target not in self.residuals or not self.residuals[target]:
            raise CalibrationError(f"calibration: no residuals for target {target!r}")
        key = (target, float(coverage))
        if key not in self._cache:
            by = self.residuals[target]
            grouped = self.families.get(target, {})
            pooled = [s for s in by if s not in grouped]
            out: dict[str, CalibratedWidth] = {}
            if pooled:
                values = np.concatenate([by[s] for s in pooled])
                bins = np.concatenate([[s] * len(by[s]) for s in pooled])
                for s, q in conformal_half_widths(values, bins, coverage).items():
                    n = len(by[s])
                    method = "conformal" if np.isfinite(q) else "unbounded"
                    why = f"{n} residuals: conformal quantile"
                    if not np.isfinite(q):
                        why = f"{n} residuals, fewer than {conformal_min_scores(coverage)}"
                    out[s] = CalibratedWidth(q, method, 0, why)
            for s, labels in grouped.items():
                out[s] = family_half_width(by[s], labels, coverage, self.family_rule)
            self._cache[key] = {s: out[s] for s in by}
        return self._cache[key]

    def basis_methods(self, target: str, basis: list[str], coverage: float) -> list[str]:
        """The method of each row's interval (:data:`IntervalMethod`), as :meth:`interval` picks it.

        The stratum whose half-width a row got (its own, ``in_domain`` when that is wider, or
        the widest) names the method.

        Raises:
            CalibrationError: as :meth:`interval`.
        """
        methods = self.methods(target, coverage)
        return [methods[s].method for s in self._sources(target, basis, coverage)]

    def row_methods(self, basis: list[str], coverage: float) -> list[str]:
        """Per row, the method of its iteration and epoch intervals (a predictions column).

        Returns:
            The iteration interval's method (:meth:`basis_methods`), followed by
            ``" (epoch: <method>)"`` where the epoch interval's differs.

        Raises:
            CalibrationError: as :meth:`interval`, for either target.
        """
        iteration = self.basis_methods("iteration", basis, coverage)
        epoch = self.basis_methods("epoch", basis, coverage)
        return [i if i == e else f"{i} (epoch: {e})" for i, e in zip(iteration, epoch, strict=True)]

    def unbounded_reasons(self, basis_rows: dict[str, int], coverage: float) -> list[str]:
        """Why some rows' intervals are unbounded: one line per stratum and reason.

        Args:
            basis_rows: interval basis (a predictions' ``interval_basis``) -> rows with it.
            coverage: the coverage, in (0, 1).

        Returns:
            Lines such as ``iteration and epoch intervals unbounded for 2 rows (stratum
            unseen_family): 4 families, fewer than the 9 ...``, in :data:`STRATA` order; ``[]``
            when every interval is bounded.

        Raises:
            CalibrationError: as :meth:`interval`.
        """
        bases = list(basis_rows)
        unbounded: dict[tuple[str, str], dict[str, set[str]]] = {}
        for target in TARGETS:
            methods = self.methods(target, coverage)
            for base, stratum in zip(bases, self._sources(target, bases, coverage), strict=True):
                width = methods[stratum]
                if width.method == "unbounded":
                    by_target = unbounded.setdefault((stratum, width.reason), {})
                    by_target.setdefault(target, set()).add(base)
        lines = []
        for (stratum, reason), by_target in sorted(
            unbounded.items(), key=lambda item: STRATA.index(item[0][0])
        ):
            rows = sum(basis_rows[b] for b in set().union(*by_target.values()))
            targets = " and ".join(t for t in TARGETS if t in by_target)
            plural = "s" if len(by_target) > 1 else ""
            lines.append(
                f"{targets} interval{plural} unbounded for {rows} row{'s' * (rows != 1)} "
                f"(stratum {stratum}): {reason}"
            )
        return lines

    def _sources(self, target: str, basis: list[str], coverage: float) -> list[str]:
        """The stratum whose half-width each row of :meth:`interval` takes."""
        widths = self.half_widths(target, coverage)
        widest = max(widths, key=lambda s: widths[s])
        floor = "in_domain" if "in_domain" in widths else widest
        out = []
        for b in basis:
            if b == "widest" or b not in widths:
                if b != "widest" and b not in STRATA:
                    raise CalibrationError(f"interval basis {b!r}: not a stratum ({STRATA})")
                out.append(widest)
            elif b == "in_domain":
                out.append(b)
            else:
                out.append(b if widths[b] >= widths[floor] else floor)
        return out

    def interval(
        self, target: str, predicted: np.ndarray, basis: list[str], coverage: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Intervals of predictions, each from the stratum its row's basis names.

        A row outside the domain never gets an interval narrower than the in-domain one: its
        half-width is the larger of its stratum's and ``in_domain``'s. The basis ``widest``
        (an extrapolation no stratum calibrates: precision, nodes, world size, layer types)
        takes the widest stratum; a stratum the calibration lacks is treated as ``widest``.

        Args:
            target: ``iteration`` or ``epoch``.
            predicted: predicted times, shape (n,), seconds.
            basis: per row, a stratum of :data:`STRATA` or ``"widest"``.
            coverage: the coverage, in (0, 1).

        Returns:
            ``(low, high, half_width)``, each shape (n,): bounds in seconds (``0`` and ``inf``
            when unbounded) and the log-space half-width used.

        Raises:
            CalibrationError: as :meth:`half_widths`, or an unknown basis.
        """
        widths = self.half_widths(target, coverage)
        q = np.array([widths[s] for s in self._sources(target, basis, coverage)], dtype=float)
        predicted = np.asarray(predicted, dtype=float)
        with np.errstate(over="ignore"):
            return predicted * np.exp(-q), predicted * np.exp(q), q

    def to_dict(self) -> dict[str, Any]:
        """The JSON mapping stored as a bundle's ``calibration.json`` (:class:`CalibrationFile`)."""
        return CalibrationFile(
            format=FORMAT,
            score=SCORE,
            library=crepes_version(),
            method=self.method,
            training_data_sha256=self.training_data_sha256,
            source=self.source,
            residuals={
                t: {s: [float(x) for x in r] for s, r in by.items()}
                for t, by in self.residuals.items()
            },
            families={
                t: {s: [str(x) for x in f] for s, f in by.items()}
                for t, by in self.families.items()
                if by
            },
            family_rule=self.family_rule,
        ).model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Any, source: str = "<calibration>") -> IntervalCalibration:
        """The calibration of a :meth:`to_dict` mapping.

        Raises:
            CalibrationError: not a :class:`CalibrationFile` (a key missing or unknown, another
                format, an unknown target or stratum, a residual list empty or not of finite
                numbers, no ``iteration`` stratum, a family list whose length differs from its
                residuals'), naming ``source``, the field and the value.
        """
        try:
            parsed = parse_artefact(CalibrationFile, data, source)
        except ValueError as exc:
            raise CalibrationError(str(exc)) from None
        residuals = {
            t: {s: np.asarray(r, dtype=float) for s, r in by.items()}
            for t, by in parsed.residuals.items()
        }
        families = {
            t: {s: np.asarray(f, dtype=str) for s, f in by.items()}
            for t, by in parsed.families.items()
        }
        return cls(
            residuals, parsed.method, parsed.training_data_sha256, parsed.source, families,
            parsed.family_rule,
        )  # fmt: skip

    def write(self, path: Path) -> Path:
        """Write :meth:`to_dict` as JSON, atomically and durably (:mod:`scaledl.io.atomic`).

        Returns:
            ``path``.

        Raises:
            OSError: writing failed; ``path`` is unchanged.
        """
        return write_atomic(path, json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")

    @classmethod
    def read(cls, path: Path) -> IntervalCalibration:
        """Read a calibration file.

        Raises:
            CalibrationError: unreadable, not a regular file, too large or deeply nested, not
                finite JSON, or malformed (naming the file; :func:`scaledl.io.safe.read_json`).
        """
        try:
            data = read_json(path)
        except (OSError, UnsafeInputError) as exc:
            reason = str(exc).removeprefix(f"{path}: ")
            raise CalibrationError(f"{path}: cannot read calibration: {reason}") from None
        return cls.from_dict(data, source=str(path))


class CalibrationFile(Artefact):
    """A bundle's ``calibration.json``: the residuals of :class:`IntervalCalibration`.

    Attributes:
        format: the format version (:data:`FORMAT`).
        score: the non-conformity score (:data:`SCORE`).
        library: the conformal library and its version (``crepes X.Y.Z``).
        method: the method whose predictions were scored.
        training_data_sha256: SHA-256 of the profile tables (``""``: unknown).
        source: where the residuals came from.
        residuals: target -> stratum -> signed log residuals (finite, at least one each);
            ``iteration`` has at least one stratum.
        families: target -> stratum (of :data:`FAMILY_STRATA`) -> the family of each of its
            residuals (``{}``: no stratum calibrated by family).
        family_rule: how those strata are calibrated (:func:`family_half_width`); absent in
            files written before the normal prediction bound, which read as ``conformal``.
    """

    format: Literal[2]
    score: str
    library: str
    method: str
    training_data_sha256: str
    source: str
    residuals: dict[Target, dict[Stratum, Annotated[list[float], Field(min_length=1)]]]
    families: dict[Target, dict[Literal["unseen_family"], list[str]]] = {}
    family_rule: FamilyRule = "conformal"

    @model_validator(mode="after")
    def _iteration_calibrated(self) -> CalibrationFile:
        if not self.residuals.get("iteration"):
            raise ValueError("field 'residuals.iteration': no stratum (nothing calibrated)")
        for t, by in self.families.items():
            for s, labels in by.items():
                n = len(self.residuals.get(t, {}).get(s, []))
                if len(labels) != n:
                    raise ValueError(
                        f"field 'families.{t}.{s}' (value {len(labels)} labels): one family per "
                        f"residual ({n})"
                    )
        return self


def crepes_version() -> str:
    """The conformal library and its version (``crepes X.Y.Z``)."""
    return f"crepes {metadata.version('crepes')}"
