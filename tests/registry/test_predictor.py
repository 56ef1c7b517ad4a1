import numpy as np
import pandas as pd
import pytest
from tiny_specs import tiny_spec

from scaledl.registry import load_predictor
from scaledl.workloads.device import local_device_name
from scaledl.workloads.spec import Workload, WorkloadError

pytestmark = pytest.mark.slow

# The default epoch of 256 samples (steps per epoch are asserted below).
ROW = tiny_spec("bert", dataset_size=256)


@pytest.fixture(scope="module")
def predictor(registry_root):
    return load_predictor(registry_root / "scaledl")


def test_predict_frame_rows_in_order(predictor):
    frame = pd.DataFrame(
        [
            {**ROW, "batch_size": 4, "dataset_size": 100, "workload_id": "ignored metadata"},
            {**ROW, "family": "t5", "world_size": 2},
            {
                **ROW,
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
