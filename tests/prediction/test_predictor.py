import numpy as np
import pandas as pd
import pytest
from tiny_specs import tiny_spec

from scaledl.devices.local import local_device_name
from scaledl.models.guard import OutOfDomainError
from scaledl.models.intervals import CalibrationError, IntervalCalibration
from scaledl.prediction.predictor import load_predictor
from scaledl.registry import register_bundle
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.spec import Workload

pytestmark = pytest.mark.slow

# The default epoch of 256 samples (steps per epoch are asserted below).
ROW = tiny_spec("bert", dataset_size=256)


@pytest.fixture(scope="module")
def predictor(registry_root):
    return load_predictor(registry_root / "scaledl")


def test_predict_frame_rows_in_order(predictor):
    frame = pd.DataFrame(
        [
            # A column every workload has is filled in every row (an empty world_size cell
            # is an error, not 1); the other families' empty cells are fields not given.
            {
                **ROW,
                "batch_size": 4,
                "dataset_size": 100,
                "workload_id": "ignored metadata",
                "world_size": 1,
            },  # fmt: skip
            {**ROW, "family": "t5", "world_size": 2},
            {
                **ROW,
                "world_size": 1,
                "family": "vit",
                "vocab_size": np.nan,
                "seq_len": np.nan,
                "image_size": 32,
                "patch_size": 16,
                "num_labels": 10,
            },
        ]
    )
    result = predictor.predict(frame)
    assert list(result.columns) == [
        "workload_id",
        "family",
        "batch_size",
        "world_size",
        "iteration_s",
        "epoch_s",
        "steps_per_epoch",
        "used_generic_layer_model",
        "in_domain",
        "extrapolation",
        "recipe",
        "predictor_version",
    ]
    assert list(result["family"]) == ["bert", "t5", "vit"]
    assert list(result["batch_size"]) == [4, 2, 2]
    assert list(result["world_size"]) == [1, 2, 1]
    assert list(result["steps_per_epoch"]) == [25, 64, 128]
    assert (result["iteration_s"] > 0).all() and np.isfinite(result["epoch_s"]).all()
    assert set(result["predictor_version"]) == {"v2"}
    # No device_name means the predictor's device: the id is that of the spec on that device.
    expected = Workload.parse(
        {**ROW, "batch_size": 4, "dataset_size": 100, "device_name": predictor.devices[0]}
    )
    assert result["workload_id"].iloc[0] == expected.workload_id


def test_predict_dicts_workloads_and_detail(predictor):
    w = Workload.parse(ROW)
    a = predictor.predict([ROW])
    b = predictor.predict(w)
    assert a["iteration_s"].iloc[0] == b["iteration_s"].iloc[0]
    table, nodes = predictor.predict([ROW, {**ROW, "batch_size": 8}], detail=True)
    assert len(table) == 2
    assert list(nodes.columns[:5]) == [
        "workload_id",
        "node_index",
        "node_kind",
        "layer_name",
        "layer_type",
    ]
    assert set(nodes["workload_id"]) == set(table["workload_id"])
    assert {"forward_ms", "backward_ms", "total_ms", "used_generic"} <= set(nodes.columns)


def test_larger_batch_is_predicted_slower_by_the_layerwise_sum(predictor):
    _, nodes = predictor.predict([ROW, {**ROW, "batch_size": 64, "seq_len": 128}], detail=True)
    sums = nodes.groupby("workload_id", sort=False)["total_ms"].sum()
    assert sums.iloc[1] > sums.iloc[0]


def test_missing_required_field_names_field_and_row(predictor):
    frame = pd.DataFrame([ROW, {**ROW, "hidden_size": np.nan}])
    with pytest.raises(WorkloadError) as info:
        predictor.predict(frame)
    assert "row 2" in str(info.value) and "hidden_size" in str(info.value)  # rows count from 1
    no_batch = pd.DataFrame([{k: v for k, v in ROW.items() if k != "batch_size"}])
    with pytest.raises(WorkloadError, match=r"row 1.*field 'batch_size'"):
        predictor.predict(no_batch)


