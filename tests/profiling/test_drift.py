"""The host-drift correction on synthetic launches with injected one-sided slowdowns."""

import numpy as np
import pandas as pd
import pytest

from scaledl.profiling.drift import MIN_PAIRS, correct_launch_labels, fit_slowdown


def synthetic_launches(
    n_workloads=40, launches=3, gemm_exp=0.6, memory_exp=0.3, noise=0.005, seed=0
) -> pd.DataFrame:
    """Launches whose labels are quiet labels slowed by the host, as the probes see it.

    The host slows down one-sidedly (a factor >= 1, heavy-tailed like the reference VM's slow
    phases); the probes see the slowdown with their own small noise.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for w in range(n_workloads):
        quiet_ms = float(rng.uniform(5, 200))
        for r in range(launches):
            gemm_slow = 1.0 + rng.exponential(0.10)
            memory_slow = 1.0 + rng.exponential(0.12)
            slow = gemm_slow**gemm_exp * memory_slow**memory_exp
            rows.append(
                {
                    "run_id": f"w{w}-r{r}",
                    "workload_id": f"w{w}",
                    "quiet_ms": quiet_ms,
                    "iteration_ms": quiet_ms * slow * np.exp(rng.normal(0, noise)),
                    "label_probe_gemm_ms": 10.0 * gemm_slow * np.exp(rng.normal(0, 0.005)),
                    "label_probe_memory_ms": 6.0 * memory_slow * np.exp(rng.normal(0, 0.005)),
                }
            )
    return pd.DataFrame(rows)


def relative_spread(frame: pd.DataFrame, column: str) -> float:
    """Mean over workloads of (max - min) / min of a label column."""
    g = frame.groupby("workload_id")[column]
    return float(((g.max() - g.min()) / g.min()).mean())


def test_fit_recovers_the_injected_sensitivities():
    model = fit_slowdown(synthetic_launches())
    assert model is not None
    assert model.gemm_exponent == pytest.approx(0.6, abs=0.1)
    assert model.memory_exponent == pytest.approx(0.3, abs=0.1)
    assert model.r2_within > 0.8
    assert model.n_workloads == 40 and 100 <= model.n_launches <= 120  # a tail refused


def test_correction_recovers_the_quiet_label_within_tolerance():
    launches = synthetic_launches()
    world = pd.Series(1, index=launches.index)
    corrected, models = correct_launch_labels(launches, world)
    assert set(models) == {"1"}
    raw_error = np.abs(corrected["iteration_ms_raw"] / corrected["quiet_ms"] - 1)
    error = np.abs(corrected["iteration_ms"] / corrected["quiet_ms"] - 1)
    # The quiet reference is the probes' 5th percentile, so labels land within a few % of quiet.
    assert np.median(error) < 0.03 < np.median(raw_error)
    assert relative_spread(corrected, "iteration_ms") < 0.3 * relative_spread(
        corrected, "iteration_ms_raw"
    )
    assert (corrected["slowdown_factor"] >= 0.9).all()


def test_a_slowdown_the_probes_do_not_see_is_not_invented():
    """Label noise unrelated to the probes: the exponents stay near zero, labels near raw."""
    launches = synthetic_launches(gemm_exp=0.0, memory_exp=0.0, noise=0.05)
    model = fit_slowdown(launches)
    assert model.gemm_exponent < 0.15 and model.memory_exponent < 0.15
    assert model.r2_within < 0.1


def test_beyond_the_validated_range_is_refused_not_corrected():
    launches = synthetic_launches()
    far = launches.iloc[[0]].copy()
    far["run_id"], far["label_probe_gemm_ms"] = "far", 10.0 * 3.0  # 3x: never seen by the fit
    launches = pd.concat([launches, far], ignore_index=True)
    corrected, _ = correct_launch_labels(launches, pd.Series(1, index=launches.index))
    row = corrected.set_index("run_id").loc["far"]
    assert not row["drift_correctable"] and row["slowdown_factor"] == 1.0
    model = fit_slowdown(launches.iloc[:-1])
    assert not model.correctable([30.0], [6.0])[0] and model.correctable([10.5], [6.2])[0]


def test_too_few_repeats_or_no_probes_keep_raw_labels():
    few = synthetic_launches(n_workloads=MIN_PAIRS - 1)
    assert fit_slowdown(few) is None
    corrected, models = correct_launch_labels(few, pd.Series(2, index=few.index))
    assert models == {} and (corrected["iteration_ms"] == corrected["iteration_ms_raw"]).all()
    imported = synthetic_launches().drop(columns=["label_probe_memory_ms"])
    corrected, models = correct_launch_labels(imported, pd.Series(1, index=imported.index))
    assert models == {} and (corrected["slowdown_factor"] == 1.0).all()


def test_per_world_size_models_with_a_pooled_fallback():
    a = synthetic_launches(n_workloads=20, gemm_exp=1.0, memory_exp=0.0, seed=1)
    b = synthetic_launches(n_workloads=MIN_PAIRS - 2, gemm_exp=0.0, memory_exp=1.0, seed=2)
    b["workload_id"] = "b" + b["workload_id"]
    frame = pd.concat([a, b], ignore_index=True)
    world = pd.Series([1] * len(a) + [2] * len(b), index=frame.index)
    _, models = correct_launch_labels(frame, world)
    assert models["1"]["world_size"] == 1 and models["1"]["gemm_exponent"] > 0.8
    assert models["2"]["world_size"] == 0  # too few repeated workloads: the pooled model


def test_missing_column_is_named():
    with pytest.raises(ValueError, match="label_probe_gemm_ms"):
        fit_slowdown(pd.DataFrame({"workload_id": [], "iteration_ms": []}))
