import json

import numpy as np
import pytest

from scaledl.models.allreduce import (
    AlphaBetaAllReduce,
    mean_relative_error,
    ring_bytes_factor,
    select_size_breakpoints,
)
from scaledl.models.fitted import NotFittedError

ALPHA, BW = 0.025, 150e6  # ms, bytes/ms (150 GB/s)


def _synthetic(alpha=ALPHA, bw=BW, worlds=(2, 4, 8)):
    sizes = np.logspace(11, 26, 16, base=2)
    b, p = np.meshgrid(sizes, np.asarray(worlds, dtype=float))
    b, p = b.ravel(), p.ravel()
    return b, p, alpha + ring_bytes_factor(p) * b / bw


@pytest.mark.parametrize("weighting", ["relative", "none"])
def test_recovers_alpha_and_bandwidth_exactly(weighting):
    b, p, t = _synthetic()
    m = AlphaBetaAllReduce(weighting=weighting).fit(b, p, t)
    assert m.alpha_ms_ == pytest.approx(ALPHA, rel=1e-9)
    assert m.bandwidth_bytes_per_ms_ == pytest.approx(BW, rel=1e-9)
    np.testing.assert_allclose(m.predict_ms(b, p), t, rtol=1e-9)


def test_world_size_one_costs_nothing():
    m = AlphaBetaAllReduce().fit(*_synthetic())
    out = m.predict_ms([1e6, 1e6, 0.0], [1, 8, 8])
    assert out[0] == 0.0 and out[1] > 0 and out[2] == pytest.approx(ALPHA)


def test_json_round_trip_per_topology_and_configuration():
    b1, p1, t1 = _synthetic(worlds=(2, 4, 8))
    b2, p2, t2 = _synthetic(alpha=0.1, bw=12e6, worlds=(16,))
    b, p, t = np.r_[b1, b2], np.r_[p1, p2], np.r_[t1, t2]
    nodes = np.r_[np.ones_like(p1), np.full_like(p2, 2)]
    for kwargs in ({"per_topology": True}, {"per_configuration": True}):
        m = AlphaBetaAllReduce(**kwargs, size_breakpoints_bytes=[1e5]).fit(b, p, t, nodes)
        back = AlphaBetaAllReduce.from_dict(json.loads(json.dumps(m.to_dict())))
        np.testing.assert_allclose(back.predict_ms(b, p, nodes), m.predict_ms(b, p, nodes))
        np.testing.assert_allclose(m.predict_ms(b, p, nodes), t, rtol=1e-8)
    topo = AlphaBetaAllReduce(per_topology=True).fit(b, p, t, nodes)
    assert topo.params_[((1,), 0)][0] == pytest.approx(0.1)
    bandwidth = 1 / topo.params_[((1,), 0)][1]
    assert bandwidth == pytest.approx(12e6)
    # unseen configuration: nearest world size with the same topology
    conf = AlphaBetaAllReduce(per_configuration=True).fit(b, p, t, nodes)
    assert conf.predict_ms(1e6, 32, 4)[0] == pytest.approx(0.1 + ring_bytes_factor(32) * 1e6 / 12e6)


def test_errors():
    m = AlphaBetaAllReduce()
    with pytest.raises(NotFittedError):
        m.predict_ms(1e6, 2)
    with pytest.raises(NotFittedError):
        m.to_dict()
    with pytest.raises(ValueError, match="at least 2"):
        m.fit([1e6], [2], [0.1])
    with pytest.raises(ValueError, match="allreduce_ms.*-0.1"):
        m.fit([1e6, 2e6], [2, 2], [0.1, -0.1])
    with pytest.raises(ValueError, match="allreduce_bytes"):
        m.fit([0, 2e6], [2, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="world_size"):
        m.fit([1e6, 2e6], [1, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="weighting"):
        AlphaBetaAllReduce(weighting="log")
    with pytest.raises(ValueError, match="kind"):
        AlphaBetaAllReduce.from_dict({"kind": "other"})


def test_breakpoint_selection_finds_a_regime_change():
    b, p, _ = _synthetic(worlds=(8,))
    t = np.where(
        b < 2**20, 0.01 + ring_bytes_factor(p) * b / 20e6, 0.2 + ring_bytes_factor(p) * b / 200e6
    )
    single = AlphaBetaAllReduce().fit(b, p, t)
    bps = select_size_breakpoints(b, p, t, max_breakpoints=1, min_points=3)
    assert bps == (2.0**20,)
    piece = AlphaBetaAllReduce(size_breakpoints_bytes=bps).fit(b, p, t)
    assert mean_relative_error(piece.predict_ms(b, p), t) < 1e-9
    assert mean_relative_error(single.predict_ms(b, p), t) > 0.05
