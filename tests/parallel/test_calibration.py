"""The layout calibration: the product's recipe fitted on every profiled workload."""

import pandas as pd
import pytest
from scaledl_fixtures import layout_slice

from scaledl.parallel.calibration import fit_layout_calibration
from scaledl.parallel.recipe import RECIPE


def test_the_recipe_is_fixed(layout_calibration):
    cal = layout_calibration
    assert set(cal.training_data["by_kind"]) == {"ddp", "fsdp", "tp", "pp"}
    assert cal.recipe.name == RECIPE
    assert cal.recipe.overlap is not None  # the recipe fits overlap factors


def test_the_recipe_is_fitted_on_every_profiled_workload(layout_calibration):
    data = layout_calibration.training_data
    assert data["workloads"] == len(data["workload_ids"]) == sum(data["by_kind"].values()) == 8
    assert len(data["sha256"]) == 64
    in_sample = layout_calibration.in_sample
    assert set(in_sample["mre_by_kind"]) == set(data["by_kind"])
    (row,) = in_sample["ranking"]  # one model: BERT, batch 4, its 8 layouts
    assert len(row["layouts"]) == 8 and -1.0 <= row["tau_calibrated"] <= 1.0
    assert layout_calibration.label == f"calibrated:{layout_calibration.recipe.name}@unsaved"


def test_profiles_of_several_devices_are_refused_before_fitting(tmp_path):
    out = layout_slice(tmp_path / "two")
    w = pd.read_parquet(out / "workloads.parquet")
    w.loc[w.index[0], "device_name"] = "cpu:Some Other CPU"
    w.to_parquet(out / "workloads.parquet")
    with pytest.raises(ValueError, match=r"workloads.parquet: field 'device_name' \(values"):
        fit_layout_calibration(out)


def test_profiles_without_layouts_are_refused(tmp_path):
    out = layout_slice(tmp_path / "ddp")
    w = pd.read_parquet(out / "workloads.parquet")
    w[w["tp_size"].isna()].to_parquet(out / "workloads.parquet")  # the plain DDP rows only
    with pytest.raises(ValueError, match="need both data-parallel and layout workloads"):
        fit_layout_calibration(out)


def test_the_profiled_workloads_are_in_sample_whatever_their_dataset_size(layout_calibration):
    from scaledl_fixtures import LAYOUT_DATASET
    from tiny_specs import tiny

    from scaledl.workloads.spec import Workload

    records = pd.read_parquet(LAYOUT_DATASET / "workloads.parquet").set_index("workload_id")
    own = [Workload.from_record(records.loc[wid].to_dict())
           for wid in layout_calibration.training_data["workload_ids"]]  # fmt: skip
    bigger = [w.model_copy(update={"dataset_size": w.dataset_size * 10}) for w in own]
    assert layout_calibration.fitted_on(own).all() and layout_calibration.fitted_on(bigger).all()
    assert not layout_calibration.fitted_on([tiny("bert", world_size=2, sharding="fsdp")]).any()
