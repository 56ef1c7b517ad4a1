import numpy as np
import pytest

from scaledl.planning import pareto_mask
from scaledl.planning.pareto import ParetoFront


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
