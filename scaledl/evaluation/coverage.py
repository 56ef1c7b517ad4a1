"""Empirical coverage of the conformal intervals (:mod:`scaledl.models.intervals`) per split.

The evaluation's out-of-sample predictions (one model per split, never trained on its test
workloads) are scored with the same non-conformity score the predictor bundle uses, and every
test prediction gets an interval calibrated *without* its own residual, so the coverage
measured is the coverage a user gets, with nothing tuned on the workload being scored:

* **ID** (random held-out split): each test workload's interval is calibrated on the residuals
  of the *other* ID test workloads (leave-one-out split conformal: ``n - 1`` calibration
  residuals, all from the same model, exchangeable with the one scored);
* **each left-out family** ``F``: its workloads' intervals are calibrated on the leave-one-family
  -out residuals of the *other* families, one score per family
  (:func:`~scaledl.models.intervals.family_half_width`, the function the bundle's
  ``unseen_family`` stratum uses: the conformal quantile of the family scores with enough
  families, else a normal prediction bound over them; the family being scored never
  calibrates its own interval, exactly as a new family meets the bundle's stratum). The other
  families' residuals come from models that were trained on ``F``'s workloads (one
  leave-one-family-out fit per family, not one per pair): ``F``'s residuals never enter its
  calibration, but ``F``'s labels shaped the models that scored the others;
* **extrapolation**: leave-one-out over its test workloads, as for ID.

For each split, method and target (iteration, epoch) it reports the coverage, its exact 95%
Clopper-Pearson interval (``scipy.stats.binomtest``: with tens of workloads a coverage is
uncertain by several points), the median relative width ``(high - low) / predicted`` and how
many intervals were unbounded (too few calibration residuals, or for a left-out family fewer
than 3 other families), and for a left-out family which method calibrated it
(``family_calibration``: ``conformal`` from 9 families at 90%, ``normal_prediction_bound``
from 3 to 8, ``unbounded``). The interval bounds are added to
the predictions (``pred_<target>_s_low/high``) for the report's headline figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import binomtest

from scaledl.evaluation import targets as accuracy_targets
from scaledl.evaluation.targets import Target, resolve
from scaledl.models.intervals import (
    SCORE,
    TARGETS,
    CalibratedWidth,
    IntervalCalibration,
    conformal_half_width,
    crepes_version,
    family_half_width,
    log_residuals,
)


def _summary(
    residual: np.ndarray,
    q: np.ndarray,
    calibration_size: np.ndarray,
    calibration_families: int | None = None,
    family_calibration: str | None = None,
) -> dict:
    """Coverage, its exact interval, median width and sizes of one group of intervals."""
    n = len(residual)
    covered = int((np.abs(residual) <= q).sum())
    ci = binomtest(covered, n).proportion_ci(confidence_level=0.95, method="exact")
    width = np.median(np.exp(q) - np.exp(-q))
    return {
        "coverage": covered / n,
        "coverage_ci_low": float(ci.low),
        "coverage_ci_high": float(ci.high),
        "median_relative_width": float(width) if np.isfinite(width) else None,
        "n": n,
        "n_covered": covered,
        "n_unbounded": int(np.isinf(q).sum()),
        "calibration_size": int(np.min(calibration_size)),
        "calibration_families": calibration_families,
        "family_calibration": family_calibration,
    }


def _leave_one_out(residual: np.ndarray, coverage: float) -> np.ndarray:
    """Half-width of each residual's interval, calibrated on all the others."""
    n = len(residual)
    if n < 2:
        return np.full(n, np.inf)
    return np.array(
        [conformal_half_width(np.delete(residual, i), coverage) for i in range(n)], dtype=float
    )


