import numpy as np
import pytest

from scaledl.parallel.lanes import Task, replay
from scaledl.parallel.schedule import one_f_one_b_ms, p2p_calls, replay_pipeline, stage_order


def test_replay_serialises_a_lane_and_waits_for_dependencies():
    r = replay(
        [
            Task("a", "x", 2.0),
            Task("b", "x", 1.0),
            Task("c", "y", 1.0, ("a",)),
            Task("d", "y", 5.0, ("b",)),
        ]
    )
    assert r.start_ms == {"a": 0.0, "b": 2.0, "c": 2.0, "d": 3.0}
    assert r.makespan_ms == 8.0


def test_replay_refuses_deadlock_unknown_and_negative():
    with pytest.raises(ValueError, match="deadlock"):
        replay([Task("a", "x", 1.0, ("b",)), Task("b", "x", 1.0)])
    with pytest.raises(ValueError, match="unknown task 'z'"):
        replay([Task("a", "x", 1.0, ("z",))])
    with pytest.raises(ValueError, match="duration"):
        replay([Task("a", "x", -1.0)])


def test_one_f_one_b_order():
    assert stage_order("1f1b", 0, 2, 3) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1),
                                            ("B", 2)]  # fmt: skip
    assert stage_order("1f1b", 1, 2, 3) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2),
                                            ("B", 2)]  # fmt: skip
    assert stage_order("gpipe", 0, 2, 2) == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m"), [(2, 1), (2, 4), (4, 8), (3, 5)])
def test_equal_stages_give_the_bubble_fraction(schedule, p, m):
    f, b = 1.0, 2.0
    r = replay_pipeline([f] * p, [b] * p, m, schedule)
    assert r.makespan_ms == pytest.approx((m + p - 1) * (f + b))
    assert r.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))  # GPipe's closed form


def test_gpipe_by_hand_with_transfer_cost():
    # F0 [0,1], send [1,1.5], F1 [1.5,2.5], B1 [2.5,4.5], send [4.5,5], B0 [5,7]
    r = replay_pipeline([1.0, 1.0], [2.0, 2.0], 1, "gpipe", p2p_ms=0.5)
    assert r.makespan_ms == pytest.approx(7.0)
    assert r.stage_end_ms == pytest.approx([7.0, 4.5])


def test_unequal_stages_one_f_one_b_beats_gpipe_by_hand():
    # stage 0: f=b=2, stage 1: f=b=1, m=2. GPipe: stage 0 waits for both backwards of
    # stage 1: B0 [6,8], B1 [8,10]. 1F1B: stage 1 runs F0 B0 F1 B1 = [2,3][3,4][4,5][5,6],
    # so stage 0's B0 starts at 4: [4,6], B1 [6,8].
    gpipe = replay_pipeline([2.0, 1.0], [2.0, 1.0], 2, "gpipe")
    ofob = replay_pipeline([2.0, 1.0], [2.0, 1.0], 2, "1f1b")
    assert gpipe.makespan_ms == pytest.approx(10.0)
    assert ofob.makespan_ms == pytest.approx(8.0)


def test_slow_last_stage_by_hand():
    # stage 0 f=1 b=2, stage 1 f=2 b=4, m=2, GPipe: S1 F [1,3][3,5] B [5,9][9,13]; S0 B
    # [9,11][13,15].
    r = replay_pipeline([1.0, 2.0], [2.0, 4.0], 2, "gpipe")
    assert r.makespan_ms == pytest.approx(15.0)
    assert r.stage_busy_ms == pytest.approx([6.0, 12.0])


def test_vectorised_over_candidates_matches_one_by_one():
    f = np.array([1.0, 2.0, 0.5])
    b = np.array([2.0, 1.0, 3.0])
    vec = replay_pipeline([f, 2 * f], [b, b], 4, "1f1b", p2p_ms=np.array([0.1, 0.0, 0.3]))
    for i in range(3):
        one = replay_pipeline([f[i], 2 * f[i]], [b[i], b[i]], 4, "1f1b", p2p_ms=[0.1, 0.0, 0.3][i])
        assert vec.makespan_ms[i] == pytest.approx(one.makespan_ms)


def test_per_micro_batch_times_and_bad_lengths():
    r = replay_pipeline([[1.0, 3.0]], [[1.0, 1.0]], 2, "gpipe")
    assert r.makespan_ms == pytest.approx(6.0)
    with pytest.raises(ValueError, match="micro-batches"):
        replay_pipeline([[1.0]], [1.0], 2)
    with pytest.raises(ValueError, match="p2p_ms"):
        replay_pipeline([1.0, 1.0], [1.0, 1.0], 2, p2p_ms=[1.0, 1.0])
    with pytest.raises(ValueError, match="pipeline_schedule"):
        replay_pipeline([1.0, 1.0], [1.0, 1.0], 2, "zigzag")


