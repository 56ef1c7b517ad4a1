import numpy as np
import pytest
from tiny_specs import tiny

from scaledl.parallel.optimizer_tensors import stage_tensors, stepped_tensors, zero1_largest_share
from scaledl.workloads.builders import build_model


def _tensors(w):
    return len(list(build_model(w, device="meta").parameters()))


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_one_rank_steps_every_parameter_tensor_once(family):
    w = tiny(family, world_size=2)
    np.testing.assert_allclose(stepped_tensors(w), [_tensors(w)])


def test_stages_split_the_tensors_and_zero1_partitions_them():
    pp = tiny("bert", num_layers=2, batch_size=4, world_size=2, pp_size=2, micro_batches=2)
    stages = stepped_tensors(pp)
    assert stages.shape == (2,) and (stages > 0).all()
    assert stages.sum() == _tensors(pp) + 1  # the tied decoder weight is on both stages
    zero1 = tiny("bert", world_size=2, sharding="zero1")
    assert _tensors(zero1) / 2 <= stepped_tensors(zero1)[0] < _tensors(zero1)
    # tensor parallelism and FSDP shard tensors, they do not remove any
    for w in (tiny("bert", world_size=2, tp_size=2), tiny("bert", world_size=2, sharding="fsdp")):
        np.testing.assert_allclose(stepped_tensors(w), [_tensors(w)])


def test_inference_steps_nothing():
    np.testing.assert_array_equal(stepped_tensors(tiny("bert", mode="infer")), [0.0])


def test_zero1_partition_by_hand():
    # sorted 100, 60, 10 x 5: rank 0 takes 100, rank 1 60, then the 10s go to rank 1 (70, 80,
    # 90, 100) until the tie at 100 / 100, where the lower rank takes the last: 2 and 5.
    assert zero1_largest_share([10, 100, 10, 10, 60, 10, 10], 2) == 5
    assert zero1_largest_share([5, 5, 5, 5], 2) == 2
    assert zero1_largest_share([7, 3], 1) == 2
    assert zero1_largest_share([], 4) == 0
    with pytest.raises(ValueError, match="dp_size"):
        zero1_largest_share([1], 0)


def test_zero1_share_of_the_layout_profiles_bert():
    # The BERT of datasets/layouts-cpu (width 128, 2 blocks, vocabulary 2048): 42 tensors,
    # which ZeroRedundancyOptimizer split 6 / 36 on the profile's two ranks (the profile's
    # partitions were 1,441,792 and 1,401,344 bytes, the embeddings' alone the first).
    w = tiny("bert", vocab_size=2048, max_positions=256, hidden_size=128, num_layers=2,
             num_heads=4, intermediate_size=512, seq_len=64, world_size=2, dp_size=2,
             sharding="zero1")  # fmt: skip
    assert _tensors(w) == 42
    np.testing.assert_allclose(stepped_tensors(w), [36.0])
    pp = tiny("bert", vocab_size=2048, max_positions=256, hidden_size=128, num_layers=2,
              num_heads=4, intermediate_size=512, seq_len=64, world_size=4, dp_size=2,
              pp_size=2, micro_batches=2, sharding="zero1")  # fmt: skip
    # the decoder weight tied to the embedding is held by both stages (torch pipelining's
    # stages each step their own copy): 21 + 22 tensors, of which ZeRO-1's larger shares
    np.testing.assert_allclose(stage_tensors(pp), [21.0, 22.0])
    np.testing.assert_allclose(stepped_tensors(pp), [20.0, 21.0])
