"""Published LLM step times held out (scaledl.evaluation.published_runs), its block and CLI."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from scaledl.cli import app
from scaledl.evaluation.published_runs import (
    METHODS,
    PublishedRunsResult,
    check_sources,
    compose_rows,
    cross_source_duplicates,
    fit_mfu,
    layout_ranking,
    noise_floor,
    predict_fold,
    protocol_folds,
    protocol_result,
)
from scaledl.external.published_runs import default_paths, read_published_runs
from scaledl.models.step_correction import DEFAULT_CONFIG
from scaledl.report.blocks.published_runs import published_runs_markdown
from scaledl.report.published_runs import published_runs_html

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "docs" / "results" / "published_runs.json"


def test_fit_mfu_minimises_the_weighted_mre():
    rng = np.random.default_rng(0)
    u, w = rng.uniform(0.2, 0.6, 40), rng.uniform(0.5, 2.0, 40)
    mfu = fit_mfu(u, w)
    grid = np.linspace(0.1, 0.8, 7001)
    loss = [np.sum(w * np.abs(u / g - 1)) for g in grid]
    assert np.sum(w * np.abs(u / mfu - 1)) <= min(loss) + 1e-9
    assert fit_mfu(np.array([0.4]), np.array([1.0])) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="training row"):
        fit_mfu(np.array([]), np.array([]))


def _rows() -> pd.DataFrame:
    return pd.DataFrame({
        "source": ["a", "a", "b", "b", "c", "c"],
        "generation": ["hopper", "ampere", "hopper", "hopper", "blackwell", "ampere"],
        "n_params": [1, 2, 3, 4, 5, 100], "n_gpus": [8, 8, 16, 16, 64, 1024],
        "measured_s": [1.0, 2.0, np.nan, 4.0, 5.0, 6.0],
    })  # fmt: skip


def test_protocol_folds_hold_out_sources_generations_and_the_largest():
    rows = _rows()
    loso = dict(protocol_folds(rows, "leave_one_source_out"))
    assert list(loso) == ["a", "b", "c"] and loso["b"].tolist() == [0, 0, 1, 1, 0, 0]
    logo = dict(protocol_folds(rows, "leave_one_generation_out"))
    assert logo["ampere"].tolist() == [0, 1, 0, 0, 0, 1]
    largest = protocol_folds(rows, "largest_held_out")
    assert [m.sum() for _, m in largest] == [1, 1] and largest[0][1][5]
    with pytest.raises(ValueError, match="unknown protocol"):
        protocol_folds(rows, "random")


def test_protocol_result_means_over_groups_and_pairs_rows():
    rows = _rows()
    folds = []
    for name, held in protocol_folds(rows, "leave_one_source_out"):
        measured = rows["measured_s"].to_numpy()[held]
        pred = {m: np.nan_to_num(measured, nan=1.0) * (1.1 if m == "scaledl" else 1.5)
                for m in METHODS}  # fmt: skip
        folds.append(
            (name, held, pred, {"fixed_mfu": 0.4, "fixed_mfu_precision": 0.3}, "constant on 3 rows")
        )
    result = protocol_result(rows, folds)
    assert result.groups["b"].answered == 2 and result.groups["b"].scored == 1
    assert result.mean_mre["scaledl"] == pytest.approx(0.1)
    assert result.mean_mre["fixed_mfu"] == pytest.approx(0.5)
    vs = next(c for c in result.comparisons if c.method_b == "fixed_mfu")
    assert vs.mre_difference == pytest.approx(-0.4) and vs.verdict == "better"


def test_layout_ranking_is_kendall_tau_per_group_and_ties_count_zero():
    rows = pd.DataFrame({
        "source": "s", "model": "m", "n_gpus": 8, "gpu": ["g", "g", "g", "h", "g"],
        "precision_raw": "bf16", "seq_len": 4096, "config_key": ["k0", "k1", "k2", "k3", "k3"],
        "tokens": [1.0, 1.0, 2.0, 2.0, 2.0], "measured_s": [1.0, 2.0, 6.0, 7.0, 9.0],
    })  # fmt: skip
    per_token = rows["measured_s"] / rows["tokens"]
    pred = {m: rows["measured_s"].to_numpy() for m in METHODS}
    pred["roofline"] = (1 / per_token * rows["tokens"]).to_numpy()  # reversed order
    pred["fixed_mfu"] = rows["tokens"].to_numpy()  # same per token for every configuration
    ranking = layout_ranking(rows, pred)
    # k3 published twice counts once (averaged): 4 configurations in one group.
    assert len(ranking.groups) == 1 and ranking.groups[0].layouts == 4
    assert ranking.mean_tau["scaledl"] == pytest.approx(1.0)
    assert ranking.mean_tau["roofline"] == pytest.approx(-1.0)
    assert ranking.groups[0].tau["fixed_mfu"] is None and ranking.mean_tau["fixed_mfu"] == 0.0
    # GPU h is another hardware group with 1 configuration: the strict view keeps k0-k2 only.
    assert ranking.groups_same_hardware == 1
    assert ranking.mean_tau_same_hardware["scaledl"] == pytest.approx(1.0)
    few = layout_ranking(rows.iloc[:2], {m: p[:2] for m, p in pred.items()})
    assert not few.groups and few.mean_tau["scaledl"] is None


def test_noise_floor_spreads_and_leave_one_out_error():
    runs = pd.DataFrame({
        "source": ["nemo"] * 5 + ["x"], "config_key": ["k1", "k1", "k1", "k2", "k3", "k4"],
        "iteration_s": [1.0, 1.1, 1.2, 3.0, np.nan, 2.0],
    })  # fmt: skip
    floor = noise_floor(runs)
    assert list(floor) == ["nemo"]
    n = floor["nemo"]
    assert n.configs == 1 and n.rows == 3 and n.spread_max == pytest.approx(0.2)
    expected = np.mean([abs(1.15 - 1.0) / 1.0, abs(1.1 - 1.1) / 1.1, abs(1.05 - 1.2) / 1.2])
    assert n.loo_mre == pytest.approx(expected)


def test_block_and_report_render_every_source_of_the_committed_result():
    result = PublishedRunsResult.read(RESULT)
    block = published_runs_markdown(result)
    for source in result.protocols["leave_one_source_out"].groups:
        assert f"| {source} |" in block
    html = published_runs_html(result)
    assert "<table" in html and "Leave one source out" in html


def test_the_committed_result_reproduces_within_tolerance():
    """Compositions and fixed-MFU per source exactly (to rounding), one GNN fold within 2 points.

    The GNN fold is the smallest held-out source with scored rows (cheapest to refit); the rest
    of the result is what the command computes, not re-run here (minutes).
    """
    result = PublishedRunsResult.read(RESULT)
    runs = read_published_runs(default_paths()).runs
    # NeMo's three published versions: 0.7-6.4% apart (external/scale_runs/README.md).
    nemo = noise_floor(runs)["nemo_perf"]
    assert (nemo.spread_min, nemo.spread_max) == pytest.approx((0.007, 0.064), abs=0.001)
    assert nemo.model_dump() == pytest.approx(result.noise_floor["nemo_perf"].model_dump())
    rows, graphs, _ = compose_rows(runs)
    assert len(rows) == result.coverage.answered
    committed = {(r.source, r.row): r for r in result.rows}
    for r in rows.itertuples():
        c = committed[(r.source, r.row)]
        assert r.composed == pytest.approx(c.predicted_s["composed"], rel=1e-6)
        assert r.roofline == pytest.approx(c.predicted_s["roofline"], rel=1e-6)
    loso = result.protocols["leave_one_source_out"]
    for name, held in protocol_folds(rows, "leave_one_source_out"):
        measured = rows["measured_s"].to_numpy()[held]
        pred, mfu, _ = predict_fold(rows, graphs, held, DEFAULT_CONFIG, corrections=())
        scored = np.isfinite(measured)
        if scored.any():
            mre = np.mean(np.abs(pred["fixed_mfu"][scored] / measured[scored] - 1))
            assert mre == pytest.approx(loso.groups[name].mre["fixed_mfu"], abs=1e-6)
        for method in ("fixed_mfu", "fixed_mfu_precision"):
            assert mfu[method] == pytest.approx(loso.groups[name].mfu[method], rel=1e-6)
    smallest = min((g.scored, n) for n, g in loso.groups.items() if g.scored)[1]
    held = dict(protocol_folds(rows, "leave_one_source_out"))[smallest]
    pred, _, _ = predict_fold(rows, graphs, held, DEFAULT_CONFIG, corrections=("scaledl",))
    measured = rows["measured_s"].to_numpy()[held]
    scored = np.isfinite(measured)
    mre = np.mean(np.abs(pred["scaledl"][scored] / measured[scored] - 1))
    assert mre == pytest.approx(loso.groups[smallest].mre["scaledl"], abs=0.02)


def test_cli_refuses_a_missing_csv_in_one_line(tmp_path):
    run = CliRunner().invoke(
        app,
        [
            "evaluate",
            "published-runs",
            str(tmp_path / "none.csv"),
            "--out",
            str(tmp_path / "r.json"),
        ],  # fmt: skip
    )
    assert run.exit_code == 2, run.output
    assert "none.csv: no such file" in run.output and "Traceback" not in run.output
    assert not (tmp_path / "r.json").exists()


def test_cli_refuses_a_readme_without_the_block(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# no block\n")
    csv = tmp_path / "x.csv"
    csv.write_text("a\n")
    run = CliRunner().invoke(
        app,
        [
            "evaluate",
            "published-runs",
            str(csv),
            "--out",
            str(tmp_path / "r.json"),
            "--readme",
            str(readme),
        ],  # fmt: skip
    )
    assert run.exit_code == 2 and "Traceback" not in run.output
    assert "expected one generated block" in run.output and "published-runs:begin" in run.output
    assert readme.read_text() == "# no block\n" and not (tmp_path / "r.json").exists()


SCALE_RUNS = Path(__file__).resolve().parents[2] / "external" / "scale_runs"


def _subset(source: str, rows: slice, path: Path) -> Path:
    """A few rows of a published file, written unchanged (every cell as text) under ``path``."""
    frame = pd.read_csv(SCALE_RUNS / f"{source}.csv", dtype=str, keep_default_na=False)
    frame.iloc[rows].to_csv(path, index=False)
    return path


def _evaluate(*paths: Path):
    return CliRunner().invoke(
        app,
        ["evaluate", "published-runs", *map(str, paths), "--out", str(paths[0].parent / "r.json")],
    )


def test_rows_copied_under_another_source_are_refused_naming_both(tmp_path):
    titan = _subset("torchtitan", slice(0, 8), tmp_path / "torchtitan.csv")
    copied = _subset("torchtitan", slice(2, 4), tmp_path / "my_runs.csv")
    runs = read_published_runs([titan, copied]).runs
    duplicates = cross_source_duplicates(runs)
    scored = runs[(runs["source"] == "torchtitan") & runs["iteration_s"].notna()]
    copies = scored[scored["row"].isin([3, 4])]
    assert [(d[0], d[1], d[2], d[3]) for d in duplicates] == [
        ("my_runs", i + 1, "torchtitan", r) for i, r in enumerate(copies["row"])
    ] and duplicates
    run = _evaluate(titan, copied)
    assert run.exit_code == 2 and "Traceback" not in run.output, run.output
    text = " ".join(run.output.split())
    assert f"row 1 of {copied} duplicates row {copies['row'].iloc[0]} of {titan}" in text
    assert "remove one of each pair" in text and not (tmp_path / "r.json").exists()
    # The same job measured at another step in another source is no duplicate.
    other = runs.copy()
    other.loc[other["source"] == "my_runs", "iteration_s"] *= 1.1
    assert cross_source_duplicates(other) == []
    check_sources(other)  # two sources with scored rows: accepted


def test_one_source_is_refused_naming_the_sources_and_their_scored_rows(tmp_path):
    titan = _subset("torchtitan", slice(0, 8), tmp_path / "torchtitan.csv")
    runs = read_published_runs([titan]).runs
    n = int(runs["iteration_s"].notna().sum())
    run = _evaluate(titan)
    assert run.exit_code == 2 and "Traceback" not in run.output, run.output
    assert " ".join(run.output.split()) == (
        "error: published runs: leave-one-source-out needs at least two sources with scored "
        f"rows (a measured iteration_s); got 1 of 1: {titan} ({n} scored)"
    )
    unscored = runs.assign(iteration_s=np.nan)
    with pytest.raises(ValueError, match=r"got 0 of 2: a \(0 scored\), b \(0 scored\)"):
        check_sources(pd.concat([unscored.assign(source="a"), unscored.assign(source="b")]))
