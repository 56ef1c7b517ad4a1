import numpy as np
import pandas as pd
import pytest
from tiny_specs import tiny_spec

import scaledl
from scaledl.models.intervals import CalibrationError, IntervalCalibration
from scaledl.planning import PlanError, candidate_grid, pareto_mask, plan
from scaledl.planning.pareto import tie_ranks
from scaledl.prediction.predictor import load_predictor
from scaledl.registry import register_bundle
from scaledl.workloads.fields import WorkloadError

pytestmark = pytest.mark.slow

#: The tiny BERT of the shared bundle, without the fields the planner chooses.
MODEL = {k: v for k, v in tiny_spec("bert").items() if k not in ("batch_size", "dataset_size")}
ARGS = {
    "dataset_size": 256,
    "epochs": 3,
    "world_sizes": [1, 2, 4],
    "nodes": [1, 2],
    "batch_sizes": [2, 4, 8],
    "price_per_device_hour": 2.5,
}


@pytest.fixture(scope="module")
def predictor(registry_root, tmp_path_factory):
    """The tiny bundle with a calibration (synthetic residuals: 10% ID, wider elsewhere)."""
    rng = np.random.default_rng(0)
    sigmas = {"in_domain": 0.1, "unseen_family": 0.5, "beyond_range": 0.3}
    residuals = {
        t: {s: rng.normal(0, v, 40) for s, v in sigmas.items()} for t in ("iteration", "epoch")
    }
    root = tmp_path_factory.mktemp("plan-registry")
    register_bundle(
        registry_root / "scaledl" / "v2",
        root,
        "scaledl",
        calibration=IntervalCalibration(residuals),
    )
    return load_predictor(root / "scaledl")


def test_candidate_grid_keeps_runnable_combinations():
    grid = candidate_grid([1, 2, 4, 8], [4], nodes=[1, 2, 3], devices_per_node=2)
    assert grid.values.tolist() == [[1, 1, 4], [2, 1, 4], [2, 2, 4], [4, 2, 4]]
    with pytest.raises(PlanError, match="no candidate"):
        candidate_grid([1], [4], nodes=[2])
    with pytest.raises(PlanError, match="'batch_sizes'"):
        candidate_grid([1], [0])


def test_candidate_grid_refuses_past_its_limit_before_building():
    import tracemalloc

    from scaledl.planning.planner import MAX_PLAN_CANDIDATES

    sizes = list(range(1, 1025))
    tracemalloc.start()
    with pytest.raises(PlanError, match=r"1,048,576 candidates \(1,024 world size\(s\) x 1 node "
                       r"count\(s\) x 1,024 batch size\(s\)\), over the limit of 262,144 per "
                       r"plan; narrow"):  # fmt: skip
        candidate_grid(sizes, sizes, [1])
    _, peak_bytes = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak_bytes < 1_000_000  # counted, never built
    # the limit itself is planned (benchmarks/bench_scale.py's 512 x 512)
    assert len(candidate_grid(sizes[:512], sizes[:512])) == MAX_PLAN_CANDIDATES


def test_pareto_mask_is_exactly_the_non_dominated_set():
    rng = np.random.default_rng(3)
    time, cost = rng.uniform(size=200), rng.uniform(size=200)
    time[5], cost[5] = time[4], cost[4]  # an exact duplicate: one of the two is kept
    eligible = rng.uniform(size=200) > 0.2
    mask = pareto_mask(time, cost, eligible)
    for i in np.flatnonzero(eligible):
        others = eligible & (np.arange(200) != i)
        dominated = (
            others & (time <= time[i]) & (cost <= cost[i]) & ((time < time[i]) | (cost < cost[i]))
        ).any()
        if dominated:
            assert not mask[i]
        elif i != 5:
            assert mask[i]
    assert not mask[~eligible].any()
    assert mask[4] != mask[5] or not mask[4]


