import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from scaledl.graph.operators import descriptor, matmul_descriptor
from scaledl.models.device_columns import device_columns
from scaledl.models.operators import (
    OperatorTimeModel,
    operator_features,
    roofline_terms,
    shared_fits,
)

H100_PEAK_PER_MS = 66.908e9  # FP32 FLOP per ms
H100_BYTES_PER_MS = 3430e6


def _ops(rows, device="cuda:NVIDIA H100 80GB HBM3"):
    frame = pd.DataFrame(rows)
    return pd.concat([frame, device_columns([device] * len(frame), ["fp32"] * len(frame))], axis=1)


def test_square_gemm_runs_in_one_half_empty_wave():
    # 1024^3: 8 x 8 = 64 tiles of 128 x 128 on 132 SMs -> one wave, less than half full.
    ops = _ops([matmul_descriptor((1024, 1024), (1024, 1024), 4)])
    t = roofline_terms(ops, "forward")
    assert t.tiles[0] == 64 and t.waves[0] == 1
    assert t.flops[0] == 2 * 1024**3
    wave_ms = 132 * 2 * 128 * 128 * 1024 / H100_PEAK_PER_MS  # a whole wave's time
    assert t.compute_ms[0] == pytest.approx(wave_ms)
    assert t.compute_ms[0] > t.flops[0] / H100_PEAK_PER_MS  # quantised above the ideal
    assert t.memory_ms[0] == pytest.approx(4 * 3 * 1024**2 / H100_BYTES_PER_MS)
    assert t.roofline_ms[0] == pytest.approx(max(wave_ms, t.memory_ms[0]))


def test_waves_and_backward_of_a_tall_gemm():
    # M=8192, N=1024, K=1024: 64 x 8 = 512 tiles -> ceil(512 / 132) = 4 waves.
    ops = _ops([matmul_descriptor((8192, 1024), (1024, 1024), 4)])
    fwd = roofline_terms(ops, "forward")
    assert fwd.tiles[0] == 512 and fwd.waves[0] == 4
    X, roof = operator_features(ops, "matmul", "forward")
    assert X[0, 7] == pytest.approx(512 / (4 * 132))  # wave efficiency
    bwd = roofline_terms(ops, "backward")
    # dA: 8192 x 1024 (512 tiles, 4 waves), dB: 1024 x 1024 (64 tiles, 1 wave)
    assert bwd.tiles[0] == 512 + 64 and bwd.waves[0] == 5
    assert bwd.flops[0] == 2 * fwd.flops[0]


def test_small_output_dimension_gets_a_small_tile():
    # attention scores @ V: N = 64 columns use 64-wide tiles, not 128.
    ops = _ops([matmul_descriptor((32, 512, 512), (32, 512, 64), 4)])
    t = roofline_terms(ops, "forward")
    assert t.tiles[0] == 32 * 4 * 1
    assert ops["op_kind"].iloc[0] == "batched" and ops["batch"].iloc[0] == 32


def test_elementwise_roofline_is_memory_bound():
    ops = _ops([descriptor("elementwise", "add", elements=2**20, bytes_in=8 * 2**20,
                           bytes_out=4 * 2**20)])  # fmt: skip
    t = roofline_terms(ops, "forward")
    assert t.roofline_ms[0] == pytest.approx(12 * 2**20 / H100_BYTES_PER_MS)
    assert roofline_terms(ops, "backward").bytes[0] == 0  # a gradient passes through an add


def _synthetic(n=240, seed=0):
    """Operators on two GPUs whose time is the roofline over a known utilisation."""
    rng = np.random.default_rng(seed)
    rows, devices = [], []
    for i in range(n):
        m, nn, k = (int(2 ** rng.uniform(7, 13)) for _ in range(3))
        if i % 2:
            rows.append(matmul_descriptor((m, k), (k, nn), 4))
        else:
            e = m * nn
            rows.append(descriptor("elementwise", "mul", elements=e, bytes_in=8 * e,
                                   bytes_out=4 * e))  # fmt: skip
        devices.append("cuda:NVIDIA H100 80GB HBM3" if i % 3 else "cuda:Tesla V100-PCIE-32GB")
    ops = _ops(rows, devices[0])
    ops[list(ops.columns[-5:])] = device_columns(devices, ["fp32"] * n).to_numpy()
    util = np.where(ops["op_class"] == "matmul", 0.7, 0.5)
    for d in ("forward", "backward"):
        ops[f"{d}_ms"] = roofline_terms(ops, d).roofline_ms / util + 0.005
    ops["group"] = np.arange(n) % 3
    return ops


def test_operator_model_is_bounded_by_the_roofline_and_learns_utilisation():
    ops = _synthetic()
    grid = (
        {"n_estimators": 30, "max_depth": 3, "learning_rate": 0.2, "min_samples_leaf": 3},
        {"n_estimators": 60, "max_depth": 2, "learning_rate": 0.2, "min_samples_leaf": 3},
    )
    model = OperatorTimeModel(grid=grid, min_rows=5).fit(ops)
    assert set(model.params_) == {(c, d) for c in ("matmul", "elementwise")
                                  for d in ("forward", "backward")}  # fmt: skip
    assert ("reduction", "forward") in model.fallback_  # no rows: roofline alone
    test = _synthetic(60, seed=1)
    for d in ("forward", "backward"):
        pred = model.predict(test, d)
        assert (pred >= roofline_terms(test, d).roofline_ms - 1e-12).all()
        mre = np.mean(np.abs(pred - test[f"{d}_ms"]) / test[f"{d}_ms"])
        assert mre < 0.15, (d, mre)
    assert all(np.isfinite(v) for v in model.inner_mre_.values())


