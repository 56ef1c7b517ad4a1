"""Published step times with a few runs of the held-out stack: the ``few_shot_source`` protocol.

A platform team that plans jobs on its cluster has measured a handful of its own steps. For
every source held out (one CSV file: one framework and software stack), ``k`` of its rows with
a measured step (:data:`FEW_SHOT_KS`: 1, 3, 5) are drawn as the team's own measurements,
:data:`FEW_SHOT_DRAWS` draws per ``k`` (seeded, :func:`few_shot_draws`). Every method may use
them and all other sources' rows, and is scored on the source's remaining scored rows only
(never on the ``k``):

* the per-source scale (:func:`~scaledl.stats.metrics.scale_factor`): one factor fitted on the
  ``k`` rows, the geometric mean of measured / predicted, times the method's
  leave-one-source-out prediction, for ``fixed_mfu`` and ``fixed_mfu_precision`` (their MFU is
  then the geometric mean of the ``k`` rows' implied MFUs: what a team does with its own
  runs), ``roofline``, ``composed`` and ``scaledl`` / ``scaledl_no_edges`` (the correction
  trained on the other sources, as in the leave-one-source-out fold; the ``k`` rows do not
  retrain it);
* ``fixed_mfu_pooled`` / ``fixed_mfu_precision_pooled``: the leave-one-source-out MFU fit
  (:func:`~scaledl.evaluation.published_runs.fit_mfu`) on the other sources' rows plus the
  ``k`` rows, the ``k`` rows weighing as one source.

Scores per ``k``: a source's MRE is the mean over its draws of the MRE on the rows not drawn;
the mean and max over sources; paired comparisons (:func:`~scaledl.stats.significance.
paired_comparison`, BCa) of ``scaledl`` and ``composed`` against the strongest of the four
fixed-MFU rules (the lowest mean MRE at that ``k``, so the choice cannot flatter ScaleDL) and of
``scaledl`` against ``composed``. The unit resampled is the row: its relative error averaged
over the draws in which it was scored, both methods' from the same draws, weighted by the share
of its source's scored (row, draw) pairs it holds, over the number of sources, so the compared
MREs are the reported means over sources. The interval is conditional on the draws. A per-source
scale multiplies every prediction of a source by one number, so Kendall's tau of layouts within
a (source, model, GPU count) group is the leave-one-source-out one (not recomputed).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from scaledl.stats.metrics import relative_errors, scale_factor
from scaledl.stats.significance import Comparison, paired_comparison

#: Runs of its own stack a team has measured.
FEW_SHOT_KS = (1, 3, 5)
#: Random draws of the ``k`` rows per source and ``k``.
FEW_SHOT_DRAWS = 20
#: Seed of the draws (with ``k`` and the source's name).
FEW_SHOT_SEED = 0
#: Methods scaled by one factor fitted on the ``k`` rows.
SCALED_METHODS = (
    "fixed_mfu",
    "fixed_mfu_precision",
    "roofline",
    "composed",
    "scaledl",
    "scaledl_no_edges",
)
#: Fixed-MFU rules fitted on the other sources plus the ``k`` rows.
POOLED_METHODS = ("fixed_mfu_pooled", "fixed_mfu_precision_pooled")
FEW_SHOT_METHODS = (*SCALED_METHODS[:2], *POOLED_METHODS, *SCALED_METHODS[2:])
FIXED_MFU_METHODS = (*SCALED_METHODS[:2], *POOLED_METHODS)
#: Paired comparisons per ``k``: ``(A, B)``, ``"baseline"`` the strongest fixed-MFU rule.
FEW_SHOT_PAIRS = (("scaledl", "baseline"), ("composed", "baseline"), ("scaledl", "composed"))

#: ``pooled(source, known)``: method of :data:`POOLED_METHODS` -> seconds of every row, fitted on
#: the scored rows of the other sources plus the rows ``known`` (positions) of ``source``.
PooledPredictor = Callable[[str, np.ndarray], dict[str, np.ndarray]]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class FewShotSource(_Model):
    """One held-out source at one ``k``.

    Attributes:
        scored: the source's rows with a measured step (``k`` of them known per draw).
        mre: method -> mean over draws of the MRE on the rows not drawn.
        mre_p10: method -> 10th percentile over draws of that MRE.
        mre_p90: method -> 90th percentile.
        scale: scaled method -> geometric mean over draws of its fitted factor (measured over
            predicted; for a fixed-MFU rule, ``1 / MFU``).
    """

    scored: int
    mre: dict[str, float]
    mre_p10: dict[str, float]
    mre_p90: dict[str, float]
    scale: dict[str, float]


class FewShotK(_Model):
    """Every held-out source with ``k`` of its rows known.

    Attributes:
        k: rows known per draw.
        sources: source -> its errors (sources with more than ``k`` scored rows).
        skipped: sources with at most ``k`` scored rows (nothing left to score).
        mean_mre: method -> unweighted mean over sources.
        max_mre: method -> the largest source MRE.
        baseline: the fixed-MFU rule with the lowest mean MRE at this ``k``.
        ratio: ``scaledl`` and ``composed`` -> their mean MRE over the baseline's (``None``: the
            baseline's is 0).
        comparisons: :data:`FEW_SHOT_PAIRS`, paired on the same rows of the same draws.
    """

    k: int
    sources: dict[str, FewShotSource]
    skipped: list[str]
    mean_mre: dict[str, float]
    max_mre: dict[str, float]
    baseline: str
    ratio: dict[str, float | None]
    comparisons: list[Comparison]


class FewShotResult(_Model):
    """The ``few_shot_source`` protocol (module docstring).

    Attributes:
        protocol: ``few_shot_source``.
        decision: the protocol's fixed choices, in words.
        draws: draws per source and ``k``.
        seed: seed of the draws.
        results: one per ``k``, ascending.
    """

    protocol: str
    decision: str
    draws: int
    seed: int
    results: list[FewShotK]


def few_shot_draws(
    rows: pd.DataFrame, source: str, k: int, draws: int, seed: int = FEW_SHOT_SEED
) -> list[np.ndarray]:
    """The ``k`` known rows of ``source`` per draw (reproducible with ``seed``).

    Args:
        rows: the answered rows (``source``, ``measured_s``; NaN: no measured step).
        source: the held-out source.
        k: rows per draw, >= 1.
        draws: draws, >= 1.
        seed: with ``k`` and the source's name, the draws' seed.

    Returns:
        ``draws`` sorted arrays of ``k`` distinct positions in ``rows``, each of a row of
        ``source`` with a measured step.

    Raises:
        ValueError: ``k`` or ``draws`` below 1, or ``source`` with at most ``k`` scored rows.
    """
    if k < 1 or draws < 1:
        raise ValueError(f"few-shot draws: k and draws must be >= 1, got k={k}, draws={draws}")
    scored = np.flatnonzero(
        (rows["source"] == source).to_numpy() & np.isfinite(rows["measured_s"].to_numpy(float))
    )
    if scored.size <= k:
        raise ValueError(
            f"few-shot draws: source {source!r} has {scored.size} scored rows, needs more than {k}"
        )
    rng = np.random.default_rng([seed, k, zlib.crc32(source.encode())])
    return [np.sort(rng.choice(scored, size=k, replace=False)) for _ in range(draws)]


def _one_k(
    rows: pd.DataFrame,
    base: dict[str, np.ndarray],
    pooled: PooledPredictor,
    k: int,
    draws: int,
    seed: int,
) -> FewShotK:
    measured = rows["measured_s"].to_numpy(dtype=float)
    sources, skipped = {}, []
    units: dict[str, list[np.ndarray]] = {m: [] for m in FEW_SHOT_METHODS}
    weights: list[np.ndarray] = []
    for source in sorted(rows["source"].unique()):
        scored = np.flatnonzero((rows["source"] == source).to_numpy() & np.isfinite(measured))
        if scored.size <= k:
            skipped.append(str(source))
            continue
        error_sum = {m: np.zeros(len(rows)) for m in FEW_SHOT_METHODS}
        count = np.zeros(len(rows))
        draw_mre = {m: [] for m in FEW_SHOT_METHODS}
        scales = {m: [] for m in SCALED_METHODS}
        for known in few_shot_draws(rows, source, k, draws, seed):
            test = np.setdiff1d(scored, known)
            pooled_s = pooled(source, known)
            for m in FEW_SHOT_METHODS:
                if m in SCALED_METHODS:
                    factor = scale_factor(base[m][known], measured[known])
                    scales[m].append(factor)
                    pred = base[m][test] * factor
                else:
                    pred = pooled_s[m][test]
                re = relative_errors(pred, measured[test])
                draw_mre[m].append(float(re.mean()))
                error_sum[m][test] += re
            count[test] += 1
        sources[str(source)] = FewShotSource(
            scored=int(scored.size),
            mre={m: float(np.mean(v)) for m, v in draw_mre.items()},
            mre_p10={m: float(np.percentile(v, 10)) for m, v in draw_mre.items()},
            mre_p90={m: float(np.percentile(v, 90)) for m, v in draw_mre.items()},
            scale={m: float(np.exp(np.mean(np.log(v)))) for m, v in scales.items()},
        )
        seen = count > 0
        for m in FEW_SHOT_METHODS:
            units[m].append(error_sum[m][seen] / count[seen])
        # Each row's share of its source's (row, draw) pairs: the weighted mean of the per-row
        # mean errors is the mean over draws of the source's MRE.
        weights.append(count[seen] / (draws * (scored.size - k)))
    if not sources:
        raise ValueError(f"few-shot: no source has more than k={k} scored rows")
    mean = {m: float(np.mean([s.mre[m] for s in sources.values()])) for m in FEW_SHOT_METHODS}
    worst = {m: float(np.max([s.mre[m] for s in sources.values()])) for m in FEW_SHOT_METHODS}
    baseline = min(FIXED_MFU_METHODS, key=lambda m: mean[m])
    errors = {m: np.concatenate(v) for m, v in units.items()}
    w = np.concatenate(weights)
    comparisons = []
    for a, b in FEW_SHOT_PAIRS:
        b = baseline if b == "baseline" else b
        comparisons.append(
            paired_comparison(errors[a], errors[b], a, b, weights=w, n_resamples=9999)
        )
    return FewShotK(
        k=k, sources=sources, skipped=skipped, mean_mre=mean, max_mre=worst, baseline=baseline,
        ratio={m: mean[m] / mean[baseline] if mean[baseline] > 0 else None
               for m in ("scaledl", "composed")},
        comparisons=comparisons,
    )  # fmt: skip


def few_shot_source(
    rows: pd.DataFrame,
    base: dict[str, np.ndarray],
    pooled: PooledPredictor,
    ks: Sequence[int] = FEW_SHOT_KS,
    draws: int = FEW_SHOT_DRAWS,
    seed: int = FEW_SHOT_SEED,
) -> FewShotResult:
    """Score every method with ``k`` rows of the held-out source known (module docstring).

    Args:
        rows: the answered rows (``source``, ``measured_s``).
        base: every method of :data:`SCALED_METHODS` -> its leave-one-source-out seconds per
            row (fixed-MFU rules: the ideal step at MFU 1), shape (n_rows,), positive.
        pooled: the fixed-MFU rules fitted on the other sources plus the known rows
            (:data:`PooledPredictor`).
        ks: rows known per draw.
        draws: draws per source and ``k``.
        seed: seed of the draws.

    Returns:
        The :class:`FewShotResult`.

    Raises:
        ValueError: a method missing from ``base``, a prediction of another length, ``k`` or
            ``draws`` below 1, or no source with more than ``k`` scored rows.
    """
    missing = [m for m in SCALED_METHODS if m not in base]
    if missing:
        raise ValueError(f"few-shot: base predictions lack {missing}")
    wrong = [m for m in SCALED_METHODS if np.shape(base[m]) != (len(rows),)]
    if wrong:
        raise ValueError(f"few-shot: base predictions of {wrong} do not have {len(rows)} rows")
    ks = sorted(ks)
    results = [_one_k(rows, base, pooled, k, draws, seed) for k in ks]
    decision = (
        f"per held-out source, k in {ks} of its scored rows known, {draws} seeded draws per k "
        f"(seed {seed}), scored on its other scored rows only; fixed-MFU rules, roofline, "
        "composed and ScaleDL (the correction of the leave-one-source-out fold, not retrained) "
        "times one factor per source, the geometric mean of measured/predicted on the k rows "
        "(the fixed-MFU rules' MFU: the geometric mean of the k rows' implied MFUs); also the "
        "fixed-MFU rules fitted on the other sources plus the k rows (pooled, the k rows as one "
        "source); paired comparisons against the strongest of the four fixed-MFU rules at each k; "
        "fixed before the first few-shot run"
    )
    return FewShotResult(
        protocol="few_shot_source", decision=decision, draws=draws, seed=seed, results=results
    )