def test_no_row_names_the_source(predictor):
    with pytest.raises(WorkloadError, match=r"^workloads.csv: no workload to predict"):
        predictor.predict(pd.DataFrame(columns=["family", "batch_size"]), source="workloads.csv")


def test_invalid_value_names_field_and_row(predictor):
    with pytest.raises(WorkloadError, match=r"row 3: .*num_heads=3.*hidden_size=32"):
        predictor.predict([ROW, ROW, {**ROW, "num_heads": 3}])


def test_missing_or_bare_device_means_the_predictor_device(predictor):
    """Issue 15, case 9: one naming; the old-style bare kind resolves to the training device."""
    kind = predictor.devices[0].split(":")[0]
    rows = [ROW, {**ROW, "device_name": kind}, {**ROW, "device_name": predictor.devices[0]}]
    result = predictor.predict(rows)
    assert result["workload_id"].nunique() == 1
    other = "cuda" if kind == "cpu" else "cpu"
    with pytest.raises(WorkloadError) as info:
        predictor.predict([ROW, {**ROW, "device_name": other}])
    message = str(info.value)
    assert "row 2: field 'device_name'" in message and str(predictor.devices) in message


def test_unknown_device_is_refused(predictor):
    assert predictor.devices == [local_device_name()]
    with pytest.raises(WorkloadError) as info:
        predictor.predict([ROW, {**ROW, "device_name": "cuda:NVIDIA H100 80GB HBM3"}])
    message = str(info.value)
    assert "row 2" in message and "device_name" in message and "H100" in message
    assert "v2" in message


def test_no_workload(predictor):
    with pytest.raises(WorkloadError, match="no workload"):
        predictor.predict([])


def test_unknown_column_is_an_error_with_a_suggestion(predictor):
    frame = pd.DataFrame([{**ROW, "wrld_size": 8}])
    with pytest.raises(
        WorkloadError, match=r"runs\.csv: row 1.*'wrld_size'.*did you mean 'world_size'"
    ):
        predictor.predict(frame, source="runs.csv")


def test_every_prediction_says_whether_it_is_in_domain(predictor):
    """Issue 14: a bf16 workload or one on more nodes is flagged, never silently predicted."""
    rows = [ROW, {**ROW, "precision": "bf16"}, {**ROW, "world_size": 8, "num_nodes": 2},
            tiny_spec("deit")]  # fmt: skip
    result = predictor.predict(rows)
    assert result["in_domain"].tolist() == [True, False, False, False]
    assert result["extrapolation"][0] == ""
    assert (
        "precision=bf16: precision never trained on (trained on ['fp32'])"
        in (result["extrapolation"][1])
    )
    assert "num_nodes=2" in result["extrapolation"][2]
    assert "world_size=8" in result["extrapolation"][2]
    assert result["extrapolation"][3].startswith("family=deit: family never trained on")


def test_strict_names_the_row_and_field(predictor):
    rows = [ROW, {**ROW, "precision": "bf16"}]
    with pytest.raises(
        OutOfDomainError, match=r"w\.csv: row 2: .*field 'precision' \(value bf16\)"
    ):
        predictor.predict(rows, strict=True, source="w.csv")
    assert len(predictor.predict([ROW], strict=True)) == 1


def test_coverage_needs_a_calibrated_bundle(predictor):
    with pytest.raises(CalibrationError, match="no interval calibration"):
        predictor.predict([ROW], coverage=0.9)


@pytest.fixture(scope="module")
def calibrated(registry_root, tmp_path_factory):
    rng = np.random.default_rng(0)
    sigmas = {"in_domain": 0.1, "unseen_family": 0.6, "beyond_range": 0.3}
    residuals = {
        t: {s: rng.normal(0, sigma, 40) for s, sigma in sigmas.items()}
        for t in ("iteration", "epoch")
    }
    # Five families of 8: too few for the conformal quantile, the normal bound calibrates them.
    families = {t: {"unseen_family": np.repeat([f"f{i}" for i in range(5)], 8)} for t in residuals}
    cal = IntervalCalibration(residuals, "scaledl", "", "synthetic", families)
    root = tmp_path_factory.mktemp("calibrated")
    register_bundle(registry_root / "scaledl" / "v2", root, "scaledl", calibration=cal)
    return load_predictor(root / "scaledl"), cal


