import numpy as np
import pytest

from scaledl.planning import pareto_mask
from scaledl.planning.pareto import ParetoFront, pareto_sweep, resolved


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
    time = np.array([2.0, 2.0 * (1 + 1e-13), 1.0])
    cost = np.array([5.0 * (1 + 1e-13), 5.0, 9.0])
    # without the resolution candidate 1 (cheaper by noise) would dominate candidate 0
    assert pareto_sweep(time, cost, np.arange(3)).tolist() == [True, False, True]
    assert pareto_sweep(time[[1, 0, 2]], cost[[1, 0, 2]], np.array([1, 0, 2])).tolist() == [
        False, True, True,
    ]  # fmt: skip
    values = np.array([0.0, 1.0, 0.75, np.inf])
    assert resolved(values).tolist() == values.tolist()
    assert resolved(3.0e-7) == pytest.approx(3.0e-7, rel=1e-9)
    assert resolved(1.0 + 1e-6) != 1.0 and resolved(1.0 + 1e-12) == 1.0
