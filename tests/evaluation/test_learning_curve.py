import numpy as np
import pytest

from scaledl.evaluation.learning_curve import PoolDesign, auto_sizes, learning_curves
from scaledl.models.methods import make_method


def test_subset_selection_is_deterministic(profile_data):
    pool = profile_data.ids[:12]
    design = PoolDesign(profile_data, pool)
    p = len(design.terms)
    for sampler in ("doptimal", "random", "lhs"):
        a = design.select(sampler, p, seed=1)
        assert a == design.select(sampler, p, seed=1)
        assert len(a) == p == len(set(a)) and set(a) <= set(pool)
    assert design.select("random", 6, 1) != design.select("random", 6, 2)
    with pytest.raises(ValueError, match="sampler"):
        design.select("sobol", 4, 0)


def test_auto_sizes():
    assert auto_sizes(58, 11) == [12, 24, 36, 58]
    assert auto_sizes(20, 13) == [20]


def test_learning_curves_with_a_real_method(profile_data):
    test_ids = profile_data.ids[::5]
    test_w = [profile_data.workloads[i] for i in test_ids]
    calls = []

    def fit_predict(train, val, seed):
        calls.append(len(train.ids))
        return make_method("analytical").fit(train, val).predict(test_w)["iteration_s"].to_numpy()

    out = learning_curves(
        profile_data, test_ids, fit_predict, sizes=[9, 12], seeds=2, samplers=("random", "lhs")
    )
    assert out["pool_size"] == 12
    for sampler in ("random", "lhs"):
        c = out["samplers"][sampler]
        assert c["sizes"] == [9, 12] and len(c["mre_mean"]) == 2
        assert np.all(np.isfinite(c["mre_mean"])) and min(c["mre_std"]) >= 0
    # The whole pool is fitted once per seed and shared by both samplers.
    assert calls.count(12) == 2 and out["n_fits"] == len(calls)
    assert out["samplers"]["random"]["mre_per_seed"][1] == out["samplers"]["lhs"]["mre_per_seed"][1]
    with pytest.raises(ValueError, match="sizes"):
        learning_curves(profile_data, test_ids, fit_predict, sizes=[13], seeds=1)
