"""The tensor-parallel API probe in a one-rank gloo group (the two-rank run: test_layouts)."""

import pytest
import torch

from scaledl.profiling import tp_probe
from scaledl.profiling.timers import Clock
from scaledl.profiling.tp_probe import PROBE_ROWS, TensorParallelProbe


def _probe(train: bool, intermediate: int = 32) -> TensorParallelProbe:
    return TensorParallelProbe(None, "dp", 8, intermediate, 6, torch.float32,
                               torch.device("cpu"), train)  # fmt: skip


def test_real_rows_carry_the_pair_output_activation(one_rank):
    # which differences are positive depends on the host's noise: only the fields are fixed
    for train in (True, False):
        probe = _probe(train)
        times = probe._time(probe.parallel, Clock(torch.device("cpu")))
        assert list(times) == ([*PROBE_ROWS[:2], "tp_rowwise_backward", "tp_colwise_backward"]
                               if train else list(PROBE_ROWS[:2]))  # fmt: skip
        assert all(ms > 0 for ms in times.values())  # a real interval each
        rows = probe.time(Clock(torch.device("cpu")))
        allowed = set(PROBE_ROWS) if train else {"tp_colwise_forward", "tp_rowwise_forward"}
        assert {r["collective"] for r in rows} <= allowed
        for r in rows:
            assert r["collective_ms"] > 0 and r["collective_bytes"] == 6 * 8 * 4
            assert (r["group"], r["group_size"], r["source"]) == ("dp", 1, "microbenchmark")


def test_rows_are_the_differences_and_a_non_positive_one_is_left_out(one_rank, monkeypatch):
    probe = _probe(train=True)
    times = {
        id(probe.parallel): dict(zip(PROBE_ROWS, (0.5, 1.5, 2.0, 1.0), strict=True)),
        id(probe.local): dict(zip(PROBE_ROWS, (0.25, 0.5, 2.5, 0.25), strict=True)),
    }
    monkeypatch.setattr(probe, "_time", lambda module, clock: times[id(module)])
    rows = probe.time(Clock(torch.device("cpu")))
    assert [(r["collective"], r["collective_ms"]) for r in rows] == [
        ("tp_colwise_forward", 0.25), ("tp_rowwise_forward", 1.0),
        ("tp_rowwise_backward", 0.75)]  # fmt: skip
    for t in times.values():  # without training no backward times
        del t["tp_colwise_backward"], t["tp_rowwise_backward"]
    probe.train = False
    rows = probe.time(Clock(torch.device("cpu")))
    assert [r["collective"] for r in rows] == ["tp_colwise_forward", "tp_rowwise_forward"]


def test_each_module_is_timed_after_an_untimed_call(one_rank, monkeypatch):
    probe = _probe(train=True)
    calls = []
    real = probe._time

    def spy(module, clock):
        calls.append(module)
        return real(module, clock)

    monkeypatch.setattr(probe, "_time", spy)
    probe.time(Clock(torch.device("cpu")))
    assert calls == [probe.parallel, probe.parallel, probe.local, probe.local]


def test_a_width_that_does_not_split_names_the_field(one_rank, monkeypatch):
    monkeypatch.setattr(tp_probe.dist, "get_world_size", lambda group=None: 3)
    with pytest.raises(ValueError, match="intermediate_size=32 does not split over the 3 ranks"):
        _probe(train=True)


def test_the_session_probes_only_layouts_that_a_tensor_parallel_split_fits(one_rank):
    from types import SimpleNamespace

    from tiny_specs import tiny

    from scaledl.profiling.layout_session import LayoutSession

    def probe_of(w):
        session = SimpleNamespace(workload=w, groups={"dp": None, "pp": None},
                                  device=torch.device("cpu"), train=True)  # fmt: skip
        return LayoutSession._tp_probe(session)

    fsdp = dict(dp_size=2, world_size=2, sharding="fsdp")
    assert isinstance(probe_of(tiny("bert", intermediate_size=32, **fsdp)), TensorParallelProbe)
    assert probe_of(tiny("bert", intermediate_size=33, **fsdp)) is None  # no split: no probe
    assert probe_of(tiny("bert", tp_size=2, world_size=2)) is None  # tensor parallel itself
    assert probe_of(tiny("bert")) is None  # one rank
