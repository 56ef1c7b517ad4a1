import numpy as np
import pandas as pd
import pytest

from scaledl.models.allreduce import AlphaBetaAllReduce
from scaledl.parallel.collective_fit import fit_collective_model
from scaledl.parallel.collectives import CollectiveModel, bytes_factor, timed_blocking
from scaledl.profiles.tables import TP_API


def test_ring_factors():
    assert bytes_factor("all_reduce", 4) == pytest.approx(1.5)
    assert bytes_factor("all_gather", 4) == pytest.approx(0.75)
    assert bytes_factor("reduce_scatter", 2) == pytest.approx(0.5)
    assert bytes_factor("send", 2) == 1.0
    assert bytes_factor("broadcast", 4) == 1.0
    with pytest.raises(ValueError, match="collective"):
        bytes_factor("gather", 2)


def test_derived_from_allreduce_halves_the_bandwidth_term():
    ar = AlphaBetaAllReduce(weighting="none").fit([1e6, 2e6, 4e6], [2, 2, 2], [1.1, 2.1, 4.1])
    cm = CollectiveModel.from_allreduce(ar)
    assert cm.source["all_gather"] == "derived"
    # alpha 0.1 ms, beta 1e-6 ms/byte: all-reduce of 1 MB over 2 = 0.1 + 1.0
    assert cm.predict_ms("all_reduce", 1e6, 2) == pytest.approx(1.1, rel=1e-6)
    assert cm.predict_ms("all_gather", 1e6, 2) == pytest.approx(0.6, rel=1e-6)
    assert cm.predict_ms("send", 1e6, 2) == pytest.approx(1.1, rel=1e-6)
    assert cm.predict_ms("all_gather", 1e6, 1) == 0.0
    np.testing.assert_allclose(
        cm.predict_ms("reduce_scatter", [1e6, 1e6], [2, 4]), [0.6, 0.85], rtol=1e-6
    )


def test_fit_on_measured_timings_and_round_trip():
    sizes = np.array([1e5, 1e6, 1e7, 1e5, 1e6, 1e7])
    groups = np.array([2, 2, 2, 4, 4, 4])
    ms = 0.05 + (groups - 1) / groups * sizes * 2e-7
    timings = pd.DataFrame(
        {"collective": "all_gather", "group_size": groups, "collective_bytes": sizes,
         "collective_ms": ms}
    )  # fmt: skip
    cm = fit_collective_model(timings, None)
    assert cm.source == {**{c: "none" for c in cm.source}, "all_gather": "measured"}
    assert cm.params["all_gather"] == pytest.approx((0.05, 2e-7), rel=1e-4)
    again = CollectiveModel.from_dict(cm.to_dict())
    assert again.params == cm.params
    bad = timings.assign(collective_ms=0.0)
    with pytest.raises(ValueError, match="collective_ms"):
        fit_collective_model(bad, None)
    with pytest.raises(ValueError, match="missing column"):
        fit_collective_model(timings.drop(columns="group_size"), None)


def test_related_collectives_take_a_measured_one_of_the_same_pattern():
    ar = AlphaBetaAllReduce(weighting="none").fit([1e6, 2e6, 4e6], [2, 2, 2], [5.1, 6.1, 8.1])
    rows = pd.DataFrame({"collective": "broadcast", "group_size": 2,
                         "collective_bytes": [1e6, 2e6], "collective_ms": [0.2, 0.3]})  # fmt: skip
    plain = fit_collective_model(rows, ar)
    related = fit_collective_model(rows, ar, related=True)
    assert plain.source["send"] == "derived"
    assert plain.predict_ms("send", 1e6, 2) == pytest.approx(5.1, rel=1e-3)
    assert related.source["send"] == related.source["recv"] == "from broadcast"
    assert related.predict_ms("send", 1e6, 2) == pytest.approx(0.2, rel=1e-3)
    # no measured half-ring collective: the all-gather stays derived from the all-reduce
    assert related.source["all_gather"] == "derived"


def test_blocking_all_reduces_are_fitted_apart_from_the_gradient_buckets():
    sizes = np.array([1e5, 2e5, 4e5, 1e6, 2e6, 3e6])
    gradient = pd.DataFrame({"collective": "all_reduce", "group": "dp", "group_size": 2,
                             "collective_bytes": sizes[3:], "collective_ms": 6.0,
                             "source": "measured"})  # fmt: skip
    source = ["microbenchmark", "microbenchmark", "measured"]
    blocking = pd.DataFrame({"collective": "all_reduce", "group": ["dp", "dp", "tp"],
                             "group_size": 2, "collective_bytes": sizes[:3],
                             "collective_ms": 0.1 + sizes[:3] * 1e-6,
                             "source": source})  # fmt: skip
    assert timed_blocking(pd.concat([gradient, blocking])).tolist() == [False] * 3 + [True] * 3
    cm = fit_collective_model(pd.concat([gradient, blocking]), None)
    assert cm.source["all_reduce"] == cm.source["blocking_all_reduce"] == "measured"
    assert cm.params["blocking_all_reduce"] == pytest.approx((0.1, 1e-6), rel=1e-4)
    assert cm.predict_ms("all_reduce", 2e6, 2) == pytest.approx(6.0, rel=0.05)  # the waiting
    # without blocking rows (and in tables without source / group): the gradient all-reduce's
    alone = fit_collective_model(gradient.drop(columns=["source", "group"]), None)
    assert alone.source["blocking_all_reduce"] == "from all_reduce"
    assert alone.params["blocking_all_reduce"] == alone.params["all_reduce"]
    assert bytes_factor("blocking_all_reduce", 4) == bytes_factor("all_reduce", 4)


def test_tensor_parallel_api_costs_are_fitted_on_their_probe_rows_and_free_without():
    ar = AlphaBetaAllReduce(weighting="none").fit([1e6, 2e6, 4e6], [2, 2, 2], [1.1, 2.1, 4.1])
    derived = CollectiveModel.from_allreduce(ar)
    assert {derived.source[c] for c in TP_API} == {"none"}
    assert derived.predict_ms("tp_colwise_backward", 1e5, 2) == 0.0
    probe = pd.DataFrame({"collective": ["tp_colwise_forward"] * 2 + ["tp_rowwise_backward"] * 2,
                          "group": "dp", "group_size": 2, "source": "microbenchmark",
                          "collective_bytes": [1e5, 2e5] * 2,
                          "collective_ms": [0.7, 0.8, 2.5, 2.7]})  # fmt: skip
    cm = fit_collective_model(probe, ar, related=True)
    assert cm.source["tp_colwise_forward"] == cm.source["tp_rowwise_backward"] == "measured"
    assert cm.source["tp_rowwise_forward"] == "none"  # no rows, nothing related: free
    assert cm.source["blocking_all_reduce"] == "derived"  # the API cost is not an all-reduce
    assert cm.predict_ms("tp_colwise_forward", 1.5e5, 2) == pytest.approx(0.75, rel=1e-3)
    assert cm.predict_ms("tp_rowwise_backward", 1.5e5, 1) == 0.0
    assert bytes_factor("tp_rowwise_forward", 4) == 1.0
