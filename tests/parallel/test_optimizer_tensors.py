import numpy as np
import pytest
from tiny_specs import tiny

from scaledl.parallel.optimizer_tensors import stepped_tensors
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
    assert stages.sum() == _tensors(pp)
    zero1 = tiny("bert", world_size=2, sharding="zero1")
    np.testing.assert_allclose(stepped_tensors(zero1), [_tensors(zero1) / 2])
    # tensor parallelism and FSDP shard tensors, they do not remove any
    for w in (tiny("bert", world_size=2, tp_size=2), tiny("bert", world_size=2, sharding="fsdp")):
        np.testing.assert_allclose(stepped_tensors(w), [_tensors(w)])


def test_inference_steps_nothing():
    np.testing.assert_array_equal(stepped_tensors(tiny("bert", mode="infer")), [0.0])
