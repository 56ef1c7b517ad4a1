import numpy as np
import pytest

from scaledl.parallel.overlap import GRID, LANES, Overlap, fit_overlap


def test_factors_are_checked_and_split():
    with pytest.raises(ValueError, match="'send'"):
        Overlap({**dict.fromkeys(LANES, 1.0), "send": 1.5}, {})
    o = Overlap({**dict.fromkeys(LANES, 1.0), "all_gather": 0.25}, {})
    hidden, exposed = o.split("all_gather", np.array([4.0, 8.0]))
    np.testing.assert_allclose(hidden, [1.0, 2.0])
    np.testing.assert_allclose(exposed, [3.0, 6.0])


def test_each_used_lane_fitted_the_others_exposed():
    best = {"all_reduce": 0.8, "send": 0.2}

    def spread(o):  # a minimum at 0.8 (all-reduce) and 0.2 (send); gathers do not matter
        return sum((o.hidden[lane] - h) ** 2 for lane, h in best.items())

    got = fit_overlap(spread, ["all_reduce", "send"])
    assert got.hidden["all_reduce"] == pytest.approx(0.8)
    assert got.hidden["send"] == pytest.approx(0.2)
    assert got.source == {"all_reduce": "fitted", "all_gather": "exposed",
                          "reduce_scatter": "exposed", "send": "fitted"}  # fmt: skip
    # a lane no training workload exercises is on the critical path, whatever the others
    assert got.hidden["all_gather"] == got.hidden["reduce_scatter"] == 0.0


def test_no_lane_used_keeps_full_overlap_and_ties_take_the_first():
    assert fit_overlap(lambda o: 1.0, []).hidden == dict.fromkeys(LANES, 1.0)
    flat = fit_overlap(lambda o: 1.0, ["all_reduce"])
    assert flat.hidden["all_reduce"] == GRID[0]