def _residuals(rows: pd.DataFrame, target: str) -> tuple[np.ndarray, np.ndarray]:
    """Log residuals of a target and the mask of rows that have one."""
    true = rows[f"true_{target}_s"].to_numpy(dtype=float)
    pred = rows[f"pred_{target}_s"].to_numpy(dtype=float)
    ok = np.isfinite(true) & np.isfinite(pred) & (true > 0) & (pred > 0)
    r = np.full(len(rows), np.nan)
    r[ok] = log_residuals(pred[ok], true[ok])
    return r, ok


def interval_coverage(
    predictions: pd.DataFrame, coverage: float = 0.9
) -> tuple[dict, pd.DataFrame]:
    """Coverage and width of the conformal intervals per split, method and target.

    Args:
        predictions: the evaluation's predictions: ``split`` (``id``, ``ood/<family>``,
            ``extrapolation``), ``method``, ``workload_id``, ``true_<target>_s`` and
            ``pred_<target>_s`` for ``iteration`` and ``epoch``.
        coverage: the nominal coverage, in (0, 1).

    Returns:
        ``(section, predictions)``: the ``intervals`` section of ``metrics.json`` without its
        ``coverage``, ``score``, ``library``, ``calibration`` and ``targets`` keys (see
        :class:`~scaledl.evaluation.results.IntervalResults`), and a copy of ``predictions``
        with ``pred_<target>_s_low`` and ``pred_<target>_s_high`` (NaN where a target has no
        measurement).

    Raises:
        scaledl.models.intervals.CalibrationError: ``coverage`` outside (0, 1).
    """
    out = predictions.copy()
    split = out["split"].astype(str).to_numpy()
    is_ood = np.char.startswith(split.astype(str), "ood/")
    family_of = np.array([s[4:] if o else "" for s, o in zip(split, is_ood, strict=True)], str)
    families = sorted(set(family_of[is_ood]))
    # Evaluation groups: (section path, rows of the split) and how each is calibrated.
    groups = [
        (("id",), split == "id", "loo"),
        (("extrapolation",), split == "extrapolation", "loo"),
    ]
    groups += [(("per_family", f), split == f"ood/{f}", "others") for f in families]
    section: dict = {
        "id": {"methods": {}},
        "ood": {"per_family": {f: {} for f in families}, "pooled": {}},
        "extrapolation": {"methods": {}},
    }
    for target in TARGETS:
        r, ok = _residuals(out, target)
        q = np.full(len(out), np.nan)
        size = np.zeros(len(out), dtype=int)
        how = np.full(len(out), "", dtype=object)  # family calibration method per row
        for method in dict.fromkeys(out["method"]):
            mine = ok & (out["method"] == method).to_numpy()
            for key, in_split, protocol in groups:
                rows = mine & in_split
                if not rows.any():
                    continue
                n_families, family_method = None, None
                if protocol == "loo":
                    q[rows] = _leave_one_out(r[rows], coverage)
                    size[rows] = rows.sum() - 1
                else:  # a left-out family: calibrated on the other families only
                    pool = mine & is_ood & ~in_split
                    width = (
                        family_half_width(r[pool], family_of[pool], coverage)
                        if pool.any()
                        else None
                    )
                    q[rows] = np.inf if width is None else width.half_width
                    size[rows] = pool.sum()
                    n_families = 0 if width is None else width.families
                    family_method = "unbounded" if width is None else width.method
                    how[rows] = family_method
                summary = _summary(r[rows], q[rows], size[rows], n_families, family_method)
                _store(section, key, method, target, summary)
            pooled = mine & is_ood
            if pooled.any():
                used = ", ".join(sorted(set(how[pooled])))
                summary = _summary(r[pooled], q[pooled], size[pooled], None, used)
                _store(section, ("pooled",), method, target, summary)
        pred = out[f"pred_{target}_s"].to_numpy(dtype=float)
        with np.errstate(over="ignore"):
            out[f"pred_{target}_s_low"] = pred * np.exp(-q)
            out[f"pred_{target}_s_high"] = pred * np.exp(q)
    if not families:
        section["ood"] = {"skipped": "no leave-one-family-out split"}
    if not section["extrapolation"]["methods"]:
        section["extrapolation"] = {"skipped": "no extrapolation split"}
    return section, out


