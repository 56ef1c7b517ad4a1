import numpy as np
import pytest

from scaledl.design import DesignError
from scaledl.design.features import (
    FeatureModel,
    check_estimable,
    code_log2,
    effects_code,
    model_matrix,
)
from scaledl.workloads.spec import Workload


def test_code_log2_maps_range_to_minus_one_one_on_log_scale():
    z = code_log2(np.array([64, 128, 256, 512]), 64, 256)
    assert z.tolist() == pytest.approx([-1.0, 0.0, 1.0, 2.0])
    with pytest.raises(DesignError, match="positive"):
        code_log2(np.array([0.0, 1.0]), 1, 2)


def test_effects_coding_uses_last_level_as_minus_one():
    out = effects_code(np.array(["a", "b", "c", "a"]), ["a", "b", "c"])
    assert out.tolist() == [[1, 0], [0, 1], [-1, -1], [1, 0]]
    assert out[:3].sum(axis=0).tolist() == [0, 0]  # balanced levels sum to zero
    with pytest.raises(DesignError, match=r"\['z'\]"):
        effects_code(np.array(["z"]), ["a", "b"])


def _grid():
    a = np.repeat([1.0, 2.0, 4.0], 4)
    b = np.tile([8.0, 16.0], 6)
    c = np.full(12, 3.0)
    fam = np.array(["x", "x", "y", "y"] * 3)
    return {"a": a, "b": b, "c": c}, {"family": fam}


def test_terms_follow_the_varying_factors():
    numeric, categorical = _grid()
    fm = FeatureModel.fit(numeric, categorical, "full")
    # c is constant: left out; b has two levels: no square.
    assert fm.terms == ("intercept", "a", "b", "family[x]", "a^2", "a:b")
    X = fm.transform(numeric, categorical)
    assert X.shape == (12, 6)
    assert X[:, 0].tolist() == [1.0] * 12
    assert X[:, 1].min() == -1.0 and X[:, 1].max() == 1.0
    assert np.allclose(X[:, 4], X[:, 1] ** 2)
    assert np.allclose(X[:, 5], X[:, 1] * X[:, 2])
    assert FeatureModel.fit(numeric, categorical, "main").terms == (
        "intercept",
        "a",
        "b",
        "family[x]",
    )


def test_factor_determined_by_the_category_is_left_out():
    numeric, categorical = _grid()
    numeric["d"] = np.where(categorical["family"] == "x", 64.0, 128.0)
    fm = FeatureModel.fit(numeric, categorical, "main")
    assert "d" not in fm.terms


def test_unknown_order_is_rejected():
    numeric, categorical = _grid()
    with pytest.raises(DesignError, match="model order"):
        FeatureModel.fit(numeric, categorical, "cubic")


def test_check_estimable_names_aliased_terms():
    x = np.linspace(-1, 1, 10)
    X = np.column_stack([np.ones(10), x, 3 * x])
    with pytest.raises(DesignError, match=r"rank 2 < 3 terms; aliased term\(s\) \['x3'\]"):
        check_estimable(X, ["intercept", "x", "x3"])
    check_estimable(X[:, :2], ["intercept", "x"])  # estimable: no error
    with pytest.raises(DesignError, match="2 candidates are fewer than the 3 model terms"):
        check_estimable(X[:2], ["intercept", "x", "x3"])


def test_model_matrix_of_workloads_codes_vision_tokens_and_ffn_ratio():
    common = {"num_layers": 1, "batch_size": 2}
    ws = [
        Workload(
            family="bert",
            hidden_size=64,
            num_heads=2,
            intermediate_size=128,
            vocab_size=100,
            seq_len=32,
            **common,
        ),
        Workload(
            family="bert",
            hidden_size=128,
            num_heads=2,
            intermediate_size=512,
            vocab_size=100,
            seq_len=64,
            **common,
        ),
        Workload(
            family="vit",
            hidden_size=128,
            num_heads=4,
            intermediate_size=512,
            image_size=32,
            patch_size=8,
            **common,
        ),
        Workload(
            family="vit",
            hidden_size=64,
            num_heads=2,
            intermediate_size=128,
            image_size=64,
            patch_size=8,
            **common,
        ),
        Workload(
            family="bert",
            hidden_size=256,
            num_heads=8,
            intermediate_size=512,
            vocab_size=100,
            seq_len=64,
            mode="infer",
            **common,
        ),
    ]
    X, fm = model_matrix(ws, "main")
    assert fm.ranges["seq_len"] == (17.0, 65.0)  # vit: (32/8)^2 + 1 tokens
    assert fm.ranges["ffn_ratio"] == (2.0, 4.0)
    assert {"family[bert]", "mode[infer]"} <= set(fm.terms)
    assert X.shape == (5, fm.n_terms)
