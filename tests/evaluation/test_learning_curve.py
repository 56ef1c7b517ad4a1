import numpy as np
import pytest

from scaledl.evaluation.learning_curve import (
    PoolDesign,
    auto_sizes,
    learning_curves,
    sampler_comparisons,
)
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
    assert auto_sizes(58, 11) == [14, 29, 58]
    assert auto_sizes(77, 11) == [19, 38, 77]
    assert auto_sizes(20, 13) == [20]


def test_learning_curves_with_a_real_method(profile_data):
    test_ids = profile_data.ids[::5]
    test_w = [profile_data.workloads[i] for i in test_ids]
    calls = []

    def fit_many(tasks):
        out = []
        for train_ids, val, seed in tasks:
            calls.append((len(train_ids), seed))
            train = profile_data.subset(train_ids)
            out.append({"pred": make_method("analytical").fit(train, val).predict(test_w)})
        return out

    out = learning_curves(
        profile_data, test_ids, fit_many, sizes=[6, 9, 12], seeds=3, samplers=("random", "lhs")
    )
    assert out["pool_size"] == 12 and out["seeds"] == 3 and out["design_order"] == "main"
    for sampler in ("random", "lhs"):
        c = out["samplers"][sampler]
        assert c["sizes"] == [6, 9, 12] and len(c["mre_mean"]) == 3
        assert np.all(np.isfinite(c["mre_mean"])) and min(c["mre_std"]) >= 0
        assert c["prior_mre_mean"] is None  # analytical has no prior
        assert all(0 <= v <= 1 for v in c["family_world_coverage"])
        assert c["family_world_coverage"][-1] == 1.0  # the pool covers itself
        assert c["layerwise_d_efficiency"][-1] == pytest.approx(1.0)
    # The whole pool is fitted once per seed and shared by both samplers.
    assert calls.count((12, 0)) == 1 and out["n_fits"] == len(calls)
    assert out["samplers"]["random"]["mre_per_seed"][2] == out["samplers"]["lhs"]["mre_per_seed"][2]
    # lhs against random at each proper size, paired by seed; no D-optimal: no halving.
    assert [(c["method_a"], c["method_b"]) for c in out["comparisons"]] == [
        ("lhs@6", "random@6"),
        ("lhs@9", "random@9"),
    ]
    assert all(c["unit"] == "seed" and c["n_units"] == 3 for c in out["comparisons"])
    assert out["halving"] is None
    with pytest.raises(ValueError, match="sizes"):
        learning_curves(profile_data, test_ids, fit_many, sizes=[13], seeds=1)


def test_the_halving_comparison_pairs_doptimal_at_half_with_random_at_the_final_size():
    rng = np.random.default_rng(0)
    sizes = [10, 20, 40, 80]  # 80: the pool

    def curve(mres):
        return {"sizes": sizes, "mre_per_seed": [list(m + rng.normal(0, 0.002, 10)) for m in mres]}

    curves = {
        "doptimal": curve([0.20, 0.10, 0.08, 0.07]),
        "random": curve([0.25, 0.15, 0.10, 0.07]),
    }
    comparisons, halving = sampler_comparisons(curves, pool_size=80, seeds=10)
    assert [c["method_a"] for c in comparisons] == ["doptimal@10", "doptimal@20", "doptimal@40"]
    assert all(c["verdict"] == "better" for c in comparisons)
    # D-optimal at 20 (half of 40) against random at 40: 0.10 vs 0.10, not distinguishable.
    assert (halving["method_a"], halving["method_b"]) == ("doptimal@20", "random@40")
    assert halving["verdict"] == "not distinguishable" and halving["unit"] == "seed"
    assert halving["ci_low"] < 0 < halving["ci_high"]
