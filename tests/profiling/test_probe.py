import math

import pytest
import torch

from scaledl.profiling.probe import (
    CalibrationProbe,
    ProbeResult,
    baseline_of,
    merge_baselines,
    probe_drift,
)

NAN = float("nan")


def same(a: ProbeResult, b: ProbeResult) -> bool:
    """Figure-by-figure equality where two NaNs are equal."""
    pairs = zip(a.to_dict().values(), b.to_dict().values(), strict=True)
    return all((x != x and y != y) or x == y for x, y in pairs)


def test_probe_runs_on_one_rank_without_allreduce():
    result = CalibrationProbe(torch.device("cpu"), repeats=1).run()
    assert result.gemm_ms > 0 and result.memory_ms > 0
    assert math.isnan(result.allreduce_ms)


def test_probe_rejects_bad_settings():
    with pytest.raises(ValueError, match="repeats"):
        CalibrationProbe(torch.device("cpu"), repeats=0)
    with pytest.raises(ValueError, match="device"):
        CalibrationProbe(torch.device("meta"))


def test_baseline_is_the_fastest_figure_by_figure():
    base = baseline_of([ProbeResult(10.0, 2.0), ProbeResult(9.0, 3.0), ProbeResult(12.0, NAN)])
    assert same(base, ProbeResult(9.0, 2.0))
    assert math.isnan(baseline_of([ProbeResult(10.0, NAN)]).allreduce_ms)
    with pytest.raises(ValueError):
        baseline_of([])


def test_stored_baseline_lowers_a_disturbed_launch_baseline():
    """A launch that starts while the host is busy must not take that for normal."""
    disturbed_start = ProbeResult(20.0, 4.0)
    merged = merge_baselines(disturbed_start, {"gemm_ms": 10.0, "allreduce_ms": 0.5})
    assert same(merged, ProbeResult(10.0, 0.5))
    assert same(merge_baselines(disturbed_start, None), disturbed_start)
    assert (
        merge_baselines(ProbeResult(9.0, NAN), {"gemm_ms": 10.0, "allreduce_ms": None}).gemm_ms == 9
    )


@pytest.mark.parametrize(
    ("probe", "gemm", "allreduce"),
    [
        (ProbeResult(10.0, 1.0), 0.0, 0.0),  # quiet
        (ProbeResult(10.4, 1.0), 0.04, 0.0),  # within a 5% tolerance
        (ProbeResult(22.0, 1.0), 1.2, 0.0),  # a core shared with a busy loop: 2.2x
        (ProbeResult(10.0, 1.9), 0.0, 0.9),  # a noisy network
        (ProbeResult(9.0, 1.0), -0.1, 0.0),  # faster than the baseline
    ],
)
def test_drift_on_synthetic_probe_series(probe, gemm, allreduce):
    drift = probe_drift(probe, ProbeResult(10.0, 1.0))
    assert drift["gemm"] == pytest.approx(gemm)
    assert drift["allreduce"] == pytest.approx(allreduce)
    assert math.isnan(drift["memory"])  # no memory figure in these probes


def test_memory_sweep_drift():
    drift = probe_drift(ProbeResult(10.0, NAN, 6.0), ProbeResult(10.0, NAN, 5.0))
    assert drift["memory"] == pytest.approx(0.2) and drift["gemm"] == 0.0
    merged = merge_baselines(ProbeResult(10.0, NAN, 6.0), {"gemm_ms": 11.0, "memory_ms": 5.0})
    assert same(merged, ProbeResult(10.0, NAN, 5.0))


def test_drift_without_allreduce_is_nan():
    assert math.isnan(probe_drift(ProbeResult(10.0, NAN), ProbeResult(10.0, NAN))["allreduce"])
