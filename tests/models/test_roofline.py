import dataclasses

import numpy as np
import pandas as pd
import pytest

from scaledl.models.layerwise import LayerwiseModel
from scaledl.models.roofline import (
    GRAD_BYTES_PER_PARAM,
    MARGIN,
    RooflineBand,
    bound_predictions,
    named_notes,
)


def layers(n: int = 40, seed: int = 0) -> pd.DataFrame:
    """Measured layers: time = overhead per operator + FLOPs at up to 100 GFLOP/s."""
    rng = np.random.default_rng(seed)
    flops = rng.uniform(1e6, 1e9, n)
    ops = rng.integers(1, 20, n).astype(float)
    efficiency = rng.uniform(0.2, 1.0, n)
    forward = ops * 0.01 + flops / (1e8 * efficiency)  # ms: 1e8 FLOP/ms = 100 GFLOP/s
    return pd.DataFrame(
        {
            "node_kind": "layer",
            "layer_name": [f"layer{i}" for i in range(n)],
            "layer_type": "feed-forward",
            "fwd_flops": flops,
            "bwd_flops": 2 * flops,
            "fwd_ops": ops,
            "params": 1000.0,
            "input_bytes": flops / 1000,
            "output_bytes": flops / 1000,
            "forward_ms": forward,
            "backward_ms": 2 * forward,
            "train": 1,
        }
    )


def test_ceilings_are_the_best_achieved_and_every_training_layer_lies_in_the_band():
    nodes = layers()
    band = RooflineBand.fit(nodes)
    fwd = band.directions["forward"]
    assert fwd.flops_per_ms == pytest.approx((nodes["fwd_flops"] / nodes["forward_ms"]).max())
    moved = nodes["input_bytes"] + nodes["output_bytes"]
    assert fwd.bytes_per_ms == pytest.approx((moved / nodes["forward_ms"]).max())
    assert fwd.op_ms == pytest.approx((nodes["forward_ms"] / nodes["fwd_ops"]).min())
    assert fwd.multiple == pytest.approx(fwd.max_ratio * MARGIN)
    bwd_moved = moved + GRAD_BYTES_PER_PARAM * nodes["params"]
    bwd = band.directions["backward"]
    assert bwd.bytes_per_ms == pytest.approx((bwd_moved / nodes["backward_ms"]).max())
    for direction, b in band.directions.items():
        low, high = b.bounds(nodes, direction)
        t = nodes[f"{direction}_ms"].to_numpy()
        assert (low <= t).all() and (t <= high).all()
        assert (t / high).max() == pytest.approx(1 / MARGIN)  # the worst layer: margin below


def test_prediction_outside_the_band_is_clamped_and_named():
    nodes = layers()
    band = RooflineBand.fit(nodes)
    low, high = band.directions["forward"].bounds(nodes, "forward")
    blow, bhigh = band.directions["backward"].bounds(nodes, "backward")
    pred = pd.DataFrame(
        {"forward_ms": nodes["forward_ms"].to_numpy(), "backward_ms": 0.0}, index=nodes.index
    )
    pred.loc[3, "forward_ms"] = high[3] * 100  # far above what the device needs
    pred.loc[5, "forward_ms"] = low[5] / 100  # faster than the device can
    pred.loc[7, "backward_ms"] = bhigh[7] * 3
    out = bound_predictions(band, nodes, pred)
    assert out.loc[3, "forward_ms"] == pytest.approx(high[3])
    assert out.loc[5, "forward_ms"] == pytest.approx(low[5])
    assert out.loc[7, "backward_ms"] == pytest.approx(bhigh[7])
    assert out.loc[3, "bounded"] == (
        f"forward {high[3] * 100:.4g} ms -> {high[3]:.4g} ms "
        f"(above {band.directions['forward'].multiple:.3g} x roofline+overhead)"
    )
    assert out.loc[5, "bounded"].startswith("forward ") and "below 1/2 of" in out.loc[5, "bounded"]
    assert out.loc[7, "bounded"].startswith("backward ")
    named = named_notes(nodes["layer_name"], out["bounded"])
    assert named[3] == "layer3 " + out.loc[3, "bounded"] and named[0] == ""
    untouched = ~out.index.isin([3, 5, 7])
    assert (out.loc[untouched, "bounded"] == "").all()
    assert (out.loc[untouched, "backward_ms"] == 0.0).all()  # 0: a pass not predicted
    np.testing.assert_allclose(out.loc[untouched, "forward_ms"], nodes.loc[untouched, "forward_ms"])


def test_system_nodes_are_not_bounded():
    nodes = layers(10)
    band = RooflineBand.fit(nodes)
    nodes.loc[0, "node_kind"] = "optimizer"
    pred = pd.DataFrame({"forward_ms": 1e9, "backward_ms": 0.0}, index=nodes.index)
    out = bound_predictions(band, nodes, pred)
    assert out.loc[0, "forward_ms"] == 1e9 and out.loc[0, "bounded"] == ""
    assert (out.loc[1:, "bounded"] != "").all()


def test_layerwise_model_bounds_its_predictions():
    nodes = layers()
    model = LayerwiseModel().fit(nodes)
    assert model.band_ is not None
    out = model.predict(nodes)
    assert (out["bounded"] == "").all()  # its own training layers lie inside
    # a band whose upper bound is a thousandth of the training layers' times clamps them all
    fwd = model.band_.directions["forward"]
    narrow = RooflineBand(
        {"forward": dataclasses.replace(fwd, multiple=fwd.max_ratio * 1e-3)}, MARGIN
    )
    unbounded = LayerwiseModel.from_fitted(model.models_).predict(nodes)
    assert (unbounded["bounded"] == "").all()
    out = LayerwiseModel.from_fitted(model.models_, band=narrow).predict(nodes)
    high = narrow.directions["forward"].bounds(nodes, "forward")[1]
    np.testing.assert_allclose(out["forward_ms"], high)
    np.testing.assert_allclose(out["backward_ms"], unbounded["backward_ms"])  # not banded
    assert out["bounded"].str.startswith("forward ").all()
    assert not out["bounded"].str.contains("backward").any()
    # a caller that cannot report a clamp asks for none
    off = LayerwiseModel.from_fitted(model.models_, band=narrow).predict(nodes, bound=False)
    pd.testing.assert_frame_equal(off, unbounded)


def test_kernel_features_have_no_band():
    nodes = layers().assign(kernel_fwd_ms=1.0, kernel_bwd_ms=2.0)
    assert LayerwiseModel(features="kernel").fit(nodes).band_ is None


def test_round_trip_and_bad_records():
    band = RooflineBand.fit(layers())
    again = RooflineBand.from_dict(band.to_dict())
    assert again == band
    record = band.to_dict()
    record["directions"]["forward"]["multiple"] = -1.0
    with pytest.raises(ValueError, match="directions.forward.multiple"):
        RooflineBand.from_dict(record)
    with pytest.raises(ValueError, match="margin"):
        RooflineBand.fit(layers(), margin=0.5)
    with pytest.raises(ValueError, match="no measured layer"):
        RooflineBand.fit(layers().assign(node_kind="optimizer"))


def test_named_notes_prefix_every_pass():
    notes = ["", "forward 9 ms -> 1 ms (x); backward 9 ms -> 2 ms (y)"]
    assert named_notes(["a", "b.c"], notes) == [
        "",
        "b.c forward 9 ms -> 1 ms (x); b.c backward 9 ms -> 2 ms (y)",
    ]
