"""A GPU predictor's layouts: Megatron-LM's composition through `predict` and `plan`."""

import numpy as np
import pytest
from gpu_synthetic import TINY_GRID, synthetic_layout, write_synthetic
from typer.testing import CliRunner

import scaledl.prediction.gpu_layouts as gpu_layouts
from scaledl.cli import app
from scaledl.layout import vidur_network_root
from scaledl.models.kernel import KernelGraphMethod
from scaledl.parallel.megatron import predict_layout_row
from scaledl.planning import LayoutSpace, plan
from scaledl.prediction.gpu_layouts import gpu_system, system_collectives
from scaledl.prediction.predictor import load_predictor
from scaledl.registry import save_bundle
from scaledl.workloads.fields import WorkloadError

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

PARAMS = {"operator_params": {"grid": TINY_GRID, "min_rows": 5}}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    directory, data = write_synthetic(tmp_path_factory.mktemp("gpu_layouts"))
    method = KernelGraphMethod(**PARAMS).fit(data, [])
    root = tmp_path_factory.mktemp("registry")
    save_bundle(method, root, "scaledl-gpu", version="v1")
    return data, method, load_predictor(root / "scaledl-gpu")


def test_a_layout_is_composed_as_the_megatron_rows_are(bundle):
    data, method, predictor = bundle
    cm = system_collectives(str(vidur_network_root()), "h100_dgx")
    layouts = [
        synthetic_layout(data, tp_size=2),
        synthetic_layout(data, pp_size=2, micro_batches=2, pipeline_schedule="gpipe"),
        synthetic_layout(data, world_size=6, tp_size=2, dp_size=3),
    ]
    out = predictor.predict(layouts)
    expected = [predict_layout_row(method, w, cm)["scaledl_ms"] / 1000.0 for w in layouts]
    np.testing.assert_allclose(out["iteration_s"], expected, rtol=1e-9)
    assert (out["recipe"] == "megatron:h100_dgx").all()
    assert not out["in_domain"].any()
    assert "layout=tp2: composed by the megatron:h100_dgx recipe" in out["extrapolation"].iat[0]
    # a group size Vidur did not measure takes the nearest group's all-reduce, flagged
    assert (
        "dp_size=3: no all-reduce over 3 GPUs was measured (Vidur: [2, 4, 8] GPUs)"
        in (out["extrapolation"].iat[2])
    )
    # one GPU stays the predictor's own answer (no optimizer step); data parallelism of several
    # is composed (all-reduce and step added) where the recipe can, else flagged
    one = synthetic_layout(data, world_size=1)
    dp2 = synthetic_layout(data, dp_size=2, batch_size=2)
    l4 = dp2.model_copy(update={"device_name": "cuda:NVIDIA L4"})
    got = predictor.predict([one, dp2, l4])
    assert got["recipe"].tolist() == ["predictor", "megatron:h100_dgx", "predictor"]
    assert got["iteration_s"].iat[0] == pytest.approx(method.predict_iteration_ms([one])[0] / 1e3)
    assert got["iteration_s"].iat[1] == pytest.approx(
        predict_layout_row(method, dp2, cm)["scaledl_ms"] / 1e3
    )
    assert (
        "the gradient all-reduce and the optimizer step are not added"
        in (got["extrapolation"].iat[2])
    )
    assert "'device_name'" in got["extrapolation"].iat[2]


def test_rank_layers_are_predicted_once_per_micro_batch_and_split(bundle, monkeypatch):
    data, _, predictor = bundle
    calls = []
    original = gpu_layouts.rank_layers
    monkeypatch.setattr(gpu_layouts, "rank_layers",
                        lambda method, w: calls.append(w) or original(method, w))  # fmt: skip
    layouts = [synthetic_layout(data, world_size=2 * d, tp_size=2, dp_size=d) for d in (1, 2, 4)]
    layouts += [synthetic_layout(data, world_size=4, tp_size=2, pp_size=2)]
    answer = gpu_layouts.predict_gpu_layout_workloads(predictor, layouts, [""] * len(layouts))
    assert len(calls) == 1  # same micro-batch of 4, same tensor-parallel split
    # the three data-parallel sizes are composed in one call, as each would be alone
    cm = system_collectives(str(vidur_network_root()), "h100_dgx")
    alone = [predict_layout_row(predictor.method, w, cm)["scaledl_ms"] for w in layouts]
    np.testing.assert_allclose(answer.iteration_ms, alone, rtol=1e-9)


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"world_size": 2, "dp_size": 2, "sharding": "zero1"}, "'sharding' (value 'zero1')"),
        ({"world_size": 4, "tp_size": 2, "dp_size": 2, "num_nodes": 2}, "'num_nodes' (value 2)"),
        ({"world_size": 16, "tp_size": 2, "dp_size": 8}, "'world_size' (value 16)"),
        ({"tp_size": 2, "device_name": "cuda:NVIDIA L4"}, "'device_name' (value 'cuda:NVIDIA L4')"),
    ],
)
def test_what_the_recipe_does_not_compose_is_an_error_naming_the_row_and_field(
    bundle, update, field
):
    data, _, predictor = bundle
    w = synthetic_layout(data, **update)
    escaped = field.replace("(", r"\(").replace(")", r"\)")
    with pytest.raises(WorkloadError, match=escaped):
        gpu_system(w)
    ok = synthetic_layout(data, tp_size=2)
    with pytest.raises(WorkloadError, match=f"row 2: field {escaped}"):
        predictor.predict([ok, w], source="layouts.csv")


