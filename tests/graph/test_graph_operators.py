import numpy as np
import pytest
from tiny_specs import SPECS, gpt2_config, tiny_spec

from scaledl.graph.layer_graph import build_layer_graph
from scaledl.graph.operators import BATCH_SCALED, at_batch, aten_descriptors, matmul_descriptor
from scaledl.workloads.spec import Workload


def _bert(batch: int, mode: str = "train") -> Workload:
    return Workload.parse({**SPECS["bert"], "batch_size": batch, "mode": mode})


def test_tracer_records_each_layer_calls_aten_operators():
    graph = build_layer_graph(_bert(2))
    ops = graph.operators
    assert set(ops["layer_index"]) <= set(graph.layers["layer_index"])
    assert {"addmm", "bmm", "native_layer_norm", "_softmax"} <= set(ops["op"])
    addmm = ops[ops["op"] == "addmm"].iloc[0]
    assert addmm["input_shapes"][1] == (2 * 16, 32) and addmm["input_itemsizes"][0] == 4


def test_descriptors_of_a_bert_layer():
    desc = aten_descriptors(build_layer_graph(_bert(2)).operators)
    assert set(desc["op_class"]) == {"matmul", "elementwise", "reduction", "embedding"}
    linear = desc[desc["op_kind"] == "linear"]
    assert set(linear["m"]) == {32.0}  # batch x sequence rows, flattened
    assert {(32.0, 32.0), (64.0, 32.0), (32.0, 64.0)} <= set(
        zip(linear["n"], linear["k"], strict=True)
    )
    batched = desc[desc["op_kind"] == "batched"]
    assert set(batched["batch"]) == {4.0}  # batch x heads
    infer = aten_descriptors(build_layer_graph(_bert(2, "infer")).operators)
    assert len(infer) == len(desc)  # the bert family is built without dropout


def test_training_dropout_is_one_fused_operator(tmp_path):
    # GPT-2's config keeps its dropout: on the meta device it decomposes into
    # bernoulli_ + div_ + mul; CUDA runs one native_dropout kernel, and so do the descriptors.
    spec = tiny_spec("hf", gpt2_config(tmp_path))
    train = build_layer_graph(Workload.parse({**spec, "mode": "train"}))
    assert (train.operators["op"] == "bernoulli_").sum() > 0
    desc = aten_descriptors(train.operators)
    assert (desc["op_kind"] == "dropout").sum() == (train.operators["op"] == "bernoulli_").sum()
    infer = aten_descriptors(build_layer_graph(Workload.parse({**spec, "mode": "infer"})).operators)
    assert (infer["op_kind"] == "dropout").sum() == 0
    assert len(desc) - len(infer) == (desc["op_kind"] == "dropout").sum()


def test_descriptors_are_affine_in_the_batch_size():
    d2, d3, d5 = (aten_descriptors(build_layer_graph(_bert(b)).operators) for b in (2, 3, 5))
    extended = at_batch(d2, d3, np.array([5, 2]))
    first = extended[extended["copy"] == 0].reset_index(drop=True)
    for col in BATCH_SCALED:
        np.testing.assert_allclose(first[col], d5[col], err_msg=col)
    with pytest.raises(ValueError, match="not batch-affine"):
        at_batch(d2, d3.iloc[:-1], np.array([4]))


def test_matmul_descriptor_broadcasts_batch_dimensions():
    d = matmul_descriptor((2, 4, 8, 16), (2, 4, 16, 32), 2)
    assert (d["batch"], d["m"], d["n"], d["k"]) == (8, 8, 32, 16)
    assert d["bytes_out"] == 2 * 8 * 8 * 32 and d["op_kind"] == "batched"
