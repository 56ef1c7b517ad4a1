import numpy as np
import pytest
from tiny_specs import tiny

from scaledl.parallel.dtensors import dtensor_parameter_tensors, fit_dtensor_step_ms
from scaledl.workloads.builders import build_model


@pytest.mark.parametrize("family", ["bert", "llama"])
@pytest.mark.parametrize("sharding", ["zero2", "fsdp"])
def test_fully_sharded_rank_steps_every_parameter_as_a_dtensor(family, sharding):
    w = tiny(family, num_layers=2, batch_size=4, world_size=2, dp_size=2, sharding=sharding)
    # FSDP2 makes each parameter of the model one DTensor (a tied weight once)
    assert dtensor_parameter_tensors(w).tolist() == [len(list(build_model(w, "meta").parameters()))]


def test_tensor_parallel_rank_steps_the_planned_linears_as_dtensors():
    # BERT per block: query, key, value, attention output, intermediate, output: weight + bias
    bert = tiny("bert", num_layers=2, batch_size=4, world_size=2, tp_size=2)
    assert dtensor_parameter_tensors(bert).tolist() == [2 * 6 * 2]
    # LLaMA per block: q, k, v, o, gate, up, down, no biases
    llama = tiny("llama", num_layers=2, batch_size=4, world_size=2, tp_size=2, num_kv_heads=2)
    assert dtensor_parameter_tensors(llama).tolist() == [2 * 7]
    # with two stages each rank steps its own block's
    staged = tiny("bert", num_layers=2, batch_size=4, world_size=4, tp_size=2, pp_size=2)
    assert dtensor_parameter_tensors(staged).tolist() == [12, 12]


@pytest.mark.parametrize(
    "fields",
    [
        {"dp_size": 2},
        {"dp_size": 2, "sharding": "zero1"},
        {"pp_size": 2},
        {"tp_size": 2, "mode": "infer"},
    ],  # fmt: skip
)
def test_plain_parameters_and_inference_step_no_dtensor(fields):
    w = tiny("bert", num_layers=2, batch_size=4, world_size=2, **fields)
    assert not dtensor_parameter_tensors(w).any()


def test_step_cost_is_least_squares_through_the_origin_and_never_negative():
    # (10 * 1.0 + 20 * 3.0) / (10^2 + 20^2) = 70 / 500
    assert fit_dtensor_step_ms(np.array([1.0, 3.0]), np.array([10, 20])) == pytest.approx(0.14)
    assert fit_dtensor_step_ms(np.array([-1.0, -2.0]), np.array([10, 20])) == 0.0
    assert fit_dtensor_step_ms(np.array([]), np.array([])) == 0.0
    with pytest.raises(ValueError, match="counts"):
        fit_dtensor_step_ms(np.array([1.0]), np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="non-finite"):
        fit_dtensor_step_ms(np.array([np.nan]), np.array([1.0]))