def _calls(schedule, stage, stages, m):
    return [item[2] for item in p2p_calls(schedule, stage, stages, m) if item[0] == "call"]


def test_gpipe_posts_every_send_and_receive_alone():
    # torch's ScheduleGPipe: every receive and every send posted and waited on alone.
    assert len(_calls("gpipe", 0, 2, 4)) == 8
    assert len(_calls("gpipe", 1, 2, 4)) == 8
    assert all(len(ops) == 1 for ops in _calls("gpipe", 0, 2, 4))


def test_one_f_one_b_fuses_a_send_with_the_next_receive_of_the_other_direction():
    # Schedule1F1B: fwd_send_bwd_recv and bwd_send_fwd_recv are one group each.
    last = p2p_calls("1f1b", 1, 2, 4)
    assert last[:5] == [("call", 0, (("recv", "F", 0),)), ("F", 0), ("B", 0),
                        ("call", 1, (("send", "B", 0), ("recv", "F", 1))), ("F", 1)]  # fmt: skip
    assert last[-1] == ("call", 4, (("send", "B", 3),))
    assert len(_calls("1f1b", 0, 2, 4)) == 5
    assert _calls("1f1b", 0, 2, 4)[1] == (("send", "F", 1), ("recv", "B", 0))
    # A middle stage's warm-up forwards post their sends and receives one by one.
    middle = _calls("1f1b", 1, 4, 4)
    assert middle[:3] == [(("recv", "F", 0),), (("send", "F", 0),), (("recv", "F", 1),)]


def test_call_cost_by_hand():
    # p=2, m=2, f=b=1, call 0.1, free transfers. GPipe: S0 F0 [0,1] send [1,1.1] F1 [1.1,2.1]
    # send [2.1,2.2]; S1 recv [1,1.1] F0 [1.1,2.1] recv [2.1,2.2] F1 [2.2,3.2] B0 [3.2,4.2]
    # send [4.2,4.3] B1 [4.3,5.3] send [5.3,5.4]; S0 recv [4.2,4.3] B0 [4.3,5.3] recv [5.3,5.4]
    # B1 [5.4,6.4]. 1F1B: S1 recv [1,1.1] F0 [1.1,2.1] B0 [2.1,3.1] send+recv [3.1,3.2]
    # F1 [3.2,4.2] B1 [4.2,5.2] send [5.2,5.3]; S0 F0 [0,1] send [1,1.1] F1 [1.1,2.1]
    # send+recv [3.1,3.2] B0 [3.2,4.2] recv [5.2,5.3] B1 [5.3,6.3].
    gpipe = replay_pipeline([1.0, 1.0], [1.0, 1.0], 2, "gpipe", call_ms=0.1)
    ofob = replay_pipeline([1.0, 1.0], [1.0, 1.0], 2, "1f1b", call_ms=0.1)
    assert gpipe.makespan_ms == pytest.approx(6.4)
    assert gpipe.stage_end_ms == pytest.approx([6.4, 5.4])
    assert ofob.makespan_ms == pytest.approx(6.3)
    assert ofob.stage_end_ms == pytest.approx([6.3, 5.3])
    # Without a call cost the two schedules tie, (m + p - 1)(f + b).
    assert replay_pipeline([1.0, 1.0], [1.0, 1.0], 2, "gpipe").makespan_ms == pytest.approx(6.0)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_call_cost_vectorised(schedule):
    c = np.array([0.0, 0.1, 0.5])
    vec = replay_pipeline([1.0, 2.0, 1.5], [2.0, 1.0, 3.0], 4, schedule, p2p_ms=0.2, call_ms=c)
    for i in range(3):
        one = replay_pipeline([1.0, 2.0, 1.5], [2.0, 1.0, 3.0], 4, schedule, p2p_ms=0.2,
                              call_ms=c[i])  # fmt: skip
        assert vec.makespan_ms[i] == pytest.approx(one.makespan_ms)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_inference_runs_the_forwards_only(schedule):
    # p=2, m=2, f = 1 and 2, transfer 0.5, call 0.1: S0 F0 [0, 1] send [1, 1.1] F1 [1.1, 2.1]
    # send [2.1, 2.2]; links [1, 1.5], [2.1, 2.6]; S1 recv [1.5, 1.6] F0 [1.6, 3.6] recv
    # [3.6, 3.7] F1 [3.7, 5.7]: no gradient, no backward call.
    r = replay_pipeline([1.0, 2.0], [9.0, 9.0], 2, schedule, p2p_ms=0.5, call_ms=0.1,
                        backward=False)  # fmt: skip
    assert r.makespan_ms == pytest.approx(5.7)
    assert r.stage_busy_ms == pytest.approx([2.0, 4.0])
    calls = [i for i in p2p_calls(schedule, 1, 2, 2, backward=False) if i[0] == "call"]
    assert [c[2] for c in calls] == [(("recv", "F", 0),), (("recv", "F", 1),)]


