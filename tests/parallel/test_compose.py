from dataclasses import replace

import numpy as np
import pytest

from scaledl.parallel.collectives import COLLECTIVES, CollectiveModel
from scaledl.parallel.compose import LayoutInputs, compose, ddp_buckets, stack_inputs
from scaledl.parallel.overlap import Overlap
from scaledl.parallel.predict import sharded_step_ms
from scaledl.profiles.tables import FSDP_API

MIB = 1024 * 1024
#: alpha 0.1 ms, 1e-6 ms per byte for every collective; no FSDP probe (its costs: source none).
CM = CollectiveModel(dict.fromkeys(COLLECTIVES, (0.1, 1e-6)),
                     {c: "none" if c in FSDP_API else "t" for c in COLLECTIVES})  # fmt: skip
#: The same with FSDP2's probed API costs (``zero2_backward``: a flat 0.3 ms).
PROBED = CollectiveModel({**CM.params, "zero2_backward": (0.3, 0.0)},
                         dict.fromkeys(COLLECTIVES, "t"))  # fmt: skip
FREE = CollectiveModel(dict.fromkeys(COLLECTIVES, (0.0, 0.0)), dict.fromkeys(COLLECTIVES, "t"))


def inputs(**kw):
    base = dict(
        stage=np.array([0, 0]), unit=np.array([0, 1]), forward_ms=np.array([1.0, 2.0]),
        backward_ms=np.array([2.0, 4.0]), tp_allreduce_ms=np.zeros(2),
        param_bytes=np.array([1e6, 1e6]), boundary_bytes=np.zeros(0),
        optimizer_ms=np.array([0.5]), dp_size=2.0, micro_batches=1, schedule="1f1b",
        sharding="none", train=True,
    )  # fmt: skip
    base.update(kw)
    return LayoutInputs(**base)


def test_ddp_buckets_close_at_one_then_twenty_five_mib():
    assert ddp_buckets(np.array([0.0, 2 * MIB, 10 * MIB, 20 * MIB])) == [
        (1, 2 * MIB),
        (3, 30 * MIB),
    ]


def test_ddp_bucket_after_the_last_gradient_by_hand():
    # backward: layer 1 [3, 7], layer 0 [7, 9]; one 2 MiB bucket ready at 9, all-reduce over
    # 2 ranks: 0.1 + 2 MiB * 1e-6 ms; then the 0.5 ms step.
    x = inputs(param_bytes=np.array([2.0 * MIB, 0.0]))
    it = compose(x, CM)
    ar = 0.1 + 2 * MIB * 1e-6
    assert it.exposed_sync_ms == pytest.approx(ar)
    assert it.iteration_ms == pytest.approx(9.0 + ar + 0.5)


def test_fsdp_prefetch_and_reduce_scatter_by_hand():
    # all-gather / reduce-scatter of 1e6 bytes over 2: 0.1 + 0.5 = 0.6 ms.
    # forward: G0 [0, .6], F0 [.6, 1.6], G1 [.6, 1.2], F1 [1.6, 3.6]
    # backward: G(u1) [0, .6], B(u1) [.6, 4.6], G(u0) [.6, 1.2], B(u0) [4.6, 6.6];
    # reduce-scatters [4.6, 5.2], [6.6, 7.2]: 0.6 exposed.
    it = compose(inputs(sharding="fsdp"), CM)
    assert it.pipeline_ms == pytest.approx(3.6 + 6.6)
    assert it.exposed_sync_ms == pytest.approx(0.6)
    assert it.iteration_ms == pytest.approx(3.6 + 6.6 + 0.6 + 0.5)


def test_a_probed_fsdp_unit_costs_its_api_on_the_critical_path_by_hand():
    # fsdp_forward / fsdp_backward of a 1e6-byte unit: 0.1 + 1e6 * 1e-6 = 1.1 ms each, no
    # all-gather or reduce-scatter lane: forward (1 + 1.1) + (2 + 1.1), backward
    # (4 + 1.1) + (2 + 1.1), nothing exposed, then the 0.5 ms step.
    it = compose(inputs(sharding="fsdp"), PROBED)
    assert it.pipeline_ms == pytest.approx(5.2 + 8.2)
    assert it.exposed_sync_ms == pytest.approx(0.0)
    assert it.iteration_ms == pytest.approx(5.2 + 8.2 + 0.5)
    # ZeRO-2 keeps the gathered parameters: its backward pays zero2_backward (0.3 per unit)
    it = compose(inputs(sharding="zero2"), PROBED)
    assert it.iteration_ms == pytest.approx(5.2 + 6.6 + 0.5)
    # the probe never touches an unsharded layout
    assert compose(inputs(), PROBED).iteration_ms == compose(inputs(), CM).iteration_ms


