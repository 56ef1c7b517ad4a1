import numpy as np
import pandas as pd
import pytest
from tiny_specs import tiny, tiny_spec

from scaledl.planning import LayoutSpace, PlanError, plan
from scaledl.planning.layouts import layout_grid
from scaledl.registry import load_predictor

#: A tiny BERT of 2 blocks, 2 heads: tp 1/2, pp 1/2 are valid, tp 4 and pp 4 are not.
MODEL = {k: v for k, v in tiny_spec("bert", num_layers=2).items()
         if k not in ("batch_size", "dataset_size")}  # fmt: skip


def test_layout_grid_keeps_only_valid_layouts():
    grid = pd.DataFrame({"world_size": [4], "num_nodes": [1], "batch_size": [2]})
    space = LayoutSpace(tp_sizes=(1, 2, 4), pp_sizes=(1, 2, 4), micro_batches=(1, 2, 4))
    out = layout_grid(grid, space, tiny("bert", num_layers=2))
    assert set(out["tp_size"]) == {1, 2}  # 4 does not divide the 2 heads
    assert set(out["pp_size"]) == {1, 2}  # 4 does not divide the 2 blocks
    assert (out["dp_size"] * out["tp_size"] * out["pp_size"] == 4).all()
    assert not ((out["micro_batches"] > 1) & (out["pp_size"] == 1)).any()
    assert set(out["micro_batches"]) == {1, 2}  # 4 does not divide the batch of 2
    assert not ((out["sharding"] != "none") & (out["dp_size"] < 2)).any()
    flat = out[out["pp_size"] == 1]
    assert set(flat["pipeline_schedule"]) == {"1f1b"}  # no duplicate per schedule
    # torch's Schedule1F1B refuses fewer micro-batches than stages: those are GPipe only
    short = out[(out["pp_size"] > 1) & (out["micro_batches"] < out["pp_size"])]
    assert len(short) and set(short["pipeline_schedule"]) == {"gpipe"}
    assert {"1f1b", "gpipe"} <= set(out.loc[out["micro_batches"] >= 2, "pipeline_schedule"])
    assert not out.duplicated().any()


def test_layout_space_refuses_bad_values():
    with pytest.raises(ValueError, match="tp_sizes"):
        LayoutSpace(tp_sizes=(0,))
    with pytest.raises(ValueError, match=r"field 'shardings' \(value \['zero9'\]\)"):
        LayoutSpace(shardings=("zero9",))
    with pytest.raises(ValueError, match=r"field 'schedules' \(value \['interleaved'\]\)"):
        LayoutSpace(schedules=("interleaved",))


@pytest.mark.slow
def test_plan_with_layouts_shows_the_fastest_layout_per_world_size(registry_root):
    predictor = load_predictor(registry_root / "scaledl")
    args = dict(dataset_size=64, epochs=1, world_sizes=[1, 2, 4], batch_sizes=[2, 4],
                price_per_device_hour=1.0, coverage=None, device_memory_gb=8.0)  # fmt: skip
    ddp = plan(predictor, MODEL, **args)
    assert "layout" not in ddp.table  # the default search is unchanged
    result = plan(predictor, MODEL, layouts=LayoutSpace(tp_sizes=(1, 2), pp_sizes=(1, 2),
                                                        micro_batches=(1, 2)), **args)  # fmt: skip
    t = result.table
    assert {"dp2-fsdp", "tp2", "pp2-1f1b-m2", "dp2-tp2"} <= set(t["layout"])
    assert (t["global_batch_size"] == t["batch_size"] * t["dp_size"]).all()
    assert (t["iteration_s"] > 0).all()
    flagged = t[~t["layout"].str.fullmatch(r"dp\d+")]
    assert len(flagged) and flagged["extrapolation"].str.contains("layout=").all()
    best = result.best_per_world_size
    assert best["world_size"].tolist() == [1, 2, 4]
    text = result.to_text()
    assert "fastest layout per world size" in text
    # the reason is the validation's, naming field and value
    with pytest.raises(PlanError, match=r"no valid layout .*world_size=3 is not divisible by "
                       r"tp_size \* pp_size = 2 \* 1"):  # fmt: skip
        plan(predictor, {**MODEL, "mode": "infer"}, world_sizes=[3], batch_sizes=[2],
             **{k: v for k, v in args.items() if k not in ("world_sizes", "batch_sizes")},
             layouts=LayoutSpace(tp_sizes=(2,), pp_sizes=(1,), shardings=("fsdp",)))  # fmt: skip


def test_cli_layout_set_parses_fields_and_names_a_bad_one():
    from scaledl.cli.predict import _layout_space

    space = _layout_space(["tp_sizes=1,2", "shardings=none,fsdp"])
    assert space.tp_sizes == (1, 2) and space.shardings == ("none", "fsdp")
    with pytest.raises(ValueError, match="tp_size=2"):
        _layout_space(["tp_size=2"])


@pytest.mark.slow
def test_plan_with_layouts_names_its_recipe(registry_root, layout_calibration, tmp_path):
    import shutil

    from scaledl_fixtures import save_beside

    name_dir = tmp_path / "scaledl"
    shutil.copytree(registry_root / "scaledl", name_dir)
    args = dict(
        dataset_size=64,
        epochs=1,
        world_sizes=[2],
        batch_sizes=[4],
        price_per_device_hour=1.0,
        coverage=None,
        device_memory_gb=8.0,
        layouts=LayoutSpace(tp_sizes=(1, 2), pp_sizes=(1, 2), micro_batches=(1, 2)),
    )
    before = plan(load_predictor(name_dir), MODEL, **args)  # fmt: skip
    assert set(before.table["layout_recipe"]) == {"current"}
    assert "layout recipe: current for" in before.to_text()
    target = save_beside(layout_calibration, name_dir / "v2")
    after = plan(load_predictor(name_dir), MODEL, **args)
    label = f"calibrated:{layout_calibration.recipe.name}@{target.name}"
    assert set(after.table["layout_recipe"]) == {label}  # plain DDP candidates too: one model
    assert f"layout recipe: {label} for {len(after.table)} candidate(s)" in after.to_text()
    assert not np.allclose(after.table["iteration_s"].sort_values(),
                           before.table["iteration_s"].sort_values())  # fmt: skip
