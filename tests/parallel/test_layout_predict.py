import numpy as np
import pytest
from flops_method import Method
from tiny_specs import tiny

from scaledl.graph.features import build_graph_set
from scaledl.models.node_times import node_predictions
from scaledl.parallel.collectives import COLLECTIVES, CollectiveModel
from scaledl.parallel.overlap import Overlap
from scaledl.parallel.predict import LayoutComposer, layout_reasons, predict_layouts
from scaledl.profiles.tables import FSDP_API


def ddp_sum(w):
    gs = build_graph_set([w])
    p = node_predictions(Method.layerwise_, None, gs.nodes)
    return float(p["total_ms"].sum())


def test_single_rank_is_the_sum_of_the_layers():
    w = tiny("bert", num_layers=2, batch_size=4)
    got = predict_layouts(Method(), [w]).iteration_ms[0]
    assert got == pytest.approx(ddp_sum(w))


def test_tensor_parallel_halves_the_block_work():
    ddp = tiny("bert", num_layers=2, batch_size=4)
    tp = tiny("bert", num_layers=2, batch_size=4, tp_size=2, world_size=2)
    a, b = predict_layouts(Method(), [ddp, tp]).iteration_ms
    assert b < a


def test_tensor_parallel_api_cost_adds_per_linear_beyond_the_blocking_all_reduce():
    tp = tiny("bert", num_layers=2, batch_size=4, tp_size=2, world_size=2)
    free = CollectiveModel.from_allreduce(None)
    api = {"tp_colwise_forward": (0.25, 0.0), "tp_rowwise_forward": (1.5, 0.0),
           "tp_colwise_backward": (2.0, 0.0), "tp_rowwise_backward": (1.0, 0.0)}  # fmt: skip
    params = {**free.params, "blocking_all_reduce": (0.5, 0.0), **api}
    costly = CollectiveModel(params, free.source)
    base = CollectiveModel(dict(params, **dict.fromkeys(api, (0.0, 0.0))), free.source)
    a = LayoutComposer(Method(), [tp], base).inputs[0]
    b = LayoutComposer(Method(), [tp], costly).inputs[0]
    # BERT per block: attention 3 column-wise + 1 row-wise, intermediate 1 column-wise, output
    # 1 row-wise; each row-wise one less the blocking all-reduce the composition adds itself:
    # forward 4 * 0.25 + 2 * (1.5 - 0.5), backward 4 * 2.0 + 2 * (1.0 - 0.5), two blocks
    assert (b.forward_ms - a.forward_ms).sum() == pytest.approx(2 * (1.0 + 2.0))
    assert (b.backward_ms - a.backward_ms).sum() == pytest.approx(2 * (8.0 + 1.0))
    # ... an all-reduce after the attention and after the output unit only (2 per block),
    # none after the other layers (0 bytes: no collective, not its latency)
    assert (a.tp_allreduce_ms > 0).sum() == 2 * 2
    assert a.tp_allreduce_ms.sum() == pytest.approx(2 * 2 * 0.5)
    # a unit whose probed cost is below the all-reduce it holds adds nothing
    cheap = CollectiveModel(dict(params, tp_colwise_forward=(0.0, 0.0),
                                 tp_rowwise_forward=(0.2, 0.0)), free.source)  # fmt: skip
    assert (LayoutComposer(Method(), [tp], cheap).inputs[0].forward_ms == a.forward_ms).all()


def test_pipeline_of_one_micro_batch_runs_the_stages_one_after_the_other():
    ddp = tiny("bert", num_layers=2, batch_size=4)
    pp = tiny("bert", num_layers=2, batch_size=4, pp_size=2, world_size=2)
    got = predict_layouts(Method(), [ddp, pp, pp.model_copy(update={"micro_batches": 2})])
    assert got.pipeline_ms[1] == pytest.approx(got.pipeline_ms[0])
    assert 0 < got.bubble_fraction[2] < got.bubble_fraction[1]


def test_candidates_of_one_structure_match_one_by_one():
    ws = [tiny("bert", num_layers=2, batch_size=b, world_size=2 * d, dp_size=d, tp_size=2)
          for b in (2, 4) for d in (1, 2)]  # fmt: skip
    together = predict_layouts(Method(), ws).iteration_ms
    alone = [predict_layouts(Method(), [w]).iteration_ms[0] for w in ws]
    np.testing.assert_allclose(together, alone)