def test_operator_model_needs_data():
    with pytest.raises(ValueError, match="no training operators"):
        OperatorTimeModel().fit(pd.DataFrame())
    with pytest.raises(NotFittedError, match="not fitted"):
        OperatorTimeModel().predict(_ops([matmul_descriptor((8, 8), (8, 8), 4)]))


def test_operator_model_follows_the_estimator_contract():
    grid = ({"n_estimators": 5, "max_depth": 2, "learning_rate": 0.3, "min_samples_leaf": 2},)
    model = OperatorTimeModel(tile=64, grid=grid, min_rows=5)
    assert model.get_params() == {"tile": 64, "grid": grid, "min_rows": 5,
                                  "device_features": "absolute"}  # fmt: skip
    assert not [k for k in vars(model) if k.endswith("_")]  # no fitted state before fit
    model.fit(_synthetic(40, seed=0))
    copy = clone(model)
    assert copy.get_params() == model.get_params() and not hasattr(copy, "models_")
    with pytest.raises(NotFittedError):
        copy.predict(_synthetic(5, seed=2), "forward")
    assert len(model.predict(_synthetic(5, seed=2), "forward")) == 5


_GRID = (
    {"n_estimators": 20, "max_depth": 3, "learning_rate": 0.2, "min_samples_leaf": 3},
    {"n_estimators": 30, "max_depth": 2, "learning_rate": 0.2, "min_samples_leaf": 3},
)


def test_shared_fits_fit_each_regressor_once_and_change_no_prediction():
    ops, test = _synthetic(), _synthetic(60, seed=1)
    alone = OperatorTimeModel(grid=_GRID, min_rows=5).fit(ops)
    # The correction's inner refit: the rows of groups 0 and 1 with the chosen parameters.
    inner_rows = ops[ops["group"] != 2].reset_index(drop=True)
    inner_alone = OperatorTimeModel(grid=(_GRID[0],), min_rows=5).fit(inner_rows)
    with shared_fits() as memo:
        shared = OperatorTimeModel(grid=_GRID, min_rows=5).fit(ops)
        n_after_selection = len(memo)
        inner_shared = OperatorTimeModel(grid=(_GRID[0],), min_rows=5).fit(inner_rows)
        with shared_fits() as nested:  # a nested block uses the outer memo
            assert nested is memo
        assert len(memo) == n_after_selection  # every inner fit was one of the selection's
        again = OperatorTimeModel(grid=_GRID, min_rows=5).fit(ops)
        assert all(again.models_[k] is shared.models_[k] for k in shared.models_)
    # 4 keys x (2 parameter sets x 3 groups + the final fit, unless it is a selection fit)
    assert 4 * 6 <= n_after_selection <= 4 * 7
    for d in ("forward", "backward"):
        np.testing.assert_array_equal(shared.predict(test, d), alone.predict(test, d))
        np.testing.assert_array_equal(inner_shared.predict(test, d), inner_alone.predict(test, d))
    assert shared.params_ == alone.params_ and shared.inner_mre_ == alone.inner_mre_
    with shared_fits() as fresh:  # the memo ends with its block
        assert fresh == {}


def _waves_bound(devices, n=300, seed=0):
    """Matmuls whose utilisation grows with their waves on the device: 0.45 to 0.9."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        m, nn, k = (int(2 ** rng.uniform(8, 13)) for _ in range(3))
        rows.append(matmul_descriptor((m, k), (k, nn), 4))
    names = [devices[i % len(devices)] for i in range(n)]
    ops = pd.concat([pd.DataFrame(rows), device_columns(names, ["fp32"] * n)], axis=1)
    for d in ("forward", "backward"):
        terms = roofline_terms(ops, d)
        util = 0.9 - 0.45 / np.maximum(terms.waves, 1.0)
        ops[f"{d}_ms"] = terms.roofline_ms / util
    ops["group"] = np.arange(n) % 3
    return ops


def test_relative_device_features_carry_utilisation_to_an_unseen_gpu():
    train = _waves_bound(["cuda:NVIDIA H100 80GB HBM3", "cuda:Tesla V100-PCIE-32GB",
                          "cuda:Tesla T4"])  # fmt: skip
    unseen = _waves_bound(["cuda:NVIDIA A100-SXM4-40GB"], n=120, seed=1)
    grid = ({"n_estimators": 80, "max_depth": 3, "learning_rate": 0.2, "min_samples_leaf": 3},)
    model = OperatorTimeModel(grid=grid, min_rows=5, device_features="relative").fit(train)
    for d in ("forward", "backward"):
        true = unseen[f"{d}_ms"].to_numpy()
        mre = np.mean(np.abs(model.predict(unseen, d) - true) / true)
        roofline = np.mean(np.abs(roofline_terms(unseen, d).roofline_ms - true) / true)
        assert mre < 0.05 and roofline > 0.15, (d, mre, roofline)
    with pytest.raises(ValueError, match="device_features must be one of"):
        OperatorTimeModel(device_features="both").fit(train)
