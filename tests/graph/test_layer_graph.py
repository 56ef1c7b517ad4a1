import time

import numpy as np
import pytest
from tiny_specs import SPECS, gpt2_config, tiny_spec

from scaledl.graph.layer_graph import (
    BUCKET_CAP_BYTES,
    EDGE_TYPES,
    FIRST_BUCKET_BYTES,
    NODE_COLUMNS,
    build_layer_graph,
    edge_index,
)
from scaledl.workloads.builders import build_model
from scaledl.workloads.spec import Workload


def spec_of(family: str, tmp_path) -> dict:
    if family != "hf":
        return SPECS[family]
    return tiny_spec("hf", gpt2_config(tmp_path, n_layer=2))


def parameter_count(workload: Workload) -> int:
    return sum(p.numel() for p in build_model(workload, device="meta").parameters())


@pytest.mark.parametrize("family", [*SPECS, "hf"])
def test_every_family_has_a_consistent_graph(family, tmp_path):
    w = Workload.parse(spec_of(family, tmp_path))
    g = build_layer_graph(w)
    nodes, layers = g.nodes, g.layers
    assert list(nodes.columns) == list(NODE_COLUMNS)
    assert list(nodes["node_index"]) == list(range(len(nodes)))
    assert len(layers) >= 5
    assert list(layers["layer_index"]) == list(range(len(layers)))
    assert layers["layer_name"].is_unique
    # Layer calls own every parameter exactly once (tied embeddings count once).
    assert int(layers["params"].sum()) == g.total_params == parameter_count(w)
    assert (layers["fwd_flops"] >= 0).all() and layers["fwd_flops"].sum() > 0
    assert (layers["output_bytes"] > 0).all()
    assert g.total_fwd_flops == pytest.approx(layers["fwd_flops"].sum())
    # Training, one rank: layers then the optimizer, no all-reduce.
    assert list(nodes["node_kind"]) == ["layer"] * len(layers) + ["optimizer"]
    opt = nodes.iloc[-1]
    assert opt["params"] == parameter_count(w) and opt["layer_index"] == -1
    # Edges: a sequential chain over the calls, every edge inside the graph, types known.
    edges = g.edges
    seq = edges[edges["edge_type"] == "sequential"]
    assert list(zip(seq["src"], seq["dst"], strict=True)) == [
        (i, i + 1) for i in range(len(layers) - 1)
    ]
    assert set(edges["edge_type"]) <= set(EDGE_TYPES)
    assert "residual" in set(edges["edge_type"])
    assert edges[["src", "dst"]].to_numpy().min() >= 0
    assert edges[["src", "dst"]].to_numpy().max() < len(nodes)
    update = edges[edges["edge_type"] == "update"]
    assert list(zip(update["src"], update["dst"], strict=True)) == [
        (len(layers) - 1, len(nodes) - 1)
    ]
    ei = edge_index(g)
    assert ei.shape == (2, len(edges)) and ei.dtype == np.int64


def test_bert_flops_match_a_hand_count():
    b, s, h, heads, inter = 2, 16, 64, 2, 128
    w = Workload.parse(
        {
            "family": "bert",
            "hidden_size": h,
            "num_layers": 1,
            "num_heads": heads,
            "intermediate_size": inter,
            "vocab_size": 100,
            "seq_len": s,
            "batch_size": b,
        }
    )
    layers = build_layer_graph(w).layers.set_index("layer_name")
    tokens, dh = b * s, h // heads
    projections = 4 * 2 * tokens * h * h  # Q, K, V, output projection
    scores = 2 * (2 * b * heads * s * s * dh)  # Q K^T and attention x V
    attention = layers.loc["bert.encoder.layer.0.attention"]
    assert attention["fwd_flops"] == projections + scores
    assert layers.loc["bert.encoder.layer.0.intermediate", "fwd_flops"] == 2 * tokens * h * inter
    assert layers.loc["bert.encoder.layer.0.output", "fwd_flops"] == 2 * tokens * inter * h
    # Parameters of the attention block: 4 (h x h + h) plus its LayerNorm (2h).
    assert attention["params"] == 4 * (h * h + h) + 2 * h
    assert attention["input_shape"] == attention["output_shape"] == f"{b}x{s}x{h}"
    assert attention["output_bytes"] >= b * s * h * 4
    # Backward = 2 x forward for layers with weights.
    with_params = layers[layers["params"] > 0]
    np.testing.assert_array_equal(with_params["bwd_flops"], 2 * with_params["fwd_flops"])


