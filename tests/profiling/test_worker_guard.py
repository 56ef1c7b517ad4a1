"""The worker's interference guard on one rank: drift of the interleaved reference, retry budget."""

import pytest
import torch

from scaledl.profiling.probe import CalibrationProbe, ProbeResult
from scaledl.profiling.worker import _Guard


@pytest.fixture(scope="module")
def guard(tmp_path_factory):
    return _Guard({"retry_budget_share": 0.1}, torch.device("cpu"), 0, tmp_path_factory.mktemp("p"))


def test_interleaved_reference_times_one_gemm_block_and_one_sweep():
    gemm_ms, memory_ms = CalibrationProbe(torch.device("cpu"), repeats=1).interleaved()
    assert gemm_ms > 0 and memory_ms > 0


def test_interleaved_sweep_is_timed_after_an_untimed_one(monkeypatch):
    probe = CalibrationProbe(torch.device("cpu"), repeats=1)
    calls = []
    monkeypatch.setattr(probe, "_memory_ms", lambda sweeps=None: calls.append(sweeps) or
                        [9.0, 5.0][len(calls) - 1])  # fmt: skip
    _, memory_ms = probe.interleaved()
    assert calls == [1, 1] and memory_ms == 5.0  # the cold first sweep is not the figure


def test_a_slow_interleaved_gemm_block_counts_as_drift(guard):
    base = guard.baseline
    quiet = ProbeResult(base.gemm_ms, float("nan"), base.memory_ms)
    assert guard.drift(quiet, quiet)["gemm"] == pytest.approx(0.0)
    slow_labels = {
        "label_probes": 3,
        "label_probe_gemm_ms": 2.0 * base.gemm_ms,
        "label_probe_memory_ms": base.memory_ms / guard.probe.sweeps,
    }
    drift = guard.drift(quiet, quiet, slow_labels)
    assert drift["gemm"] == pytest.approx(1.0) and drift["memory"] == pytest.approx(0.0)
    assert guard.drift(quiet, quiet, {"label_probes": 0})["gemm"] == pytest.approx(0.0)


def test_the_interleaved_sweep_is_not_judged_against_the_baseline(guard):
    # One sweep between epochs took about twice the baseline's per-sweep time on a quiet host
    # (worker._Guard.drift): that offset is not interference, so it never flags an attempt.
    base = guard.baseline
    quiet = ProbeResult(base.gemm_ms, float("nan"), base.memory_ms)
    offset = {
        "label_probes": 3,
        "label_probe_gemm_ms": base.gemm_ms,
        "label_probe_memory_ms": 2.5 * base.memory_ms / guard.probe.sweeps,
    }
    assert guard.drift(quiet, quiet, offset)["memory"] == pytest.approx(0.0)
    slow_after = ProbeResult(base.gemm_ms, float("nan"), 2.5 * base.memory_ms)
    assert guard.drift(quiet, slow_after, offset)["memory"] == pytest.approx(1.5)


def test_retries_stop_at_their_share_of_the_launch_time(guard):
    guard.retry_s = 0.0
    assert guard.may_retry()
    guard.retry_s = 0.1 * 60.0 + 1.0  # more than a tenth of the first minute
    assert not guard.may_retry()
    guard.retry_s = 0.0
