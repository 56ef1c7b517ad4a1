import numpy as np
import pytest

from scaledl.planning import pareto_mask
from scaledl.planning.pareto import ParetoFront, pareto_sweep, tie_ranks


def reference_front(time, cost, eligible):
    """The front by the sweep of Kung et al. as a plain loop (the planner's former code)."""
    mask = np.zeros(len(time), dtype=bool)
    best = np.inf
    for i in np.lexsort((cost, time)):
        if eligible[i] and cost[i] < best:
            mask[i] = True
            best = cost[i]
    return mask


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("chunk", [1, 7, 100, 10_000])
def test_chunked_front_is_the_front_of_everything(seed, chunk):
    rng = np.random.default_rng(seed)
    n = 2_000
    # Few distinct values: many ties in time, in cost and in both.
    time = rng.integers(1, 40, n).astype(float)
    cost = rng.integers(1, 40, n).astype(float)
    eligible = rng.random(n) < 0.8
    front = ParetoFront()
    for start in range(0, n, chunk):
        part = slice(start, start + chunk)
        front.add(time[part], cost[part], eligible[part], start)
    want = reference_front(time, cost, eligible)
    assert np.array_equal(front.mask(n), want)
    assert np.array_equal(pareto_mask(time, cost, eligible), want)


def test_no_eligible_candidate_gives_an_empty_front():
    front = ParetoFront()
    front.add(np.array([1.0, 2.0]), np.array([2.0, 1.0]), np.array([False, False]), 0)
    assert not front.mask(2).any()
    assert not pareto_mask([], []).any()


def test_float_noise_is_a_tie_and_the_lowest_index_wins():
    time = np.array([2.0, 2.0 * (1 + 2e-7), 1.0])
    cost = np.array([5.0 * (1 + 2e-7), 5.0, 9.0])
    # without ties candidate 1 (cheaper by float32 noise) would dominate candidate 0
    assert pareto_sweep(time, cost, np.arange(3)).tolist() == [True, False, True]
    assert pareto_sweep(time[[1, 0, 2]], cost[[1, 0, 2]], np.array([1, 0, 2])).tolist() == [
        False, True, True,
    ]  # fmt: skip


def test_tie_ranks_group_noisy_copies_wherever_they_fall():
    # Noisy copies straddling any rounding boundary still tie (the failure of fixed rounding).
    for base in (1.0, 3.0e-7, 0.5 + 2.0**-31, 1e6):
        noisy = base * (1 + np.array([0.0, 3e-7, -2e-7]))
        assert tie_ranks(np.r_[noisy, 2 * base]).tolist() == [0, 0, 0, 1]
    values = np.array([0.0, 1.0, 0.75, np.inf, np.inf, np.nan, -np.inf, 1.0 + 1e-5])
    assert tie_ranks(values).tolist() == [1, 3, 2, 5, 5, 6, 0, 4]
    assert tie_ranks([]).tolist() == []
