import numpy as np
import pandas as pd
import pytest

from scaledl.parallel.shard import (
    block_ordinal,
    rank_parameters,
    shard_tensor_parallel,
    stage_of_layers,
    tensor_parallel_collective_bytes,
    tensor_parallel_linears,
)


def layers():
    return pd.DataFrame(
        {
            "layer_name": ["emb", "b0.att", "b0.ff1", "b0.ff2", "b1.att", "b1.ff1", "b1.ff2",
                           "norm", "head", "emb#1"],
            "layer_type": ["embedding", "attention", "feed-forward", "feed-forward",
                           "attention", "feed-forward", "feed-forward", "norm", "head",
                           "embedding"],
            "block": ["", "b0", "b0", "b0", "b1", "b1", "b1", "", "", ""],
            "params": [100, 40, 20, 20, 40, 20, 20, 4, 50, 100],
            "fwd_flops": [1.0, 8.0, 4.0, 4.0, 8.0, 4.0, 4.0, 1.0, 2.0, 1.0],
            "bwd_flops": [2.0, 16.0, 8.0, 8.0, 16.0, 8.0, 8.0, 2.0, 4.0, 2.0],
            "output_bytes": [64] * 10,
        }
    )  # fmt: skip


def test_stages_follow_blocks():
    block = block_ordinal(layers()["block"])
    assert block.tolist() == [-1, 0, 0, 0, 1, 1, 1, -1, -1, -1]
    assert stage_of_layers(block, 2).tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    assert stage_of_layers(block, 1).tolist() == [0] * 10
    with pytest.raises(ValueError, match="pp_size=3 must divide the 2 blocks"):
        stage_of_layers(block, 3)


def test_tensor_parallel_split_of_attention_and_feed_forward():
    out = shard_tensor_parallel(layers(), 2)
    assert out["fwd_flops"].tolist() == [1.0, 4.0, 2.0, 2.0, 4.0, 2.0, 2.0, 1.0, 2.0, 1.0]
    assert out["params"].tolist()[:4] == [100, 20, 10, 10]
    assert out["output_bytes"].tolist() == [64] * 10  # full activation after the all-reduce


def test_one_all_reduce_after_attention_and_after_the_feed_forward():
    frame = layers()
    got = tensor_parallel_collective_bytes(frame, block_ordinal(frame["block"]))
    assert np.flatnonzero(got).tolist() == [1, 3, 4, 6]


def test_rank_parameters_by_hand():
    # stage 0: emb 100 + block 0 (40 + 20 + 20) / 2 = 140; stage 1: block 1 40 + norm 4 +
    # head 50 = 94; the repeated emb#1 holds nothing; largest unit: root 100 + 4 + 50.
    stages, largest = rank_parameters(layers(), tp_size=2, pp_size=2)
    assert stages == [140.0, 94.0]
    assert largest == 154.0


def test_parallelised_linears_per_unit():
    # after the split (params / 2): attention 3 column-wise projections and 1 row-wise; a
    # feed-forward unit one hidden x intermediate matrix per linear (h = 2, intermediate = 10:
    # 20 / 20 = 1 each), the block's last one row-wise (the unit the all-reduce follows)
    sharded = shard_tensor_parallel(layers(), 2)
    block = block_ordinal(sharded["block"])
    col, row = tensor_parallel_linears(sharded, block, hidden_size=2, intermediate_size=10,
                                       tp_size=2)  # fmt: skip
    assert col.tolist() == [0, 3, 1, 0, 3, 1, 0, 0, 0, 0]
    assert row.tolist() == [0, 1, 0, 1, 1, 0, 1, 0, 0, 0]
    # a gated MLP in one unit (60 / 20 = 3 linears: gate and up column-wise, down row-wise)
    gated = sharded.iloc[[0, 1, 2, 4, 5, 7, 8, 9]].assign(params=[100, 20, 30, 20, 30, 4, 50, 100])
    col, row = tensor_parallel_linears(gated, block_ordinal(gated["block"]), 2, 10, tp_size=2)
    assert col.tolist() == [0, 3, 2, 3, 2, 0, 0, 0]
    assert row.tolist() == [0, 1, 1, 1, 1, 0, 0, 0]
    col, row = tensor_parallel_linears(layers(), block, 2, 10, tp_size=1)
    assert not col.any() and not row.any()