def test_plan_front_and_deadline_pick(predictor, tmp_path):
    probe = plan(predictor, MODEL, coverage=0.9, device_memory_gb=100.0, **ARGS)
    table = probe.table
    assert len(table) == 3 * 3 + 2 * 3  # world size 1 cannot span 2 nodes
    # A memory limit between the smallest and largest need drops some candidates.
    memory = float(np.median(table["memory_per_rank_gb"])) / 0.9
    deadline = float(np.median(table["time_to_train_h_high"]))
    result = plan(
        predictor, MODEL, coverage=0.9, device_memory_gb=memory, deadline_h=deadline, **ARGS
    )
    t = result.table
    assert (t["fits_memory"] == (t["memory_per_rank_gb"] <= 0.9 * memory + 1e-12)).all()
    assert 0 < t["fits_memory"].sum() < len(t)
    assert np.allclose(t["time_to_train_h"], 3 * t["epoch_s"] / 3600)
    assert np.allclose(t["cost"], 2.5 * t["world_size"] * t["time_to_train_h"])
    assert (t["time_to_train_h_low"] < t["time_to_train_h"]).all()
    assert (t["time_to_train_h"] < t["time_to_train_h_high"]).all()
    # The front: eligible and non-dominated, and every eligible candidate off it is dominated,
    # times and costs compared as the planner compares them (tie groups within TIE_RTOL:
    # one node or two can predict the same time up to float noise).
    assert t.loc[t["pareto"], "eligible"].all()
    eligible = t[t["eligible"]].assign(
        tr=tie_ranks(t.loc[t["eligible"], "time_to_train_h"]),
        cr=tie_ranks(t.loc[t["eligible"], "cost"]),
    )
    for _, row in eligible.iterrows():
        better = eligible[
            (eligible["tr"] <= row["tr"])
            & (eligible["cr"] <= row["cr"])
            & ((eligible["tr"] < row["tr"]) | (eligible["cr"] < row["cr"]))
        ]
        if row["pareto"]:
            assert better.empty, row
        else:  # dominated, or a tie of a front candidate in both time and cost
            twin = (
                eligible["pareto"] & (eligible["tr"] == row["tr"]) & (eligible["cr"] == row["cr"])
            )
            assert not better.empty or twin.any(), row
    # The pick: the cheapest eligible candidate whose upper bound meets the deadline.
    feasible = eligible[eligible["time_to_train_h_high"] <= deadline]
    choice = result.choice
    assert choice is not None and choice["cost"] == feasible["cost"].min()
    assert t["chosen"].sum() == 1
    text = result.to_text()
    assert "<- chosen" in text and "Pareto front" in text and f"{deadline:g} h" in text
    # what it searched: 3 world sizes x 2 node counts x 3 batches, 15 of them runnable
    searched = result.searched
    assert (searched.combinations, searched.candidates) == (15, len(t)) and searched.seconds > 0
    assert "searched 15 combinations: 15 candidates predicted in " in text
    png = result.plot(tmp_path / "plan.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_flags_out_of_domain_and_strict_keeps_only_in_domain(predictor):
    loose = plan(predictor, MODEL, coverage=None, device_memory_gb=100.0, **ARGS)
    t = loose.table
    outside = t[~t["in_domain"]]
    # The bundle saw world sizes 1-2 on one node.
    assert set(outside["world_size"]) >= {4} and set(outside["num_nodes"]) >= {2}
    assert any("outside the predictor's training domain" in n for n in loose.notes)
    assert np.isnan(t["time_to_train_h_low"]).all()
    strict = plan(predictor, MODEL, coverage=None, device_memory_gb=100.0, strict=True, **ARGS)
    assert (strict.table.loc[strict.table["eligible"], "in_domain"]).all()
    assert strict.pareto["in_domain"].all()


def test_no_candidate_meets_an_impossible_deadline(predictor):
    result = plan(predictor, MODEL, coverage=0.9, device_memory_gb=100.0, deadline_h=1e-12, **ARGS)
    assert result.choice is None
    assert any("the fastest needs" in n for n in result.notes)
    assert "no eligible candidate meets the deadline" in result.to_text()


def test_bad_inputs_are_named(predictor):
    with pytest.raises(WorkloadError, match="field 'world_size'.*the planner chooses"):
        plan(predictor, {**MODEL, "world_size": 2}, device_memory_gb=1.0, **ARGS)
    with pytest.raises(WorkloadError, match="field 'tp_size' .value 2.: the planner chooses the "
                       "layout; search it with layouts=LayoutSpace"):  # fmt: skip
        plan(predictor, {**MODEL, "tp_size": 2}, device_memory_gb=1.0, **ARGS)
    with pytest.raises(PlanError, match="'epochs'"):
        plan(predictor, MODEL, **{**ARGS, "epochs": 0})
    with pytest.raises(CalibrationError, match="coverage"):
        plan(predictor, MODEL, coverage=2.0, device_memory_gb=1.0, **ARGS)
    with pytest.raises(WorkloadError, match="plan candidate: row 1"):
        plan(predictor, {**MODEL, "num_heads": 3}, device_memory_gb=1.0, **ARGS)


def test_scaledl_plan_is_the_public_entry_point():
    assert scaledl.plan is plan


@pytest.mark.parametrize("name", ["epochs", "price_per_device_hour", "dataset_size"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0])
def test_plan_numbers_must_be_finite_and_positive(predictor, name, value):
    with pytest.raises(
        PlanError, match=rf"argument '{name}' \(value -?\w+(\.0)?\): must be a finite"
    ):
        plan(predictor, MODEL, device_memory_gb=1.0, **{**ARGS, name: value})
    with pytest.raises(PlanError, match="'deadline_h' \\(value inf\\)"):
        plan(predictor, MODEL, device_memory_gb=1.0, deadline_h=float("inf"), **ARGS)


def test_nothing_fits_names_the_memory_needed_and_the_batch_that_would_fit(predictor):
    probe = plan(predictor, MODEL, coverage=None, device_memory_gb=100.0, **ARGS)
    smallest = probe.table["memory_per_rank_gb"].min()
    # Between what batch 1 and the smallest candidate (batch 2) need: batch 1 fits.
    result = plan(predictor, MODEL, coverage=None, device_memory_gb=smallest / 0.9 * 0.999,
                  **{**ARGS, "batch_sizes": [2, 4]})  # fmt: skip
    note = next(n for n in result.notes if n.startswith("no candidate fits"))
    assert f"needs {smallest:.3g} GB per rank" in note
    assert "a batch of at most 1 per rank would fit" in note
    text = result.to_text()
    assert "Empty DataFrame" not in text and text.count(" NO ") == len(result.table)
    tiny = plan(predictor, MODEL, coverage=None, device_memory_gb=1e-9, **ARGS)
    note = next(n for n in tiny.notes if n.startswith("no candidate fits"))
    assert "even batch 1 needs" in note and "--device-memory-gb" in note


def test_a_deadline_far_beyond_every_candidate_is_questioned(predictor):
    result = plan(predictor, MODEL, coverage=None, device_memory_gb=100.0, deadline_h=43200,
                  **ARGS)  # fmt: skip
    assert any("43200 s would be 12 h" in n for n in result.notes)
    slowest = result.table["time_to_train_h"].max()
    fitting = plan(predictor, MODEL, coverage=None, device_memory_gb=100.0,
                   deadline_h=2 * slowest, **ARGS)  # fmt: skip
    assert not any("would be" in n for n in fitting.notes)


def test_a_grid_planned_in_chunks_is_the_grid_planned_at_once(predictor, monkeypatch):
    from scaledl.planning import planner

    args = {**ARGS, "world_sizes": [1, 2, 3, 4, 6, 8], "batch_sizes": [1, 2, 3, 4, 8]}
    whole = plan(predictor, MODEL, coverage=0.9, device_memory_gb=100.0, deadline_h=1.0, **args)
    monkeypatch.setattr(planner, "PLAN_CHUNK", 4)
    chunked = plan(predictor, MODEL, coverage=0.9, device_memory_gb=100.0, deadline_h=1.0, **args)
    # Candidates with the same prediction up to float noise keep the grid's order, the same
    # chunked or whole (pareto.tie_ranks).
    pd.testing.assert_frame_equal(chunked.table, whole.table, rtol=1e-6)
    assert chunked.table["pareto"].sum() >= 1 and chunked.notes == whole.notes
