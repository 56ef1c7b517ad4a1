"""A few rows of the held-out stack known (scaledl.evaluation.published_runs_few_shot)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scaledl.evaluation.published_runs import (
    FIXED_MFU_COLUMNS,
    METHODS,
    PublishedRunsResult,
    compose_rows,
    few_shot_line,
    layout_ranking,
    pooled_fixed_mfu,
)
from scaledl.evaluation.published_runs_few_shot import (
    FEW_SHOT_KS,
    FEW_SHOT_METHODS,
    POOLED_METHODS,
    SCALED_METHODS,
    few_shot_draws,
    few_shot_source,
)
from scaledl.external.published_runs import default_paths, read_published_runs

RESULT = Path(__file__).resolve().parents[2] / "docs" / "results" / "published_runs.json"


def _rows(n_per_source=(12, 9, 7), seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    sources = np.repeat(["a", "b", "c"], n_per_source)
    measured = rng.uniform(1.0, 10.0, sources.size)
    measured[2] = np.nan  # a row without a measured step: never drawn, never scored
    return pd.DataFrame({"source": sources, "measured_s": measured})


def _base(rows: pd.DataFrame, **override) -> dict[str, np.ndarray]:
    truth = rows["measured_s"].fillna(1.0).to_numpy()
    return {m: override.get(m, truth) for m in SCALED_METHODS}


def _pooled_from(pred: np.ndarray):
    return lambda source, known: {m: pred for m in POOLED_METHODS}


def test_draws_are_reproducible_distinct_and_of_scored_rows_of_the_source():
    rows = _rows()
    first = few_shot_draws(rows, "a", 3, 20, seed=7)
    assert [d.tolist() for d in first] == [d.tolist() for d in few_shot_draws(rows, "a", 3, 20, 7)]
    other = few_shot_draws(rows, "a", 3, 20, seed=8)
    assert [d.tolist() for d in first] != [d.tolist() for d in other]
    for known in first:
        assert len(set(known.tolist())) == 3
        assert (rows["source"].to_numpy()[known] == "a").all()
        assert 2 not in known  # no measured step
    with pytest.raises(ValueError, match="'c' has 7 scored rows, needs more than 7"):
        few_shot_draws(rows, "c", 7, 1)
    with pytest.raises(ValueError, match="k and draws must be >= 1"):
        few_shot_draws(rows, "a", 0, 1)


def test_the_known_rows_are_never_scored():
    """A method exact on every row but wrong on the drawn ones keeps its exactness if they are
    unscored: its error only comes through the scale, which the test makes 1."""
    rows = _rows()
    measured = rows["measured_s"].to_numpy()
    truth = np.nan_to_num(measured, nan=1.0)
    seen_known = []

    def pooled(source, known):
        seen_known.append((source, known.copy()))
        # exact everywhere except the known rows (100x off there): scored only if leaked
        pred = truth.copy()
        pred[known] *= 100.0
        return {m: pred for m in POOLED_METHODS}

    result = few_shot_source(rows, _base(rows), pooled, ks=(1, 3), draws=5, seed=1)
    for k_result in result.results:
        for source in ("a", "b", "c"):
            assert k_result.sources[source].mre["fixed_mfu_pooled"] == pytest.approx(0.0)
    assert len(seen_known) == 2 * 3 * 5
    assert result.results[0].sources["a"].scored == 11  # row 2 has no measured step


def test_a_constant_bias_vanishes_after_scaling_while_the_mfu_rule_keeps_its_shape_error():
    rows = _rows((15, 15, 15))
    truth = np.nan_to_num(rows["measured_s"].to_numpy(), nan=1.0)
    bias = {"a": 0.5, "b": 1.8, "c": 0.9}
    composed = truth * rows["source"].map(bias).to_numpy()  # right shape, one bias per source
    rng = np.random.default_rng(3)
    ideal = truth * rng.lognormal(0.0, 0.4, truth.size)  # the 6N rule: wrong shape
    base = _base(rows, composed=composed, scaledl=composed, fixed_mfu=ideal,
                 fixed_mfu_precision=ideal, roofline=ideal, scaledl_no_edges=ideal)  # fmt: skip
    result = few_shot_source(rows, base, _pooled_from(ideal * 2.0), ks=(1, 3), draws=10)
    for k_result in result.results:
        assert k_result.mean_mre["composed"] == pytest.approx(0.0, abs=1e-9)
        assert k_result.mean_mre["scaledl"] == pytest.approx(0.0, abs=1e-9)
        assert k_result.mean_mre["fixed_mfu"] > 0.15
        assert k_result.sources["b"].scale["composed"] == pytest.approx(1 / 1.8)
        vs = next(c for c in k_result.comparisons if c.method_a == "composed")
        assert vs.method_b == k_result.baseline and vs.verdict == "better"
        assert k_result.ratio["composed"] == pytest.approx(0.0, abs=1e-9)


def test_a_scale_cannot_fix_a_wrong_shape_and_the_mfu_rule_wins_when_it_is_exact():
    rows = _rows((15, 15, 15))
    truth = np.nan_to_num(rows["measured_s"].to_numpy(), nan=1.0)
    rng = np.random.default_rng(4)
    noisy = truth * 0.5 * rng.lognormal(0.0, 0.3, truth.size)  # per-row error: no scale fixes it
    ideal = truth * 0.4  # the 6N rule at MFU 0.4, exact up to its MFU
    base = _base(rows, composed=noisy, scaledl=noisy, roofline=noisy, scaledl_no_edges=noisy,
                 fixed_mfu=ideal, fixed_mfu_precision=ideal * 2)  # fmt: skip
    result = few_shot_source(rows, base, _pooled_from(ideal * 3.0), ks=(3,), draws=10)
    k3 = result.results[0]
    assert k3.mean_mre["fixed_mfu"] == pytest.approx(0.0, abs=1e-9)
    assert k3.mean_mre["fixed_mfu_pooled"] == pytest.approx(0.2)
    assert k3.baseline in ("fixed_mfu", "fixed_mfu_precision")
    assert k3.mean_mre["composed"] > 0.1
    vs = next(c for c in k3.comparisons if c.method_a == "scaledl" and c.method_b == k3.baseline)
    assert vs.verdict == "worse"


def test_paired_mres_are_the_means_over_sources_and_draws():
    rows = _rows()
    truth = np.nan_to_num(rows["measured_s"].to_numpy(), nan=1.0)
    rng = np.random.default_rng(5)
    base = {m: truth * rng.lognormal(0.0, 0.3, truth.size) for m in SCALED_METHODS}
    result = few_shot_source(rows, base, _pooled_from(truth * 1.3), ks=(1, 5), draws=6)
    for k_result in result.results:
        assert set(k_result.mean_mre) == set(FEW_SHOT_METHODS)
        for c in k_result.comparisons:
            assert c.mre_a == pytest.approx(k_result.mean_mre[c.method_a])
            assert c.mre_b == pytest.approx(k_result.mean_mre[c.method_b])
        assert k_result.mean_mre["fixed_mfu_pooled"] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="lack"):
        few_shot_source(rows, {"composed": truth}, _pooled_from(truth))
    with pytest.raises(ValueError, match="no source has more than k=20"):
        few_shot_source(rows, base, _pooled_from(truth), ks=(20,), draws=1)


def test_pooled_fixed_mfu_fits_the_other_sources_plus_the_known_rows_as_one_source():
    rows = pd.DataFrame({
        "source": ["a", "a", "b", "b", "h", "h", "h"],
        "measured_s": [1.0, 1.0, 1.0, np.nan, 1.0, 1.0, 1.0],
        "ideal_s": [0.5, 0.5, 0.25, 0.25, 0.9, 0.1, 0.1],
        "ideal_precision_s": [0.25, 0.25, 0.25, 0.25, 0.9, 0.1, 0.1],
    })  # fmt: skip
    pooled = pooled_fixed_mfu(rows)
    # a implies MFU 0.5, b 0.25 (its unscored row unused), the known row of h 0.9, each source
    # weighing 1: the weighted median of 1/MFU with masses w*u is h's 0.9.
    out = pooled("h", np.array([4]))
    assert out["fixed_mfu_pooled"] == pytest.approx(rows["ideal_s"].to_numpy() / 0.9)
    assert out["fixed_mfu_precision_pooled"][4] == pytest.approx(1.0)
    # with row 5 known instead (implied 0.1), the median moves to a's 0.5: rows 4 and 6 unused
    assert pooled("h", np.array([5]))["fixed_mfu_pooled"][4] == pytest.approx(0.9 / 0.5)


def test_a_per_source_scale_leaves_the_layout_ranking_unchanged():
    rows = pd.DataFrame({
        "source": ["s"] * 4 + ["t"] * 3, "model": "m", "n_gpus": 8, "gpu": "g",
        "precision_raw": "bf16", "seq_len": 4096,
        "config_key": ["k0", "k1", "k2", "k3", "j0", "j1", "j2"],
        "tokens": [1.0, 1.0, 2.0, 2.0, 1.0, 2.0, 3.0],
        "measured_s": [1.0, 2.0, 6.0, 7.0, 3.0, 2.0, 9.0],
    })  # fmt: skip
    rng = np.random.default_rng(6)
    pred = {m: rng.uniform(1, 10, len(rows)) for m in METHODS}
    scale = rows["source"].map({"s": 0.3, "t": 4.0}).to_numpy()
    before = layout_ranking(rows, pred)
    after = layout_ranking(rows, {m: p * scale for m, p in pred.items()})
    assert len(before.groups) == 2 and before == after


def test_the_committed_few_shot_result_reproduces_from_the_committed_predictions():
    """Every source scored at every k, and the figures recomputed from the committed
    leave-one-source-out predictions (the compositions give the ideal steps; seconds)."""
    result = PublishedRunsResult.read(RESULT)
    few = result.few_shot
    assert few.protocol == "few_shot_source" and [r.k for r in few.results] == list(FEW_SHOT_KS)
    loso = result.protocols["leave_one_source_out"]
    for k_result in few.results:
        assert set(k_result.sources) == {g for g, v in loso.groups.items() if v.scored}
        for name, source in k_result.sources.items():
            assert source.scored == loso.groups[name].scored
    rows, _, _ = compose_rows(read_published_runs(default_paths()).runs)
    committed = {(r.source, r.row): r.predicted_s for r in result.rows}
    base = {m: rows[c].to_numpy() for m, c in FIXED_MFU_COLUMNS.items()}
    keys = list(zip(rows["source"], rows["row"], strict=True))
    for m in ("roofline", "composed", "scaledl", "scaledl_no_edges"):
        base[m] = np.array([committed[key][m] for key in keys])
    again = few_shot_source(rows, base, pooled_fixed_mfu(rows), draws=few.draws, seed=few.seed)
    for mine, theirs in zip(again.results, few.results, strict=True):
        assert mine.baseline == theirs.baseline
        assert mine.mean_mre == pytest.approx(theirs.mean_mre, rel=1e-6)
        for c_mine, c_theirs in zip(mine.comparisons, theirs.comparisons, strict=True):
            assert c_mine.ci_low == pytest.approx(c_theirs.ci_low, rel=1e-6)


def test_the_progress_line_names_the_sources_skipped_at_each_k():
    rows = _rows()  # scored rows: a 11, b 9, c 7
    result = few_shot_source(rows, _base(rows), _pooled_from(rows["measured_s"].fillna(1.0)),
                             ks=(1, 8, 10), draws=2)  # fmt: skip
    assert [r.skipped for r in result.results] == [[], ["c"], ["b", "c"]]
    assert few_shot_line(result, 2.04) == (
        "few_shot_source: 2.0 s; skipped (at most k scored rows, nothing left to score): "
        "k=8: c; k=10: b, c"
    )
    none = few_shot_source(rows, _base(rows), _pooled_from(rows["measured_s"].fillna(1.0)),
                           ks=(1,), draws=2)  # fmt: skip
    assert few_shot_line(none, 1.0) == "few_shot_source: 1.0 s"