def _torch_calls(cls, stage, stages, m):
    """The compute order and point-to-point groups torch's own schedule code issues."""
    import torch.distributed.pipelining.schedules as torch_schedules

    log = []

    class Stage:
        stage_index = stage

        def get_fwd_recv_ops(self, i):
            return [("recv", "F", i)] if stage > 0 else []

        def get_fwd_send_ops(self, i):
            return [("send", "F", i)] if stage < stages - 1 else []

        def get_bwd_recv_ops(self, i):
            return [("recv", "B", i)] if stage < stages - 1 else []

        def get_bwd_send_ops(self, i):
            return [("send", "B", i)] if stage > 0 else []

        def forward_one_chunk(self, i, *args, **kwargs):
            log.append(("F", i))

        def backward_one_chunk(self, i, **kwargs):
            log.append(("B", i))

        def perform_reduce_grad(self, *args):
            pass

    def batch(ops, desc=None):
        if ops:
            log.append(("call", tuple(sorted(ops))))
        return []

    schedule = object.__new__(cls)  # skips __init__: no process group, no real stage
    schedule._n_microbatches, schedule._num_stages, schedule._stage = m, stages, Stage()
    schedule.scale_grads = True
    schedule._check_inputs = lambda *a: ([None] * m, [{}] * m)
    schedule._initialize_stage = schedule._maybe_compute_loss = lambda *a: None
    schedule._maybe_get_loss = schedule._update_losses = lambda *a: None
    patched = {"_batch_p2p": batch, "_sorted_batch_p2p": lambda ops, desc=None: (
        {0: batch(ops)} if ops else {})}  # fmt: skip
    saved = {name: getattr(torch_schedules, name) for name in patched}
    try:
        for name, fn in patched.items():
            setattr(torch_schedules, name, fn)
        schedule._step_microbatches()
    finally:
        for name, fn in saved.items():
            setattr(torch_schedules, name, fn)
    return log


def test_calls_match_torchs_schedules():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    if not all(hasattr(schedules, n) for n in ("_batch_p2p", "_sorted_batch_p2p")):
        pytest.skip("this torch's schedules post their transfers through other helpers")
    for name, cls in (("gpipe", schedules.ScheduleGPipe), ("1f1b", schedules.Schedule1F1B)):
        for p in (1, 2, 3, 4):
            for m in range(1, 7):
                for s in range(p):
                    ours = [("call", tuple(sorted(i[2]))) if i[0] == "call" else i
                            for i in p2p_calls(name, s, p, m)]  # fmt: skip
                    assert ours == _torch_calls(cls, s, p, m), (name, p, m, s)


@pytest.mark.parametrize(("p", "m"), [(1, 3), (2, 4), (4, 8), (3, 5)])
def test_closed_form_matches_the_replay_with_equal_stages(p, m):
    f, b = 1.0, 2.0
    steady, bubble = one_f_one_b_ms([f + b] * p, m)
    assert steady + bubble == pytest.approx(replay_pipeline([f] * p, [b] * p, m).makespan_ms)
    # interleaving: (p - 1) / (v m) of the ideal time (Narayanan et al. 2021)
    steady, bubble = one_f_one_b_ms([f + b] * p, m, virtual_stages=4)
    assert bubble / steady == pytest.approx((p - 1) / (4 * m))


def test_closed_form_bounds_the_replay_with_unequal_stages():
    # slowest stage first: its warm-up forwards hide the other's fill (replay 8, bound 10)
    assert sum(one_f_one_b_ms([4.0, 2.0], 2)) == 10.0
    assert replay_pipeline([2.0, 1.0], [2.0, 1.0], 2, "1f1b").makespan_ms == pytest.approx(8.0)
    # slowest stage last: the bound is the replay
    assert sum(one_f_one_b_ms([2.0, 4.0], 2)) == pytest.approx(
        replay_pipeline([1.0, 2.0], [1.0, 2.0], 2, "1f1b").makespan_ms
    )
    with pytest.raises(ValueError, match="need >= 1"):
        one_f_one_b_ms([], 2)