def _store(section: dict, key: tuple, method: str, target: str, summary: dict) -> None:
    """Put a summary at ``section[...][method][target]`` (the other target ``None`` until set)."""
    if key[0] == "per_family":
        node = section["ood"]["per_family"][key[1]]
    elif key[0] == "pooled":
        node = section["ood"]["pooled"]
    else:
        node = section[key[0]]["methods"]
    node.setdefault(method, {"iteration": None, "epoch": None})[target] = summary


def coverage_targets(
    section: dict, coverage: float, method: str = "scaledl"
) -> list[accuracy_targets.TargetResult]:
    """The interval targets, measured: coverage in the band on ID and on each left-out family.

    The band is the one of the ``interval_coverage_*`` rows of
    :data:`scaledl.evaluation.targets.TARGETS`.

    Args:
        section: the ``intervals`` section (as :func:`interval_coverage` returns it).
        coverage: the nominal coverage.
        method: the method the targets are about.

    Returns:
        Entries (``value``: the coverage, ``ci_low``/``ci_high``: its 95% interval,
        ``extra``: ``n`` and ``n_unbounded``; ``met`` None when not measured, False when an
        interval was unbounded: an infinite interval covers everything and says nothing).
    """
    root = {"intervals": section}

    def row(spec: Target, name: str, **fields: str) -> accuracy_targets.TargetResult:
        words = {"coverage": f"{coverage:.0%}", "name": name, "method": method}
        # The path ends in the coverage of the summary the measured text quotes.
        s = resolve(root, spec.path.format(method=method, **fields).rsplit(".", 1)[0])
        if s is None:
            return spec.result("not evaluated", None, **words)
        measured = (
            f"{s['coverage']:.1%} of {s['n']} (95% CI {s['coverage_ci_low']:.0%}-"
            f"{s['coverage_ci_high']:.0%})"
        )
        if s["n_unbounded"]:
            why = (
                f" from {s['calibration_families']} families"
                if s.get("calibration_families") is not None
                else f" from {s['calibration_size']} residuals"
            )
            measured += f", {s['n_unbounded']} intervals unbounded (calibrated{why})"
        elif s.get("family_calibration") == "normal_prediction_bound":
            measured += (
                f", normal prediction bound over {s['calibration_families']} families "
                "(too few for the conformal quantile)"
            )
        return spec.result(
            measured,
            spec.check(s["coverage"]) and not s["n_unbounded"],
            value=s["coverage"],
            ci_low=s["coverage_ci_low"],
            ci_high=s["coverage_ci_high"],
            extra={"n": s["n"], "n_unbounded": s["n_unbounded"]},
            **words,
        )

    per_family = accuracy_targets.target("interval_coverage_family")
    rows = [row(accuracy_targets.target("interval_coverage_id"), "ID")]
    ood = section["ood"]
    if "per_family" in ood:
        rows += [row(per_family, f"left-out {f}", family=f) for f in ood["per_family"]]
    else:
        rows.append(row(per_family, "left-out families", family=""))
    return rows