def _model_fields(w) -> dict:
    """The model's fields of a workload, without those a plan chooses."""
    chosen = (
        "batch_size",
        "dataset_size",
        "world_size",
        "num_nodes",
        "dp_size",
        "tp_size",
        "pp_size",
        "micro_batches",
        "pipeline_schedule",
        "sharding",
        "workload_id",
    )
    return {k: v for k, v in w.to_record().items() if k not in chosen}


def test_the_planner_searches_gpu_layouts_without_sharding(bundle):
    data, _, predictor = bundle
    w = synthetic_layout(data)
    model = _model_fields(w)
    space = LayoutSpace(tp_sizes=(1, 2), pp_sizes=(1, 2), micro_batches=(1, 2))
    result = plan(predictor, model, dataset_size=512, epochs=1.0, world_sizes=[1, 2, 4],
                  batch_sizes=[2, 4], price_per_device_hour=2.0, coverage=None,
                  layouts=space)  # fmt: skip
    table = result.table
    assert len(table) and (table["sharding"] == "none").all()
    assert set(table["layout_recipe"]) == {"megatron:h100_dgx"}
    assert {2} <= set(table["tp_size"]) and {2} <= set(table["pp_size"])
    assert any("candidate(s) left out (" in n and "by sharding" in n for n in result.notes)


def test_scaledl_predict_composes_a_gpu_layout(bundle):
    data, _, predictor = bundle
    w = synthetic_layout(data, tp_size=2)
    fields = {"config_path": w.config_path, "seq_len": w.seq_len, "batch_size": 4,
              "mode": "train", "backend": "nccl", "device_name": w.device_name,
              "world_size": 2}  # fmt: skip

    def invoke(**layout):
        sets = [x for k, v in {**fields, **layout}.items() for x in ("--set", f"{k}={v}")]
        return CliRunner().invoke(
            app, ["predict", "--predictor", str(predictor.path), "--family", "hf", *sets]
        )

    result = invoke(tp_size=2, dp_size=1)
    assert result.exit_code == 0, result.output
    assert "layout recipe: megatron:h100_dgx for 1 row(s)" in result.output
    result = invoke(dp_size=2, sharding="zero1")
    assert result.exit_code == 2 and "field 'sharding' (value 'zero1')" in result.output


def test_per_node_detail_refuses_what_the_recipe_composes(bundle):
    data, _, predictor = bundle
    one = synthetic_layout(data, world_size=1)
    result, nodes = predictor.predict([one], detail=True)
    assert len(nodes) and result["recipe"].iat[0] == "predictor"
    dp2 = synthetic_layout(data, dp_size=2, batch_size=2)
    composed = "row 1: layout 'dp2': on a GPU predictor data parallelism of several GPUs"
    with pytest.raises(WorkloadError, match=composed):
        predictor.predict([dp2], detail=True)


def test_a_data_parallel_gpu_plan_composes_every_world_size_alike(bundle):
    data, _, predictor = bundle
    w = synthetic_layout(data)
    model = _model_fields(w)
    args = dict(dataset_size=512, epochs=1.0, world_sizes=[1, 2], batch_sizes=[2],
                price_per_device_hour=2.0, coverage=None)  # fmt: skip
    plain = plan(predictor, model, **args).table.set_index("world_size")["time_to_train_h"]
    layouts = plan(predictor, model, layouts=LayoutSpace(tp_sizes=(1,), pp_sizes=(1,),
                   micro_batches=(1,), shardings=("none",)), **args).table  # fmt: skip
    # one GPU carries the optimizer step in both plans: the same times as the layout search
    np.testing.assert_allclose(
        plain.sort_index(), layouts.set_index("world_size")["time_to_train_h"].sort_index()
    )
    result = plan(predictor, model, **args)
    assert any(n.startswith("layout recipe: megatron:h100_dgx for 2 candidate(s)")
               for n in result.notes)  # fmt: skip


def test_a_gpu_plan_with_a_world_size_the_recipe_refuses_composes_none(bundle):
    data, _, predictor = bundle
    w = synthetic_layout(data)
    model = _model_fields(w)
    args = dict(dataset_size=512, epochs=1.0, batch_sizes=[2], price_per_device_hour=2.0,
                coverage=None)  # fmt: skip
    # 16 GPUs exceed one 8-GPU node: no candidate is composed, one GPU is the predictor's own
    mixed = plan(predictor, model, world_sizes=[1, 16], **args)
    assert not any(n.startswith("layout recipe:") for n in mixed.notes)
    single = mixed.table.set_index("world_size").loc[1, "time_to_train_h"]
    own = plan(predictor, model, world_sizes=[1], **args)
    assert any(n.startswith("layout recipe:") for n in own.notes)
    assert single < own.table.set_index("world_size").loc[1, "time_to_train_h"]  # no step


def test_inference_replicas_have_no_gradient_all_reduce_to_flag(bundle):
    data, _, _ = bundle
    train = synthetic_layout(data, world_size=3, dp_size=3, batch_size=2)
    infer = train.model_copy(update={"mode": "infer"})
    cm = system_collectives(str(vidur_network_root()), "h100_dgx")
    groups = gpu_layouts._measured_groups(cm)
    assert [r.field for r in gpu_layouts.megatron_reasons(train, "megatron:h100_dgx", groups)] \
        == ["dp_size"]  # fmt: skip
    assert gpu_layouts.megatron_reasons(infer, "megatron:h100_dgx", groups) == []
    l4 = {"device_name": "cuda:NVIDIA L4"}
    assert gpu_layouts.uncomposed_reason(train.model_copy(update=l4))
    assert gpu_layouts.uncomposed_reason(infer.model_copy(update=l4)) == []