def test_flops_scale_linearly_with_batch():
    spec = SPECS["bert"]
    g1 = build_layer_graph(Workload.parse({**spec, "batch_size": 1})).layers
    g4 = build_layer_graph(Workload.parse({**spec, "batch_size": 4})).layers
    np.testing.assert_allclose(g4["fwd_flops"], 4 * g1["fwd_flops"])
    np.testing.assert_array_equal(g4["params"], g1["params"])


@pytest.mark.parametrize("family", ["bert", "t5", "vit"])
def test_inference_graph_has_no_backward_and_no_optimizer(family):
    w = Workload.parse({**SPECS[family], "mode": "infer", "world_size": 2})
    g = build_layer_graph(w)
    assert set(g.nodes["node_kind"]) == {"layer"}
    assert (g.nodes["bwd_flops"] == 0).all()
    assert g.nodes["fwd_flops"].sum() > 0
    assert not {"gradient", "update"} & set(g.edges["edge_type"])


def test_allreduce_buckets_hold_every_gradient_byte():
    # About 1.3M parameters (5 MB of fp32 gradients): a 1 MiB first bucket, then one more.
    w = Workload.parse(
        {
            **SPECS["bert"],
            "hidden_size": 256,
            "num_heads": 4,
            "intermediate_size": 512,
            "vocab_size": 1000,
            "world_size": 2,
        }
    )
    g = build_layer_graph(w)
    nodes, edges = g.nodes, g.edges
    buckets = nodes[nodes["node_kind"] == "allreduce"]
    params = parameter_count(w)
    assert len(buckets) >= 2
    assert int(buckets["allreduce_bytes"].sum()) == 4 * params
    assert buckets["allreduce_bytes"].iloc[0] >= FIRST_BUCKET_BYTES
    assert (buckets["allreduce_bytes"].iloc[:-1] <= BUCKET_CAP_BYTES + 4 * 1000 * 256).all()
    # Every layer with parameters sends gradients to a bucket; buckets feed the optimizer.
    grad = edges[edges["edge_type"] == "gradient"]
    assert set(grad["dst"]) == set(buckets["node_index"])
    layers_with_params = set(g.layers.loc[g.layers["params"] > 0, "node_index"])
    assert set(grad["src"]) == layers_with_params
    opt = int(nodes.loc[nodes["node_kind"] == "optimizer", "node_index"].iloc[0])
    update = edges[edges["edge_type"] == "update"]
    assert sorted(update["src"]) == sorted(buckets["node_index"])
    assert set(update["dst"]) == {opt}


def test_tiny_world_size_two_graph_has_one_bucket():
    w = Workload.parse({**SPECS["bert"], "world_size": 2})
    g = build_layer_graph(w)
    buckets = g.nodes[g.nodes["node_kind"] == "allreduce"]
    assert len(buckets) == 1
    assert int(buckets["allreduce_bytes"].iloc[0]) == 4 * parameter_count(w)


def test_t5_has_residual_and_cross_edges():
    w = Workload.parse({**SPECS["t5"], "decoder_num_layers": 2})
    g = build_layer_graph(w)
    layers, edges = g.layers, g.edges
    cross_calls = set(layers.loc[layers["layer_type"] == "cross-attention", "node_index"])
    assert len(cross_calls) == 2
    cross = edges[edges["edge_type"] == "cross"]
    assert set(cross["dst"]) == cross_calls
    # The source is the last encoder unit (the encoder output every decoder block reads).
    (src,) = set(cross["src"])
    encoder = layers[layers["layer_name"].str.startswith("encoder.")]
    assert src == encoder["node_index"].max()
    residual = edges[edges["edge_type"] == "residual"]
    assert len(residual) >= 4
    assert (residual["dst"] > residual["src"] + 1).all()


def test_shared_t5_embedding_is_owned_by_its_first_call():
    g = build_layer_graph(Workload.parse(SPECS["t5"]))
    emb = g.layers[g.layers["layer_type"] == "embedding"]
    assert len(emb) == 2  # encoder and decoder embed with one tied weight
    assert list(emb["params"] > 0) == [True, False]
    head = g.layers[g.layers["layer_type"] == "head"]
    assert int(head["params"].sum()) == 0  # lm_head is tied to the same weight


def test_bert_base_graph_build_time():
    w = Workload.parse(
        {
            "family": "bert",
            "hidden_size": 768,
            "num_layers": 12,
            "num_heads": 12,
            "intermediate_size": 3072,
            "seq_len": 128,
            "batch_size": 8,
        }
    )
    started = time.perf_counter()
    g = build_layer_graph(w)
    elapsed = time.perf_counter() - started
    print(f"BERT-base layer graph: {len(g.nodes)} nodes, {len(g.edges)} edges, {elapsed:.2f} s")
    assert g.total_params == parameter_count(w)
    assert len(g.layers) == 1 + 12 * 3 + 1
