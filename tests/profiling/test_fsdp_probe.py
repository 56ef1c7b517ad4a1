"""The FSDP2 API probe in a one-rank gloo group (the two-rank run: test_layouts)."""

import torch

from scaledl.profiling.fsdp_probe import (
    MAX_PAIR_BYTES,
    PROBE_ROWS,
    WIDTH_SCALES,
    ShardingProbe,
    probe_widths,
)
from scaledl.profiling.timers import Clock


def _probe(intermediate: int = 32) -> ShardingProbe:
    return ShardingProbe(None, "pp", 8, intermediate, 6, torch.float32, torch.device("cpu"))


def test_real_rows_carry_the_unit_and_the_tensor_bytes(one_rank):
    # which differences are positive depends on the host's noise: only the fields are fixed
    probe = _probe()
    times = probe._time((1, "fsdp"), Clock(torch.device("cpu")))
    assert list(times) == ["forward", "backward", "step"]
    assert all(ms > 0 for ms in times.values())  # a real interval each
    pair_bytes = {k: (8 * 32 * k + 32 * k + 32 * k * 8 + 8) * 4 for k in WIDTH_SCALES}
    assert (probe.tensors, probe.param_bytes) == (4, pair_bytes)
    rows = probe.time(Clock(torch.device("cpu")))
    assert {r["collective"] for r in rows} <= set(PROBE_ROWS)
    sizes = {b for k in WIDTH_SCALES for b in (pair_bytes[k], pair_bytes[k] // 4)}
    for r in rows:
        assert r["collective_bytes"] in sizes and r["collective_ms"] > 0
        assert (r["group"], r["group_size"], r["source"]) == ("pp", 1, "microbenchmark")


def test_rows_are_the_differences_and_a_non_positive_one_is_left_out(one_rank, monkeypatch):
    probe = _probe()
    times = {
        "plain": {"forward": 1.0, "backward": 2.0, "step": 9.0},
        "fsdp": {"forward": 1.5, "backward": 5.0, "step": 3.0},
        "zero2": {"forward": 1.5, "backward": 1.0, "step": 3.0},
        "shard": {"forward": 0.5, "backward": 1.0, "step": 1.0},
    }
    monkeypatch.setattr(probe, "_time", lambda key, clock: times[key[1]])
    rows = probe.time(Clock(torch.device("cpu")))
    # the zero2 backward is faster than the plain one: no row; the step is per tensor (4)
    nbytes = probe.param_bytes
    assert [(r["collective"], r["collective_ms"], r["collective_bytes"]) for r in rows] == [
        row for k in WIDTH_SCALES
        for row in (("fsdp_forward", 0.5, nbytes[k]), ("fsdp_backward", 3.0, nbytes[k]),
                    ("fsdp_step", 0.5, nbytes[k] // 4))
    ]  # fmt: skip


def test_each_module_is_timed_after_an_untimed_call(one_rank, monkeypatch):
    probe = _probe()
    calls = []
    real = probe._time

    def spy(key, clock):
        calls.append(key)
        return real(key, clock)

    monkeypatch.setattr(probe, "_time", spy)
    probe.time(Clock(torch.device("cpu")))
    assert calls == [(k, m) for k in WIDTH_SCALES for m in ("plain", "fsdp", "zero2", "shard")
                     for _ in range(2)]  # fmt: skip


def test_the_probe_keeps_the_workload_random_state(one_rank):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    _probe()
    assert torch.equal(torch.rand(3), expected)


def test_the_session_probes_training_layouts_without_fsdp_or_zero2(one_rank):
    from types import SimpleNamespace

    from tiny_specs import tiny

    from scaledl.profiling.layout_session import LayoutSession

    def probe_of(w, train=True):
        session = SimpleNamespace(workload=w, groups={"dp": None, "tp": None, "pp": None},
                                  device=torch.device("cpu"), train=train)  # fmt: skip
        return LayoutSession._sharding_probe(session)

    zero1 = dict(dp_size=2, world_size=2, sharding="zero1", intermediate_size=32)
    tp = dict(tp_size=2, world_size=2, intermediate_size=32)
    assert probe_of(tiny("bert", **zero1)).group_name == "dp"
    assert probe_of(tiny("bert", **tp)).group_name == "tp"
    assert probe_of(tiny("bert", **{**zero1, "intermediate_size": 33})).group_name == "dp"
    assert probe_of(tiny("bert", dp_size=2, world_size=2, sharding="fsdp")) is None  # itself
    assert probe_of(tiny("bert", dp_size=2, world_size=2, sharding="zero2")) is None
    assert probe_of(tiny("bert", **zero1), train=False) is None  # no backward to time
    assert probe_of(tiny("bert")) is None  # one rank


def test_probe_widths_scale_the_workload_and_stay_within_the_byte_cap():
    assert probe_widths(128, 512, 2, 4) == (512, 2048)  # the committed profiles' workloads
    # h = 4096, intermediate 16384: the wide pair capped at MAX_PAIR_BYTES, the other 4x less
    narrow, wide = probe_widths(4096, 16384, 2, 4)
    assert 2 * 4096 * wide * 4 <= MAX_PAIR_BYTES and (narrow, wide) == (256, 1024)
    # each shards evenly over the group, at least one column per rank
    assert probe_widths(8, 33, 3, 4) == (33, 132)
    assert probe_widths(2**20, 8, 2, 4) == (2, 4)