def test_a_backward_without_probe_rows_keeps_its_lanes_by_hand():
    # too few positive backward rows: the forward is probed (5.2 as above), the backward
    # gathers and reduce-scatters on the lanes (6.6 and 0.6 exposed, as without a probe)
    half = CollectiveModel(PROBED.params, {**PROBED.source, "fsdp_backward": "none"})
    it = compose(inputs(sharding="fsdp"), half)
    assert it.exposed_sync_ms == pytest.approx(0.6)
    assert it.iteration_ms == pytest.approx(5.2 + 6.6 + 0.6 + 0.5)


def test_each_reduce_scatter_carries_its_own_unit_in_backward_order_by_hand():
    # the root unit (-1) holds the first and the last layer: it runs first in backward
    # ([0, 4]: head 2 + embedding 2), then unit 0 ([4, 8]); its reduce-scatter (2e6 bytes:
    # 0.1 + 1.0 = 1.1 ms) follows the root's part, unit 0's (1e6: 0.6 ms) ends at 8.6
    x = inputs(stage=np.zeros(3, dtype=int), unit=np.array([-1, 0, -1]),
               forward_ms=np.array([1.0, 2.0, 1.0]), backward_ms=np.array([2.0, 4.0, 2.0]),
               tp_allreduce_ms=np.zeros(3), param_bytes=np.array([2e6, 1e6, 0.0]),
               sharding="zero2")  # fmt: skip
    assert compose(x, CM).exposed_sync_ms == pytest.approx(0.6)


def test_a_sharded_step_pays_dtensor_per_tensor_by_hand():
    # 4 tensors of a 2e6-byte stage: mean 5e5 bytes, 0.1 + 5e5 * 1e-6 = 0.6 ms per tensor
    tensors = np.array([[4.0]])
    assert sharded_step_ms(PROBED, inputs(sharding="fsdp"), tensors) == pytest.approx(
        np.array([[2.4]])
    )
    assert sharded_step_ms(PROBED, inputs(sharding="zero2"), tensors) == pytest.approx(
        np.array([[2.4]])
    )
    for x, cm in ((inputs(sharding="fsdp"), CM), (inputs(sharding="zero1"), PROBED),
                  (inputs(sharding="fsdp", train=False), PROBED)):  # fmt: skip
        assert sharded_step_ms(cm, x, tensors) == pytest.approx(np.zeros((1, 1)))


def test_zero2_gathers_in_forward_only():
    # forward 3.6 as FSDP; backward without gathers: [0, 4], [4, 6]; scatters [4, 4.6],
    # [6, 6.6].
    it = compose(inputs(sharding="zero2"), CM)
    assert it.iteration_ms == pytest.approx(3.6 + 6.0 + 0.6 + 0.5)


def test_zero1_broadcasts_the_partitions_after_the_step():
    # DDP: one bucket of 2e6 bytes (1e6 < 1 MiB <= 2e6) ready at 9, all-reduce
    # 0.1 + 2e6 * 1e-6 = 2.1; step 0.5; 2 broadcasts of a 1e6-byte partition: 2 * (0.1 + 1.0).
    it = compose(inputs(sharding="zero1"), CM)
    assert it.iteration_ms == pytest.approx(9.0 + 2.1 + 0.5 + 2.2)
    assert it.optimizer_ms == pytest.approx(0.5 + 2.2)


def test_pipeline_of_two_equal_stages_and_vector_candidates():
    x = inputs(stage=np.array([0, 1]), forward_ms=np.array([1.0, 1.0]),
               backward_ms=np.array([2.0, 2.0]), boundary_bytes=np.zeros(1),
               optimizer_ms=np.array([0.5, 0.5]), dp_size=1.0, micro_batches=2,
               schedule="gpipe")  # fmt: skip
    it = compose(x, FREE)
    assert it.iteration_ms == pytest.approx(3 * 3.0 + 0.5)
    assert it.bubble_fraction == pytest.approx(1 / 3)
    # two candidates: the second twice as slow per layer
    fw = np.array([[1.0, 2.0], [1.0, 2.0]])
    vec = compose(
        inputs(stage=np.array([0, 1]), forward_ms=fw, backward_ms=2 * fw,
               tp_allreduce_ms=np.zeros((2, 2)), boundary_bytes=np.zeros((1, 2)),
               optimizer_ms=np.full((2, 2), 0.5), dp_size=np.array([1.0, 1.0]),
               micro_batches=2, schedule="gpipe"),
        FREE,
    )  # fmt: skip
    np.testing.assert_allclose(vec.iteration_ms, [9.5, 18.5])


def test_tensor_parallel_collectives_on_the_critical_path():
    x = inputs(tp_allreduce_ms=np.array([0.25, 0.0]), dp_size=1.0)
    it = compose(x, CM)
    assert it.iteration_ms == pytest.approx(3.0 + 0.25 + 6.0 + 0.25 + 0.5)


def test_inference_is_the_forward():
    it = compose(inputs(train=False, dp_size=1.0), CM)
    assert it.iteration_ms == pytest.approx(3.0)