def test_epoch_bounds_are_at_least_steps_times_the_iteration_bounds(registry_root, tmp_path):
    rng = np.random.default_rng(1)
    # An epoch stratum far wider than the iteration's: calibrated alone, the epoch's lower
    # bound would claim an epoch shorter than its iterations' lower bound.
    residuals = {"iteration": {"in_domain": rng.normal(0, 0.01, 40)},
                 "epoch": {"in_domain": rng.normal(0, 0.5, 40)}}  # fmt: skip
    cal = IntervalCalibration(residuals, "scaledl", "", "synthetic")
    register_bundle(registry_root / "scaledl" / "v2", tmp_path, "scaledl", calibration=cal)
    predictor = load_predictor(tmp_path / "scaledl")
    result = predictor.predict([ROW], coverage=0.9)
    detail, _ = predictor.predict([ROW], coverage=0.9, detail=True)  # the other path
    assert detail["epoch_s_low"].to_numpy() == pytest.approx(result["epoch_s_low"].to_numpy())
    steps = result["steps_per_epoch"].to_numpy()
    assert (result["epoch_s_low"] >= steps * result["iteration_s_low"] - 1e-12).all()
    assert (result["epoch_s_high"] >= steps * result["iteration_s_high"] - 1e-12).all()
    assert (result["epoch_s_low"] <= result["epoch_s"]).all()
    alone_low = cal.interval("epoch", result["epoch_s"].to_numpy(), ["in_domain"], 0.9)[0]
    assert (alone_low < steps * result["iteration_s_low"]).all()  # the case this guards


def test_intervals_widen_outside_the_domain(calibrated):
    predictor, cal = calibrated
    rows = [ROW, tiny_spec("deit"), {**ROW, "precision": "bf16"}, {**ROW, "batch_size": 64}]
    result = predictor.predict(rows, coverage=0.9)
    columns = list(result.columns)
    at = columns.index("iteration_s")
    assert columns[at : at + 6] == ["iteration_s", "iteration_s_low", "iteration_s_high",
                                    "epoch_s", "epoch_s_low", "epoch_s_high"]  # fmt: skip
    for target in ("iteration_s", "epoch_s"):
        assert (result[f"{target}_low"] < result[target]).all()
        assert (result[target] < result[f"{target}_high"]).all()
    widths = cal.half_widths("iteration", 0.9)
    q = np.log(result["iteration_s_high"] / result["iteration_s"]).to_numpy()
    assert q[0] == pytest.approx(widths["in_domain"])
    assert q[1] == pytest.approx(widths["unseen_family"])  # the widest too
    assert q[2] == pytest.approx(max(widths.values()))  # precision: no stratum, the widest
    assert result["interval_basis"][0] == "in_domain" and result["interval_basis"][2] == "widest"
    assert result["interval_basis"][3] in ("beyond_range", "widest")
    assert q[3] >= widths["beyond_range"] - 1e-12
    # The bundle's family rule came through registration: the new family says how it is bounded.
    assert predictor.calibration.family_rule == cal.family_rule
    assert result["interval_calibration"][0] == "conformal"
    assert result["interval_calibration"][1] == "normal_prediction_bound"
    assert np.isfinite(q[1])
    detail, _ = predictor.predict(rows[:2], coverage=0.9, detail=True)
    assert list(detail["interval_calibration"]) == ["conformal", "normal_prediction_bound"]
    with pytest.raises(CalibrationError, match="coverage must lie in") as fraction:
        predictor.predict([ROW], coverage=1.2)
    assert "%" not in str(fraction.value)
    with pytest.raises(CalibrationError, match=r"got 90 \(a fraction: 0.9 for 90%\)"):
        predictor.predict([ROW], coverage=90)
