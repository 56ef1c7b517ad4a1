import numpy as np
import pandas as pd
import pytest
from tiny_specs import tiny, tiny_spec

from scaledl.planning import LayoutSpace, PlanError, plan
from scaledl.planning.layouts import _layouts, layout_count, layout_grid, search_layouts
from scaledl.prediction.predictor import load_predictor

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
    assert result.searched.candidates == len(t) and result.searched.limit == 100_000
    assert f"combinations: {len(t)} candidates predicted in" in text
    # the reason is the validation's, naming field and value, with its count
    why = r"4 as world_size=3 is not divisible by tp_size \* pp_size = 2 \* 1"
    with pytest.raises(
        PlanError, match=r"no valid layout among the 4 combinations .* refused: " + why
    ):
        plan(predictor, {**MODEL, "mode": "infer"}, world_sizes=[3], batch_sizes=[2],
             **{k: v for k, v in args.items() if k not in ("world_sizes", "batch_sizes")},
             layouts=LayoutSpace(tp_sizes=(2,), pp_sizes=(1,), shardings=("fsdp",)))  # fmt: skip


def test_cli_layout_set_parses_fields_and_names_a_bad_one():
    from scaledl.cli.predict import _layout_space

    space = _layout_space(["tp_sizes=1,2", "shardings=none,fsdp"])
    assert space.tp_sizes == (1, 2) and space.shardings == ("none", "fsdp")
    with pytest.raises(ValueError, match="tp_size=2"):
        _layout_space(["tp_size=2"])
    with pytest.raises(ValueError, match=r"--layout-set 'tp_sizes=4': field 'tp_sizes' given "
                       "twice; give its values once"):  # fmt: skip
        _layout_space(["tp_sizes=1,2", "pp_sizes=2", "tp_sizes=4"])


def test_cli_layout_set_fields_are_the_layout_spaces():
    from dataclasses import fields

    from scaledl.cli.predict import LAYOUT_SET_FIELDS

    assert LAYOUT_SET_FIELDS == tuple(f.name for f in fields(LayoutSpace))


def test_layout_space_takes_the_workloads_sharding_aliases():
    from scaledl.cli.predict import _layout_space

    # the workload's alias table (zero3 and fsdp2 for fsdp, ddp for none); repeats dropped
    space = _layout_space(["shardings=zero3,fsdp,ddp", "tp_sizes=2,1,2"])
    assert space.shardings == ("fsdp", "none") and space.tp_sizes == (2, 1)
    assert LayoutSpace(shardings=("fsdp2",)).shardings == ("fsdp",)
    with pytest.raises(ValueError, match=r"field 'tp_sizes' \(value \(True,\)\)"):
        LayoutSpace(tp_sizes=(True,))


@pytest.mark.parametrize(
    "space",
    [LayoutSpace(), LayoutSpace(schedules=("gpipe",)), LayoutSpace(pp_sizes=(2, 4), tp_sizes=(1,)),
     LayoutSpace(pp_sizes=(1,), micro_batches=(1, 3, 5), shardings=("none",))],
)  # fmt: skip
def test_layout_count_counts_the_layouts_without_building_them(space):
    assert layout_count(space) == len(_layouts(space))


def test_a_search_with_nothing_valid_counts_each_reason():
    grid = pd.DataFrame({"world_size": [2, 4], "num_nodes": [1, 1], "batch_size": [2, 2]})
    # only 1F1B pipelines of fewer micro-batches than stages: nothing torch can run
    short = LayoutSpace(tp_sizes=(1,), pp_sizes=(2,), micro_batches=(1,), schedules=("1f1b",),
                        shardings=("none",))  # fmt: skip
    search = search_layouts(grid, short, tiny("bert", num_layers=2))
    assert (search.combinations, search.valid, len(search.candidates)) == (2, 0, 0)
    assert search.why_none() == (
        "2 as pipeline_schedule='1f1b' needs micro_batches >= pp_size (torch's Schedule1F1B); "
        "micro_batches=1, pp_size=2: use gpipe or more micro-batches"
    )
    # several rules: each counted, the most frequent first, each with an example
    space = LayoutSpace(tp_sizes=(4,), pp_sizes=(1, 4), micro_batches=(1,), shardings=("none",))
    search = search_layouts(grid, space, tiny("bert", num_layers=2))
    assert search.valid == 0 and search.combinations == 2 * 3
    assert list(search.refused.values()) == [
        (3, "world_size=2 is not divisible by tp_size * pp_size = 4 * 1"),
        (2, "pipeline_schedule='1f1b' needs micro_batches >= pp_size (torch's Schedule1F1B); "
            "micro_batches=1, pp_size=4: use gpipe or more micro-batches"),
        (1, "tp_size=4 must divide num_heads=2"),
    ]  # fmt: skip


def test_a_search_past_its_candidate_budget_only_counts():
    grid = pd.DataFrame({"world_size": [4], "num_nodes": [1], "batch_size": [2]})
    space = LayoutSpace(tp_sizes=(1, 2), pp_sizes=(1, 2), micro_batches=(1, 2))
    spec = tiny("bert", num_layers=2)
    whole = search_layouts(grid, space, spec)
    capped = search_layouts(grid, space, spec, max_candidates=whole.valid - 1)
    assert capped.valid == whole.valid == len(whole.candidates) > 1
    assert capped.candidates.empty  # counted, not kept: the planner refuses it


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


@pytest.mark.slow
def test_plan_refuses_a_layout_search_past_its_limits(registry_root, monkeypatch):
    from scaledl.planning import planner

    predictor = load_predictor(registry_root / "scaledl")
    args = dict(dataset_size=64, epochs=1, batch_sizes=[1, 2, 4, 8], price_per_device_hour=1.0,
                coverage=None, device_memory_gb=8.0)  # fmt: skip
    with pytest.raises(PlanError, match=r"5,242,880 combinations \(4,096 world size\(s\) x 1 node "
                       r"count\(s\) x 4 batch size\(s\) x 320 layout\(s\) of the space\), over "
                       r"the limit of 1,000,000 per layout search"):  # fmt: skip
        plan(predictor, MODEL, world_sizes=list(range(1, 4097)), layouts=LayoutSpace(), **args)
    monkeypatch.setattr(planner, "MAX_LAYOUT_CANDIDATES", 5)
    with pytest.raises(PlanError, match=r"argument 'layouts': 148 valid layout candidates \(of "
                       r"2,560 combinations\), over the limit of 5 per plan"):  # fmt: skip
        plan(predictor, MODEL, world_sizes=[2, 4], layouts=LayoutSpace(), **args)
    # a space torch cannot run says why, with the count
    short = LayoutSpace(tp_sizes=(1,), pp_sizes=(2,), micro_batches=(1,), schedules=("1f1b",),
                        shardings=("none",))  # fmt: skip
    why = "8 as pipeline_schedule='1f1b' needs micro_batches >= pp_size"
    with pytest.raises(
        PlanError, match=r"no valid layout among the 8 combinations .* refused: " + why
    ):
        plan(predictor, MODEL, world_sizes=[2, 4], layouts=short, **args)