def test_a_composer_replays_any_overlap_as_a_fresh_prediction():
    ws = [tiny("bert", num_layers=2, batch_size=4, world_size=2, dp_size=2, sharding=s)
          for s in ("none", "fsdp")]  # fmt: skip
    ws.append(tiny("bert", num_layers=2, batch_size=4, world_size=2, pp_size=2, micro_batches=2))
    cm = CollectiveModel(dict.fromkeys(COLLECTIVES, (0.5, 1e-6)),
                         {c: "none" if c in FSDP_API else "t" for c in COLLECTIVES})  # fmt: skip
    composer = LayoutComposer(Method(), ws, cm)
    lanes = {"all_reduce": 1.0, "all_gather": 0.0, "reduce_scatter": 1.0, "send": 1.0}
    gathers_serial = Overlap(lanes, dict.fromkeys(lanes, "t"))
    full, serial = composer.predict(), composer.predict(gathers_serial)
    np.testing.assert_allclose(full.iteration_ms, predict_layouts(Method(), ws, cm).iteration_ms)
    fresh = predict_layouts(Method(), ws, cm, overlap=gathers_serial).iteration_ms
    np.testing.assert_allclose(serial.iteration_ms, fresh)
    # only the FSDP workload gathers: the others are unchanged, it is slower
    assert serial.iteration_ms[1] > full.iteration_ms[1]
    np.testing.assert_allclose(serial.iteration_ms[[0, 2]], full.iteration_ms[[0, 2]])
    np.testing.assert_allclose(composer.predict().iteration_ms, full.iteration_ms)


def test_layouts_are_flagged():
    ddp = tiny("bert", num_layers=2)
    fsdp = tiny("bert", num_layers=2, world_size=2, sharding="fsdp")
    reasons = layout_reasons([ddp, fsdp])
    assert reasons[0] == []
    assert reasons[1][0].field == "layout" and reasons[1][0].value == "dp2-fsdp"
    assert "no layout profile corrects it" in reasons[1][0].reason
    calibrated = layout_reasons([ddp, fsdp, fsdp], "calibrated:x@v", [False, False, True])
    assert calibrated[0] == [] and "calibrated:x@v recipe" in calibrated[1][0].reason
    assert "in-sample" not in calibrated[1][0].reason
    assert "in-sample: this workload was profiled" in calibrated[2][0].reason
    # 1F1B of fewer micro-batches than stages: replayed, flagged (PyTorch's schedule refuses it)
    short = tiny("bert", num_layers=2, world_size=2, pp_size=2, micro_batches=1,
                 pipeline_schedule="1f1b")  # fmt: skip
    gpipe = short.model_copy(update={"pipeline_schedule": "gpipe"})
    flagged, plain = layout_reasons([short, gpipe])
    assert [r.field for r in flagged] == ["layout", "micro_batches"]
    assert "Schedule1F1B refuses it" in flagged[1].reason and len(plain) == 1


@pytest.mark.slow
def test_predictor_answers_layout_workloads_flagged(registry_root):
    from tiny_specs import tiny_spec

    from scaledl.prediction.predictor import load_predictor
    from scaledl.workloads.fields import WorkloadError

    predictor = load_predictor(registry_root / "scaledl")
    ddp = tiny_spec("bert", num_layers=2, world_size=2)
    rows = [ddp, {**ddp, "tp_size": 2}, {**ddp, "sharding": "fsdp"},
            {**ddp, "pp_size": 2, "micro_batches": 2}]  # fmt: skip
    out = predictor.predict(rows)
    assert (out["iteration_s"] > 0).all()
    assert out["world_size"].tolist() == [2, 2, 2, 2]
    layout = out.iloc[1:]
    assert layout["extrapolation"].str.contains("layout=").all()
    assert not layout["in_domain"].any()
    assert "layout=" not in out["extrapolation"].iloc[0]
    with pytest.raises(WorkloadError, match="row 2: layout 'tp2'"):
        predictor.predict(rows, detail=True)
