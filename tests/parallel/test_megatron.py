"""Megatron-LM's layouts composed from the GPU predictor: tiny synthetic models, real Vidur data."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from gpu_synthetic import fitted_synthetic, synthetic_layout
from tiny_specs import tiny

from scaledl.devices.specs import device_spec
from scaledl.external.vidur import load_vidur_allreduce
from scaledl.graph.features import architecture_graphs, build_graph_set
from scaledl.models.kernel_columns import kernel_columns
from scaledl.parallel.measured_collectives import MeasuredCollectives, fit_system_allreduce
from scaledl.parallel.megatron import (
    OPTIMIZER_BYTES_PER_PARAM,
    divided_unit_layers,
    megatron_inputs,
    megatron_rank_parameters,
    predict_layout_row,
    predict_rank_layers,
    rank_layers,
    shard_megatron,
    shard_operators,
    sharded_kernel_ms,
    tied_word_embeddings,
)
from scaledl.parallel.shard import base_workload, rank_parameters

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

REPO = Path(__file__).resolve().parents[2]
GPU = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    return fitted_synthetic(tmp_path_factory.mktemp("gpu_layouts"))


@pytest.fixture(scope="module")
def collectives():
    vidur = load_vidur_allreduce(REPO / "external" / "vidur" / "network")
    return MeasuredCollectives(fit_system_allreduce(vidur, "h100_dgx"), "h100_dgx")


def test_a_one_rank_layout_is_the_single_gpu_prediction(fitted, collectives):
    data, method = fitted
    w = synthetic_layout(data, world_size=1)
    layers = rank_layers(method, w)
    single = method.predict_iteration_ms([base_workload(w, w.batch_size)])[0]
    assert (layers["forward_ms"] + layers["backward_ms"]).sum() == pytest.approx(single)
    row = predict_layout_row(method, w, collectives)
    assert row["compute_ms"] == pytest.approx(single)
    assert row["tp_allreduce_ms"] == row["p2p_ms"] == row["exposed_sync_ms"] == 0.0
    # the optimizer step: 32 bytes per parameter at the device's peak memory bandwidth
    params = layers["params"].sum()
    bandwidth_bytes_per_ms = device_spec(w.device_name).mem_bandwidth_gbps * 1e6
    adam = OPTIMIZER_BYTES_PER_PARAM * params / bandwidth_bytes_per_ms
    assert row["step_ms"] == pytest.approx(adam)
    assert row["scaledl_ms"] == pytest.approx(single + adam)


def test_tensor_parallel_splits_the_units_and_adds_two_all_reduces_per_block(fitted, collectives):
    data, method = fitted
    w = synthetic_layout(data, tp_size=2)
    layers = rank_layers(method, w)
    _, parts = megatron_inputs(layers, w, collectives)
    activation = w.batch_size * w.seq_len * w.hidden_size * 4
    # 2 blocks x (attention + feed-forward) + the vocabulary-parallel embedding, fwd and bwd
    per = float(collectives.predict_ms("all_reduce", activation, 2))
    assert parts["tp_allreduce_ms"] == pytest.approx(2 * 5 * per)
    full = rank_layers(method, w.model_copy(update={"tp_size": 1, "world_size": 1}))
    assert parts["compute_ms"] < (full["forward_ms"] + full["backward_ms"]).sum()
    assert layers["params"].sum() < full["params"].sum()


def test_shard_megatron_splits_the_head_and_the_word_embedding_parameters():
    # word embedding, position embedding (replicated by Megatron), one block, the output layer
    layers = pd.DataFrame(
        {"layer_type": ["embedding", "embedding", "attention", "feed-forward", "norm", "head"],
         "params": [8.0, 2.0, 4.0, 4.0, 2.0, 0.0], "fwd_flops": [0.0, 0.0, 8.0, 8.0, 1.0, 8.0],
         "kernel_fwd_ms": [1.0, 1.0, 2.0, 2.0, 1.0, 2.0]}
    )  # fmt: skip
    out = shard_megatron(layers, 2)
    assert out["params"].tolist() == [4.0, 2.0, 2.0, 2.0, 2.0, 0.0]
    assert out["kernel_fwd_ms"].tolist() == [1.0] * 6  # the lookups are not split
    assert shard_megatron(layers, 1).equals(layers)


def test_pipeline_runs_the_stages_in_turn_with_sends(fitted, collectives):
    data, method = fitted
    w = synthetic_layout(data, pp_size=2, micro_batches=1)
    row = predict_layout_row(method, w, collectives)
    single = method.predict_iteration_ms([base_workload(w, w.batch_size)])[0]
    activation = w.batch_size * w.seq_len * w.hidden_size * 4
    assert row["compute_ms"] == pytest.approx(single)
    assert row["p2p_ms"] == pytest.approx(2 * collectives.predict_ms("all_reduce", activation, 2))
    # the synthetic GPT-2 has no LM head: no tied output layer, no copy to sync
    assert not tied_word_embeddings(w) and row["embedding_sync_ms"] == 0
    assert row["scaledl_ms"] == pytest.approx(
        row["compute_ms"] + row["p2p_ms"] + row["step_ms"], rel=1e-9
    )


def test_data_parallel_overlaps_the_gradient_buckets_with_the_backward(fitted, collectives):
    data, method = fitted
    w = synthetic_layout(data, dp_size=2, batch_size=2)
    row = predict_layout_row(method, w, collectives)
    assert row["exposed_sync_ms"] >= 0 and row["tp_allreduce_ms"] == 0
    assert row["scaledl_ms"] == pytest.approx(
        row["compute_ms"] + row["exposed_sync_ms"] + row["step_ms"]
    )


def test_shard_operators_splits_each_shape_as_one_rank_runs_it():
    # an attention unit: norm, column-parallel QKV, batched matmul, softmax, row-parallel
    # output projection, dropout; then a head's vocabulary-parallel linear and its softmax
    ops = pd.DataFrame({
        "layer_index": [0, 0, 0, 0, 0, 0, 1, 1],
        "op_class": ["reduction", "matmul", "matmul", "reduction", "matmul", "elementwise",
                     "matmul", "reduction"],
        "op_kind": ["layer_norm", "linear", "batched", "softmax", "linear", "dropout",
                    "linear", "softmax"],
        "batch": [1.0, 1.0, 8.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        "m": [0.0, 16.0, 4.0, 0.0, 16.0, 0.0, 16.0, 0.0],
        "n": [0.0, 24.0, 4.0, 0.0, 8.0, 0.0, 100.0, 0.0],
        "k": [0.0, 8.0, 2.0, 0.0, 8.0, 0.0, 8.0, 0.0],
        "elements": [128.0, 384.0, 128.0, 128.0, 128.0, 128.0, 1600.0, 1600.0],
        "bytes_in": [512.0, (128 + 192 + 24) * 4.0, 256.0, 512.0, (128 + 64 + 8) * 4.0, 512.0,
                     (128 + 800 + 100) * 4.0, 6400.0],
        "bytes_out": [512.0, 1536.0, 512.0, 512.0, 512.0, 512.0, 6400.0, 6400.0],
    })  # fmt: skip
    types = pd.DataFrame({"layer_type": ["attention", "head"], "block": ["h.0", ""]})
    out = shard_operators(ops, types, 2)
    assert out.iloc[0].equals(ops.iloc[0].astype(out.iloc[0].dtype))  # the norm: full hidden
    qkv, bmm, soft, proj, drop, head, head_soft = (out.iloc[i] for i in range(1, 8))
    assert (qkv["n"], qkv["elements"], qkv["bytes_out"]) == (12.0, 192.0, 768.0)
    assert qkv["bytes_in"] == (128 + 96 + 12) * 4.0  # input full, weight and bias halved
    assert (bmm["batch"], bmm["bytes_in"]) == (4.0, 128.0) and soft["elements"] == 64.0
    assert (proj["k"], proj["n"], proj["bytes_out"]) == (4.0, 8.0, 512.0)
    assert proj["bytes_in"] == (64 + 32 + 8) * 4.0  # input and weight halved, bias kept
    assert drop["elements"] == 128.0  # after the row-parallel linear: full hidden
    assert (head["n"], head_soft["elements"]) == (50.0, 800.0)
    assert shard_operators(ops, types, 1).equals(ops.astype(out.dtypes.to_dict()))


def test_split_kernels_equal_the_predictors_own_at_one_rank_and_grow_when_split(fitted):
    data, method = fitted
    w = synthetic_layout(data, tp_size=2)
    base = base_workload(w, w.batch_size)
    gs = build_graph_set([base])
    layer = (gs.nodes["node_kind"] == "layer").to_numpy()
    own = kernel_columns(gs, method.operator_model_)[layer].reset_index(drop=True)
    one = sharded_kernel_ms(method, base, 1).reset_index(drop=True)
    np.testing.assert_allclose(one.to_numpy(), own.to_numpy(), rtol=1e-9)
    two = sharded_kernel_ms(method, base, 2).reset_index(drop=True)
    split = gs.nodes.loc[layer, "layer_type"].isin(["attention", "feed-forward"]).to_numpy()
    # each rank's kernels: less than the whole unit's, at least the unit's split by t
    assert (two.loc[split, "kernel_fwd_ms"] < one.loc[split, "kernel_fwd_ms"]).all()
    assert (two.loc[split, "kernel_fwd_ms"] >= one.loc[split, "kernel_fwd_ms"] / 2 - 1e-9).all()
    np.testing.assert_allclose(two.loc[~split].to_numpy(), one.loc[~split].to_numpy())
    # the units' kernels on the rank's shapes cost at least the unit's divided by t
    base, divided = divided_unit_layers(method, w)
    ops_split = rank_layers(method, w)
    assert ops_split["forward_ms"].sum() >= (
        predict_rank_layers(method, base, divided)["forward_ms"].sum() - 1e-9
    )


def test_megatron_rank_parameters_split_the_word_embedding_and_copy_it(fitted):
    data, _ = fitted
    w = synthetic_layout(data)
    layers = architecture_graphs(w)[0].layers
    assert megatron_rank_parameters(layers, 1, 1) == rank_parameters(layers, 1, 1)
    (tp2,), _ = megatron_rank_parameters(layers, 2, 1)
    (torch_tp2,), _ = rank_parameters(layers, 2, 1)
    tables = layers.loc[layers["layer_type"] == "embedding", "params"]
    assert len(tables) == 2  # GPT-2's word and position embeddings
    word = tables.max()
    assert tp2 == pytest.approx(torch_tp2 - word / 2)  # only the word table is split
    stages, _ = megatron_rank_parameters(layers, 1, 2)
    torch_stages, _ = rank_parameters(layers, 1, 2)
    assert stages[0] == torch_stages[0] and stages[1] == pytest.approx(torch_stages[1] + word)
    # an untied output layer (Llama) is the last stage's own: no copy of the word table
    assert megatron_rank_parameters(layers, 1, 2, tied=False)[0] == torch_stages


def test_tied_word_embeddings_read_off_the_model():
    assert tied_word_embeddings(tiny("bert", num_layers=2))
    assert not tied_word_embeddings(tiny("llama", num_layers=2))


def test_a_feed_forward_in_two_units_is_split_column_then_row_with_one_all_reduce(collectives):
    # BERT's feed-forward: intermediate (linear, GELU) and output (linear, dropout) units
    ops = pd.DataFrame({
        "layer_index": [0, 0, 1, 1],
        "op_class": ["matmul", "elementwise", "matmul", "elementwise"],
        "op_kind": ["linear", "gelu", "linear", "dropout"],
        "batch": [1.0] * 4, "m": [16.0, 0.0, 16.0, 0.0], "n": [32.0, 0.0, 8.0, 0.0],
        "k": [8.0, 0.0, 32.0, 0.0], "elements": [512.0, 512.0, 128.0, 128.0],
        "bytes_in": [(128 + 256 + 32) * 4.0, 2048.0, (512 + 256 + 8) * 4.0, 512.0],
        "bytes_out": [2048.0, 2048.0, 512.0, 512.0],
    })  # fmt: skip
    units = pd.DataFrame({"layer_type": ["feed-forward"] * 2, "block": ["layer.0"] * 2})
    out = shard_operators(ops, units, 2)
    inter, gelu, output, drop = (out.iloc[i] for i in range(4))
    assert (inter["n"], inter["k"], inter["bytes_out"]) == (16.0, 8.0, 1024.0)  # column
    assert gelu["elements"] == 256.0  # on the rank's columns
    assert (output["k"], output["n"], output["bytes_out"]) == (16.0, 8.0, 512.0)  # row
    assert drop["elements"] == 128.0  # after the row-parallel linear: full hidden
    # one all-reduce per feed-forward (after the output unit), one per attention: two per block
    layers = pd.DataFrame({
        "layer_type": ["embedding", "attention", "feed-forward", "feed-forward", "attention",
                       "feed-forward", "feed-forward", "head"],
        "block": [-1, 0, 0, 0, 1, 1, 1, -1], "params": [1.0] * 8,
        "forward_ms": [1.0] * 8, "backward_ms": [1.0] * 8,
    })  # fmt: skip
    w = tiny(family="bert", device_name=f"cuda:{GPU}", world_size=2, tp_size=2)
    _, parts = megatron_inputs(layers, w, collectives)
    activation = w.batch_size * w.seq_len * w.hidden_size * 4
    per = float(collectives.predict_ms("blocking_all_reduce", activation, 2))
    assert parts["tp_allreduce_ms"] == pytest.approx(2 * 5 * per)  # fwd and bwd, 2 x 2 + 1