def test_serial_collectives_without_overlap_by_hand():
    # DDP, 2 MiB bucket after the last gradient: with h = 0 the all-reduce (ar) is added to
    # the backward (nothing exposed on the lane), the iteration is the same.
    x = inputs(param_bytes=np.array([2.0 * MIB, 0.0]))
    ar = 0.1 + 2 * MIB * 1e-6
    it = compose(x, CM, Overlap.uniform(0.0))
    assert it.exposed_sync_ms == pytest.approx(0.0)
    assert it.iteration_ms == pytest.approx(9.0 + ar + 0.5)
    # FSDP, h = 0: forward 1 + .6 + 2 + .6, backward (4 + .6) + (2 + .6), scatters serial
    # (1.2); with h = 1 the by-hand figures of test_fsdp_prefetch_and_reduce_scatter_by_hand.
    serial = compose(inputs(sharding="fsdp"), CM, Overlap.uniform(0.0))
    assert serial.iteration_ms == pytest.approx(4.2 + 7.2 + 1.2 + 0.5)
    full = compose(inputs(sharding="fsdp"), CM, Overlap.full())
    assert full.iteration_ms == pytest.approx(3.6 + 6.6 + 0.6 + 0.5)


def test_half_hidden_gathers_split_between_lane_and_compute():
    # ZeRO-2, all-gather hidden 0.5: lane .3 each, compute F0 1 + .3, F1 2 + .3:
    # G0 [0, .3], F0 [.3, 1.6], G1 [.3, .6], F1 [1.6, 3.9]; backward and scatters as zero2.
    lanes = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 1.0, "send": 1.0}
    it = compose(inputs(sharding="zero2"), CM, Overlap(lanes, dict.fromkeys(lanes, "t")))
    assert it.iteration_ms == pytest.approx(3.9 + 6.0 + 0.6 + 0.5)


def test_exposed_transfers_delay_the_sender():
    # two stages (F 1 and 2, B 2 and 4 ms), a 1e6-byte send of 0.1 + 1.0 ms: each point-to-
    # point call costs its stage the latency 0.1, the transfer 1.0. One micro-batch: every
    # transfer is on the critical path either way (11.2). GPipe, m = 2, hidden: S0 F0 [0, 1]
    # call [1, 1.1] F0 [1.1, 2.1] call [2.1, 2.2], links [1, 2] and [2.1, 3.1]; S1 recv
    # [2, 2.1] F1 [2.1, 4.1] recv [4.1, 4.2] F1 [4.2, 6.2] B1 [6.2, 10.2] call [10.2, 10.3]
    # B1 [10.3, 14.3], gradient links [10.2, 11.2] and [14.3, 15.3]; S0 recv [11.2, 11.3]
    # B0 [11.3, 13.3] recv [15.3, 15.4] B0 [15.4, 17.4]. Serial, each transfer delays its
    # sender (F0 2 each, B1 5 each): S1 B1 [6.2, 11.2], [11.3, 16.3]; S0 B0 [11.3, 13.3],
    # [16.4, 18.4].
    x = inputs(stage=np.array([0, 1]), unit=np.array([0, 1]), boundary_bytes=np.array([1e6]),
               optimizer_ms=np.array([0.0, 0.0]), dp_size=1.0, schedule="gpipe")  # fmt: skip
    assert compose(x, CM, Overlap.full()).iteration_ms == pytest.approx(11.2)
    assert compose(x, CM, Overlap.uniform(0.0)).iteration_ms == pytest.approx(11.2)
    two = replace(x, micro_batches=2)
    assert compose(two, CM, Overlap.full()).iteration_ms == pytest.approx(17.4)
    assert compose(two, CM, Overlap.uniform(0.0)).iteration_ms == pytest.approx(18.4)


@pytest.mark.parametrize("stages", [1, 2])
def test_stacked_candidates_compose_as_each_alone(stages):
    stage = np.array([0, stages - 1])
    columns = [
        inputs(stage=stage, forward_ms=np.array([[1.0], [2.0 * k]]),
               backward_ms=np.array([[2.0], [3.0]]), tp_allreduce_ms=np.full((2, 1), 0.1),
               boundary_bytes=np.full((stages - 1, 1), 1e5),
               optimizer_ms=np.full((stages, 1), 0.5 * k), dp_size=float(k), micro_batches=2,
               schedule="gpipe")
        for k in (1, 2, 4)
    ]  # fmt: skip
    alone = [float(np.ravel(compose(x, CM).iteration_ms)[0]) for x in columns]
    stacked = stack_inputs(columns)
    assert stacked.forward_ms.shape == (2, 3) and stacked.dp_size.tolist() == [1.0, 2.0, 4.0]
    np.testing.assert_allclose(compose(stacked, CM).iteration_ms, alone, rtol=1e-12)
    with pytest.raises(ValueError, match="'micro_batches'"):
        stack_inputs([columns[0], replace(columns[1], micro_batches=1)])
    with pytest.raises(ValueError, match="'param_bytes'"):
        stack_inputs([columns[0], replace(columns[1], param_bytes=np.array([1.0, 2.0]))])
