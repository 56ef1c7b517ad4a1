import numpy as np
import pytest
from tiny_specs import tiny

from scaledl.design import DesignError
from scaledl.design.matched import (
    InformationBlock,
    PredictorInformation,
    _factors,
    _gains,
    _matrices,
    matched_d_optimal_indices,
    predictor_information,
    sequential_indices,
)
from scaledl.graph.features import build_graph_set


def _block(rows: np.ndarray, weight: float = 1.0, name: str = "layer:x") -> InformationBlock:
    return InformationBlock(name, weight, rows[:, None, :], 1e-9)


def _quadratic_one_factor(copies: int = 3) -> tuple[np.ndarray, PredictorInformation]:
    x = np.tile(np.linspace(-1.0, 1.0, 21), copies)
    rows = np.column_stack([np.ones_like(x), x, x * x])
    return x, PredictorInformation((_block(rows),), len(x))


def test_quadratic_one_factor_optimum_is_minus_one_zero_one_in_equal_shares():
    # The D-optimal design of a quadratic on [-1, 1] (Atkinson et al. 2007, ch. 11).
    x, info = _quadratic_one_factor()
    idx, value = matched_d_optimal_indices(info, 9, seed=0, n_starts=2)
    values, counts = np.unique(np.round(x[idx], 12), return_counts=True)
    assert values.tolist() == [-1.0, 0.0, 1.0]
    assert counts.tolist() == [3, 3, 3]
    assert value == pytest.approx(info.criterion(idx))


def test_compound_criterion_covers_both_models_before_refining_one():
    # Candidates 0-9 inform model a only, 10-19 model b only: a design of 4 takes 2 of each.
    z = np.linspace(-1.0, 1.0, 10)
    a = np.zeros((20, 2))
    a[:10] = np.column_stack([np.ones(10), z])
    b = np.zeros((20, 2))
    b[10:] = np.column_stack([np.ones(10), z])
    info = PredictorInformation((_block(a, name="layer:a"), _block(b, name="layer:b")), 20)
    idx, _ = matched_d_optimal_indices(info, 4, seed=3)
    assert sorted(idx.tolist()) == [0, 9, 10, 19]


def test_included_points_stay_and_excluded_ones_are_never_chosen():
    x, info = _quadratic_one_factor(copies=1)
    idx, _ = matched_d_optimal_indices(info, 4, include=[5], exclude=[0, 20])
    assert 5 in idx
    assert not {0, 20} & set(idx.tolist())


def test_infeasible_size_is_an_error_naming_the_bounds():
    _, info = _quadratic_one_factor(copies=1)
    with pytest.raises(DesignError, match=r"n=30 must lie in \[0, 21\]"):
        matched_d_optimal_indices(info, 30)


def test_sequential_step_picks_the_most_uncertain_admissible_candidate():
    rows = np.tile([[1.0, 0.5]], (6, 1))  # equally informative candidates
    info = PredictorInformation((_block(rows),), 6)
    uncertainty = np.array([0.1, 0.2, 0.9, 0.3, 0.95, 0.4])
    added = sequential_indices(info, profiled=[0], k=1, uncertainty=uncertainty, exclude=[4])
    assert added.tolist() == [2]  # 4 is more uncertain but inadmissible


def test_sequential_step_prefers_new_information_to_uncertainty_alone():
    # Candidate 1 repeats the profiled point; 2 spans the second direction, slightly less uncertain.
    rows = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    info = PredictorInformation((_block(rows),), 3)
    added = sequential_indices(info, profiled=[0], k=1, uncertainty=np.array([1.0, 1.0, 0.8]))
    assert added.tolist() == [2]


def test_sequential_step_rejects_a_non_positive_uncertainty():
    _, info = _quadratic_one_factor(copies=1)
    with pytest.raises(DesignError, match="uncertainty must be finite and positive"):
        sequential_indices(info, [0], 1, np.zeros(21))


def test_predictor_information_has_one_block_per_layer_type_and_the_gnn():
    workloads = [
        tiny("bert", hidden_size=h, num_layers=n, world_size=ws)
        for h in (32, 64)
        for n in (1, 2)
        for ws in (1, 2)
    ] + [tiny("vit", hidden_size=64)]
    graphs = build_graph_set(workloads)
    cells = [f"{w.family}/{w.world_size}" for w in workloads]
    info = predictor_information(graphs.nodes, cells)
    names = [b.name for b in info.blocks]
    assert names[-1] == "gnn"
    assert "layer:attention" in names and "layer:patch-embed" in names
    layer_weights = [b.weight for b in info.blocks if b.name != "gnn"]
    assert sum(layer_weights) == pytest.approx(1.0)
    # floored at 1 / (2T) before normalising, and the floored weights sum to at most 1.5
    assert min(layer_weights) >= 1 / (3 * len(layer_weights))
    assert all(b.per_candidate.shape[0] == len(workloads) for b in info.blocks)
    # The only vision workload is the only one with a patch embedding: any design of 4 takes it.
    idx, _ = matched_d_optimal_indices(info, 4, seed=0)
    assert len(workloads) - 1 in idx


@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_gains_by_the_determinant_lemma_are_the_direct_log_det_increase(rank):
    rng = np.random.default_rng(rank)
    factors = rng.normal(size=(30, rank, 6))
    info = PredictorInformation((InformationBlock("layer:x", 0.7, factors, 1e-3),), 30)
    weights = rng.uniform(0.5, 2.0, size=30)
    chosen = [0, 3, 7, 11, 12, 20, 25]
    (m,) = _matrices(info, chosen, weights)
    direct = [
        0.7 / 6 * (np.linalg.slogdet(m + weights[c] * factors[c].T @ factors[c])[1]
                   - np.linalg.slogdet(m)[1])
        for c in range(30)
    ]  # fmt: skip
    np.testing.assert_allclose(_gains(info, [m], weights), direct, rtol=1e-9, atol=1e-12)


def test_factors_hold_each_distinct_call_once_and_rebuild_the_information():
    rows = np.array([[1.0, 2.0], [1.0, 2.0], [3.0, 1.0], [1.0, 2.0], [0.5, 0.5]])
    graph = np.array([0, 0, 0, 2, 2])  # graph 1 has no call of this type
    factors = _factors(rows, graph, 3)
    assert factors.shape == (3, 2, 2)  # at most two distinct calls per graph
    block = InformationBlock("layer:x", 1.0, factors, 1e-9)
    direct = np.zeros((3, 2, 2))
    for row, g in zip(rows, graph, strict=True):
        direct[g] += np.outer(row, row)
    np.testing.assert_allclose(block.per_candidate, direct)
    assert not factors[1].any()
