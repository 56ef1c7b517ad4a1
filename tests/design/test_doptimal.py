import itertools

import numpy as np
import pytest

from scaledl.design import DesignError, d_efficiency, d_optimal_indices, log_det_information


def _one_factor(model: str, copies: int = 5) -> tuple[np.ndarray, np.ndarray]:
    x = np.tile(np.linspace(-1.0, 1.0, 21), copies)
    cols = [np.ones_like(x), x] + ([x * x] if model == "quadratic" else [])
    return x, np.column_stack(cols)


def test_linear_one_factor_puts_half_the_points_at_each_end():
    x, F = _one_factor("linear")
    idx, ld = d_optimal_indices(F, 10, seed=0, n_starts=3)
    values, counts = np.unique(x[idx], return_counts=True)
    assert values.tolist() == [-1.0, 1.0]
    assert counts.tolist() == [5, 5]
    assert ld == pytest.approx(np.log(10 * 10))  # X^T X = diag(10, 10)


def test_quadratic_one_factor_puts_equal_shares_at_minus_one_zero_one():
    x, F = _one_factor("quadratic")
    idx, _ = d_optimal_indices(F, 9, seed=1, n_starts=3)
    values, counts = np.unique(np.round(x[idx], 12), return_counts=True)
    assert values.tolist() == [-1.0, 0.0, 1.0]
    assert counts.tolist() == [3, 3, 3]


def test_first_order_two_factors_chooses_the_square_corners():
    grid = np.array(list(itertools.product(np.linspace(-1, 1, 5), repeat=2)))
    F = np.column_stack([np.ones(len(grid)), grid])
    idx, ld = d_optimal_indices(F, 4, seed=0, n_starts=2)
    corners = {tuple(p) for p in grid[idx]}
    assert corners == {(-1.0, -1.0), (-1.0, 1.0), (1.0, -1.0), (1.0, 1.0)}
    assert d_efficiency(ld, 4, 3) == pytest.approx(1.0)


def test_returned_log_det_is_exact_and_indices_distinct():
    rng = np.random.default_rng(3)
    F = np.column_stack([np.ones(800), rng.uniform(-1, 1, size=(800, 11))])
    idx, ld = d_optimal_indices(F, 30, seed=5, n_starts=3)
    assert len(set(idx.tolist())) == 30
    assert np.all(np.diff(idx) > 0)
    assert ld == pytest.approx(log_det_information(F[idx]), abs=1e-8)


def test_deterministic_for_a_seed_and_beats_random_subsets():
    rng = np.random.default_rng(0)
    F = np.column_stack([np.ones(1500), rng.choice([-1.0, 0.0, 1.0], size=(1500, 15))])
    a = d_optimal_indices(F, 40, seed=7, n_starts=3)
    b = d_optimal_indices(F, 40, seed=7, n_starts=3)
    assert np.array_equal(a[0], b[0]) and a[1] == b[1]
    random_lds = [log_det_information(F[rng.choice(1500, 40, replace=False)]) for _ in range(30)]
    assert a[1] > np.median(random_lds) + 5.0


def test_fixed_rows_are_kept_and_augmentation_never_lowers_the_det():
    rng = np.random.default_rng(1)
    F = np.column_stack([np.ones(600), rng.uniform(-1, 1, size=(600, 7))])
    fixed = list(range(10))
    base = log_det_information(F[fixed])
    idx, ld = d_optimal_indices(F, 6, seed=0, n_starts=3, fixed=fixed)
    assert not set(idx.tolist()) & set(fixed)
    assert ld == pytest.approx(log_det_information(F[fixed + idx.tolist()]), abs=1e-8)
    assert ld >= base
    random_lds = []
    for _ in range(20):
        extra = rng.choice(np.arange(10, 600), 6, replace=False).tolist()
        random_lds.append(log_det_information(F[fixed + extra]))
    assert ld >= max(random_lds)


def test_fixed_rows_may_start_singular():
    rng = np.random.default_rng(2)
    F = np.column_stack([np.ones(300), rng.uniform(-1, 1, size=(300, 5))])
    idx, ld = d_optimal_indices(F, 5, seed=0, n_starts=2, fixed=[0, 1])
    assert np.isfinite(ld) and len(idx) == 5


def test_fewer_runs_than_terms_is_a_clear_error():
    _, F = _one_factor("quadratic")
    with pytest.raises(DesignError, match="cannot estimate 3 model terms") as info:
        d_optimal_indices(F, 2)
    assert isinstance(info.value, ValueError)


def test_fewer_candidates_than_terms_is_a_clear_error():
    F = np.column_stack([np.ones(3), np.eye(3, 5)[:, :4]])
    with pytest.raises(DesignError, match="only 3 candidates"):
        d_optimal_indices(F, 5)


def test_singular_model_is_a_clear_error():
    x, F = _one_factor("linear")
    F = np.column_stack([F, 2.0 * x])  # aliased column
    with pytest.raises(DesignError, match="singular model: .*rank 2 < 3"):
        d_optimal_indices(F, 10)


@pytest.mark.parametrize(
    "F, n, match",
    [
        (np.array([[1.0, np.nan], [1.0, 2.0], [1.0, 3.0]]), 2, "NaN"),
        (np.ones(4), 2, "2-D"),
        (np.eye(4), 0, "positive integer"),
    ],
)
def test_bad_inputs_are_rejected(F, n, match):
    with pytest.raises(DesignError, match=match):
        d_optimal_indices(F, n)


def test_d_efficiency_of_singular_design_is_zero():
    assert d_efficiency(float("-inf"), 10, 3) == 0.0
    assert log_det_information(np.ones((5, 2))) == float("-inf")
