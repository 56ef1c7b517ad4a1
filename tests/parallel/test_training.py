import numpy as np
import pandas as pd
import pytest
from tiny_specs import tiny

from scaledl.graph.features import architecture_graphs, build_graph_set
from scaledl.parallel.optimizer_tensors import stepped_tensors
from scaledl.parallel.shard import base_workload, rank_parameters
from scaledl.parallel.training import (
    collectives_inside,
    fold_samples,
    layout_kind,
    layout_layer_samples,
)

TP = tiny("bert", world_size=2, tp_size=2)
PP = tiny("bert", num_layers=2, batch_size=4, world_size=2, pp_size=2, micro_batches=2)
ZERO1 = tiny("bert", world_size=2, sharding="zero1")
WORKLOADS = {"tp": TP, "pp": PP, "z1": ZERO1}


def _layers(w):
    nodes = build_graph_set([base_workload(w, w.batch_size // w.micro_batches)]).nodes
    return nodes[nodes["node_kind"] == "layer"]


def _tables():
    """Two launches per workload; the second ran twice as slow (slowdown factor 2)."""
    layer_rows, iter_rows = [], []
    for wid, w in WORKLOADS.items():
        for repeat, factor in ((0, 1.0), (1, 2.0)):
            run = f"{wid}-r{repeat}"
            for rank in (0, 1):
                for i in _layers(w)["layer_index"]:
                    layer_rows.append({"run_id": run, "workload_id": wid, "rank": rank,
                                       "step": 0, "layer_index": i,
                                       "forward_ms": factor * (1.0 + i),
                                       "backward_ms": factor * 2.0})  # fmt: skip
                iter_rows.append({"run_id": run, "workload_id": wid, "rank": rank, "step": 0,
                                  "phase": "instrumented",
                                  "optimizer_ms": factor * (3.0 + rank)})  # fmt: skip
    pipeline = pd.DataFrame({"workload_id": "pp", "rank": [0, 1], "stage": [0, 1]})
    broadcast = pd.DataFrame({"run_id": "z1-r0", "rank": [0, 0], "step": [0, 0],
                              "collective": "broadcast", "collective_ms": 0.25})  # fmt: skip
    tables = {"layer_timings": pd.DataFrame(layer_rows),
              "iteration_timings": pd.DataFrame(iter_rows),
              "pipeline_timings": pipeline, "collective_timings": broadcast}  # fmt: skip
    factors = pd.Series({f"{wid}-r{r}": 1.0 + r for wid in WORKLOADS for r in (0, 1)})
    return tables, factors


def test_samples_are_local_shapes_with_drift_corrected_medians():
    tables, factors = _tables()
    samples = layout_layer_samples(tables, WORKLOADS, factors)
    layers = samples[samples["node_kind"] == "layer"]
    np.testing.assert_allclose(layers["forward_ms"], 1.0 + layers["layer_index"])
    np.testing.assert_allclose(layers["backward_ms"], 2.0)
    # tensor parallel: attention / feed-forward FLOPs and parameters halved, bytes kept
    full = _layers(base_workload(TP, TP.batch_size)).set_index("layer_index")
    tp = layers[layers["workload_id"] == "tp"].set_index("layer_index")
    split = tp["layer_type"].isin(["attention", "feed-forward"])
    np.testing.assert_allclose(tp.loc[split, "fwd_flops"], full.loc[split, "fwd_flops"] / 2)
    np.testing.assert_allclose(tp.loc[~split, "params"], full.loc[~split, "params"])
    np.testing.assert_allclose(tp["output_bytes"], full["output_bytes"])
    # pipeline: the graph of one micro-batch (batch 4 / 2 micro-batches)
    pp = layers[layers["workload_id"] == "pp"].set_index("layer_index")
    micro = _layers(base_workload(PP, 2)).set_index("layer_index")
    np.testing.assert_allclose(pp["output_bytes"], micro["output_bytes"])


def test_optimizer_samples_per_stage_without_the_zero1_broadcasts():
    tables, factors = _tables()
    opt = layout_layer_samples(tables, WORKLOADS, factors)
    opt = opt[opt["node_kind"] == "optimizer"].set_index("workload_id")
    per_stage, _ = rank_parameters(architecture_graphs(PP)[0].layers, 1, 2)
    pp = opt.loc["pp"]
    np.testing.assert_allclose(pp["forward_ms"], [3.0, 4.0])  # stage 0 = rank 0, stage 1
    np.testing.assert_allclose(pp["params"], np.rint(per_stage))
    # the operator count is the parameter tensors each stage steps
    np.testing.assert_allclose(pp["fwd_ops"], stepped_tensors(PP))
    assert opt.loc[["z1"], "fwd_ops"].iloc[0] == stepped_tensors(ZERO1)[0]
    # ZeRO-1: half the parameters per rank; launch r0's step 3 - 0.5 (its broadcasts) on
    # rank 0, 4 on rank 1, launch r1's 3 and 4: median over ranks and launches 3.5
    z1 = opt.loc[["z1"]]
    (z1_params,), _ = rank_parameters(architecture_graphs(ZERO1)[0].layers, 1, 1)
    assert z1["params"].iloc[0] == pytest.approx(np.rint(z1_params / 2))
    assert z1["forward_ms"].iloc[0] == pytest.approx(3.5)


def test_a_launch_without_a_factor_is_left_out():
    tables, factors = _tables()
    samples = layout_layer_samples(tables, WORKLOADS, factors.drop(["tp-r1"]))
    assert len(samples) == len(layout_layer_samples(tables, WORKLOADS, factors))
    with pytest.raises(ValueError, match="'tp'"):
        layout_layer_samples(tables, WORKLOADS, factors.drop(["tp-r0", "tp-r1"]))


def test_collectives_inside_the_layout_units():
    tp = _layers(TP)
    inside = collectives_inside(tp, TP)
    np.testing.assert_array_equal(inside, tp["layer_type"].isin(["attention", "feed-forward"]))
    fsdp = tiny("bert", world_size=2, sharding="fsdp")
    assert collectives_inside(_layers(fsdp), fsdp).all()
    assert not collectives_inside(_layers(PP), PP).any()


def _nodes(w):
    return build_graph_set([base_workload(w, w.batch_size // w.micro_batches)]).nodes


@pytest.mark.parametrize("sharding", ["none", "zero1"])
def test_the_data_parallel_backward_end_holds_the_gradient_wait(sharding):
    w = tiny("bert", world_size=2, sharding=sharding)
    nodes = _nodes(w)
    inside = collectives_inside(nodes, w)
    layers = (nodes["node_kind"] == "layer").to_numpy()
    first = nodes.index[layers][np.argmin(nodes.loc[layers, "layer_index"])]
    # the embedding (first layer: last backward) under DDP and ZeRO-1, and ZeRO-1's step
    assert inside[nodes.index.get_loc(first)]
    assert inside[layers].sum() == 1
    optimizer = (nodes["node_kind"] == "optimizer").to_numpy()
    assert inside[optimizer].all() == (sharding == "zero1")


def test_one_rank_and_inference_hold_no_gradient_wait():
    for w in (tiny("bert"), tiny("bert", world_size=2, mode="infer")):
        assert not collectives_inside(_nodes(w), w).any()


def test_fold_samples_never_hold_the_held_out_kind():
    samples = pd.DataFrame({"workload_id": ["a", "b", "c"], "forward_ms": [1.0, 2.0, 3.0]})
    kinds = {"a": "ddp", "b": "tp", "c": "pp"}
    got = fold_samples(samples, kinds, "tp", ["a", "c"])
    assert set(got["workload_id"]) == {"a", "c"}
    with pytest.raises(ValueError, match="'b' is held out"):
        fold_samples(samples, kinds, "tp", ["a", "b"])
    with pytest.raises(ValueError, match="no layer sample"):
        fold_samples(samples, kinds, "tp", [])


def test_layout_kinds():
    assert layout_kind(tiny("bert", world_size=2)) == "ddp"
    assert layout_kind(tiny("bert", world_size=2, sharding="zero1")) == "fsdp"
    assert layout_kind(tiny("bert", world_size=2, tp_size=2)) == "tp"
    assert layout_kind(tiny("bert", num_layers=2, world_size=2, pp_size=2)) == "pp"