def family_coverage(predictions: pd.DataFrame, coverage: float) -> dict:
    """Coverage of the unseen-family intervals on leave-one-family-out predictions alone.

    The reference evaluation's view of :func:`interval_coverage`: the prediction of a workload
    is the mean over model seeds (as its MRE is), each left-out family is calibrated on the
    other families (:func:`~scaledl.models.intervals.family_half_width`), and the
    interval a family never seen would get from a predictor calibrated on *all* the families
    (as the registered bundle's ``unseen_family`` stratum is) is given as its factors.

    Args:
        predictions: leave-one-family-out rows: ``method``, ``seed``, ``workload_id``,
            ``family``, ``true_<target>_s`` and ``pred_<target>_s`` for ``iteration`` and
            ``epoch`` (any ``split`` column is replaced by ``ood/<family>``).
        coverage: the nominal coverage, in (0, 1).

    Returns:
        ``{"coverage", "score", "library", "per_family", "pooled", "new_family"}``: the first
        three as in ``metrics.json``'s ``intervals``, ``per_family`` and ``pooled`` as its
        ``intervals.ood``, ``new_family``: method -> ``{"families", "half_width_log",
        "low_factor", "high_factor", "relative_width", "family_calibration",
        "family_calibration_reason"}`` of the iteration-time interval
        ``[predicted * low_factor, predicted * high_factor]`` (factors ``0`` / ``null`` and
        width ``null`` when unbounded; ``family_calibration``: ``conformal``,
        ``normal_prediction_bound`` or ``unbounded``, and why).

    Raises:
        scaledl.models.intervals.CalibrationError: ``coverage`` outside (0, 1).
        KeyError: a column is missing (the message names it).
    """
    columns = [f"{k}_{t}_s" for t in TARGETS for k in ("true", "pred")]
    per = predictions.groupby(["method", "family", "workload_id"], sort=True)[columns].mean()
    per = per.reset_index()
    per["split"] = "ood/" + per["family"].astype(str)
    section, _ = interval_coverage(per, coverage)
    new_family = {}
    for method, rows in per.groupby("method", sort=False):
        r, ok = _residuals(rows, "iteration")
        families = rows["family"].astype(str).to_numpy()[ok]
        width = (
            family_half_width(r[ok], families, coverage)
            if ok.any()
            else CalibratedWidth(np.inf, "unbounded", 0, "no usable iteration prediction")
        )
        q = width.half_width
        bounded = bool(np.isfinite(q))
        new_family[str(method)] = {
            "families": width.families,
            "half_width_log": float(q) if bounded else None,
            "low_factor": float(np.exp(-q)),
            "high_factor": float(np.exp(q)) if bounded else None,
            "relative_width": float(np.exp(q) - np.exp(-q)) if bounded else None,
            "family_calibration": width.method,
            "family_calibration_reason": width.reason,
        }
    ood = section["ood"]
    return {
        "coverage": coverage,
        "score": SCORE,
        "library": crepes_version(),
        "per_family": ood.get("per_family", {}),
        "pooled": ood.get("pooled", {}),
        "new_family": new_family,
    }


def evaluate_intervals(
    predictions: pd.DataFrame,
    coverage: float,
    training_data_sha256: str = "",
    source: str = "",
    method: str = "scaledl",
) -> tuple[dict, pd.DataFrame, IntervalCalibration | None]:
    """The evaluation's interval stage: coverage per split and the bundle's calibration.

    Reuses the evaluation's out-of-sample predictions: no model is fitted here.

    Args:
        predictions: the evaluation's predictions (see :func:`interval_coverage`).
        coverage: the nominal coverage.
        training_data_sha256: SHA-256 of the profile tables evaluated (recorded in the
            calibration, checked when it is stored in a bundle).
        source: where the predictions are written (recorded in the calibration).
        method: the method whose residuals calibrate the predictor bundle.

    Returns:
        ``(section, predictions, calibration)``: the ``intervals`` section of ``metrics.json``,
        the predictions with interval bounds, and the
        :class:`~scaledl.models.intervals.IntervalCalibration` of ``method`` (``None`` when it
        was not evaluated).
    """
    section, predictions = interval_coverage(predictions, coverage)
    calibration = None
    if method in set(predictions["method"]):
        calibration = IntervalCalibration.from_predictions(
            predictions, method, training_data_sha256, source
        )
    section = {
        "coverage": coverage,
        "score": SCORE,
        "library": crepes_version(),
        **section,
        "calibration": None if calibration is None else calibration.sizes(),
        "calibration_methods": None
        if calibration is None
        else {
            t: {s: w.method for s, w in calibration.methods(t, coverage).items()}
            for t in calibration.residuals
        },
        "targets": [t.to_dict() for t in coverage_targets(section, coverage, method)],
    }
    return section, predictions, calibration
