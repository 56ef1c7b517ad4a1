"""Benchmark: how this host drifts. The probes and two fixed reference workloads over >= 20 min.

One process pinned to core 0 with one thread (as a world-size-1 profiling rank of the quick
preset) repeats, for ``--minutes``, a *cycle*: the interleaved reference block of the calibration
probe (one GEMM block, one memory sweep: :meth:`scaledl.profiling.probe.CalibrationProbe.
interleaved`), then for each reference workload (a compute-heavier BERT and a small,
overhead- and memory-bound ViT) ``STEPS`` training iterations (their 5% trimmed mean is the
sample's label) and one instrumented iteration (per-layer forward + backward, summed per layer
type). From the time series it reports:

* **slow phases**: runs of consecutive cycles whose reference label is more than
  ``SLOW_THRESHOLD`` above the quiet host (its 5th percentile): count, median and longest
  duration in seconds;
* **one-sidedness**: the lower and upper spread of log labels around their median (p50 - p5
  vs p95 - p50): noise that only adds time has a short lower tail;
* **explained variation**: R^2 of an ordinary least-squares fit (scikit-learn) of the log label,
  and of each layer type's log time, on the log probe ratios (GEMM, memory sweep), with the
  fitted exponents (the model of :mod:`scaledl.profiling.drift`, fitted on time instead of on
  repeats).

Nothing else may run meanwhile. Run: ``python benchmarks/bench_drift.py [--minutes 20]``; writes
``benchmarks/results/drift.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

RESULT = Path(__file__).resolve().parent / "results" / "drift.json"
#: Label iterations per reference workload per cycle.
STEPS = 8
#: A cycle whose label is this much above the quiet host is in a slow phase.
SLOW_THRESHOLD = 0.05
#: The reference workloads (quick-preset-sized, world size 1, training).
REFERENCES = {
    "bert_compute": {
        "family": "bert", "hidden_size": 256, "num_layers": 2, "num_heads": 8,
        "intermediate_size": 1024, "seq_len": 128, "batch_size": 4, "vocab_size": 2048,
        "dataset_size": 32,
    },
    "vit_small": {
        "family": "vit", "hidden_size": 64, "num_layers": 1, "num_heads": 2,
        "intermediate_size": 128, "image_size": 32, "patch_size": 8, "batch_size": 8,
        "num_labels": 100, "dataset_size": 64,
    },
}  # fmt: skip


def _sessions():
    import torch

    from scaledl.profiling.session import Session
    from scaledl.workloads.spec import Workload

    settings = {"warmup_steps": 3, "instrumented_steps": 1, "layer_stride": 1, "seed": 0}
    device = torch.device("cpu")
    out = {}
    for name, spec in REFERENCES.items():
        session = Session(Workload.parse(spec, source=name), settings, device)
        session.warmup()
        out[name] = session
    return out


def _layer_types(session) -> dict[int, str]:
    from scaledl.graph.layer_graph import build_layer_graph

    layers = build_layer_graph(session.workload).layers
    return dict(zip(layers["layer_index"], layers["layer_type"], strict=True))


def sample(minutes: float) -> pd.DataFrame:
    """The time series: one row per cycle and reference workload.

    Returns:
        Columns ``t_s`` (seconds since start), ``workload``, ``label_ms``, ``gemm_ms``,
        ``memory_ms`` and ``<layer type>_ms`` (forward + backward of that type, one
        instrumented iteration).
    """
    import torch

    from scaledl.profiling.affinity import pin_local_rank
    from scaledl.profiling.probe import CalibrationProbe
    from scaledl.profiling.stopping import label_statistic

    os.environ.setdefault("LOCAL_RANK", "0")
    pin_local_rank(0, 1)
    device = torch.device("cpu")
    probe = CalibrationProbe(device, repeats=1)
    probe.run()
    sessions = _sessions()
    types = {name: _layer_types(s) for name, s in sessions.items()}
    rows, started = [], time.perf_counter()
    while time.perf_counter() - started < minutes * 60:
        gemm_ms, memory_ms = probe.interleaved()
        for name, session in sessions.items():
            steps = []
            for _ in range(STEPS):
                t0 = time.perf_counter()
                session.iteration(session.batch)
                steps.append((time.perf_counter() - t0) * 1e3)
            layers = pd.DataFrame(session.instrumented()["layers"])
            layers["layer_type"] = layers["layer_index"].map(types[name])
            per_type = layers.groupby("layer_type")[["forward_ms", "backward_ms"]].sum().sum(axis=1)
            rows.append(
                {
                    "t_s": time.perf_counter() - started,
                    "workload": name,
                    "label_ms": label_statistic(steps),
                    "gemm_ms": gemm_ms,
                    "memory_ms": memory_ms,
                    **{f"{k}_ms": float(v) for k, v in per_type.items()},
                }
            )
    return pd.DataFrame(rows)


def slow_phases(t_s: np.ndarray, ratio: np.ndarray) -> dict:
    """Runs of consecutive samples with ``ratio > 1 + SLOW_THRESHOLD``: count and durations.

    Args:
        t_s: sample times, shape (n,), increasing.
        ratio: label / quiet label, shape (n,).

    Returns:
        ``{"count", "median_s", "longest_s", "share_of_time"}``; a phase lasts from its first
        slow sample to the first quiet one after it.
    """
    slow = ratio > 1.0 + SLOW_THRESHOLD
    durations, start = [], None
    for i, is_slow in enumerate(slow):
        if is_slow and start is None:
            start = t_s[i - 1] if i else t_s[0]
        if not is_slow and start is not None:
            durations.append(t_s[i] - start)
            start = None
    if start is not None:
        durations.append(t_s[-1] - start)
    return {
        "count": len(durations),
        "median_s": float(np.median(durations)) if durations else 0.0,
        "longest_s": float(max(durations)) if durations else 0.0,
        "share_of_time": float(slow.mean()),
    }


def explained(y: np.ndarray, x: np.ndarray) -> dict:
    """OLS of ``log y`` on the log probe ratios: R^2 and exponents (scikit-learn)."""
    from sklearn.linear_model import LinearRegression

    fit = LinearRegression().fit(x, np.log(y))
    return {
        "r2": float(fit.score(x, np.log(y))),
        "gemm_exponent": float(fit.coef_[0]),
        "memory_exponent": float(fit.coef_[1]),
    }


def analyse(series: pd.DataFrame) -> dict:
    """The figures of the module docstring, per reference workload."""
    out = {}
    for name, g in series.groupby("workload"):
        g = g.sort_values("t_s")
        label = g["label_ms"].to_numpy()
        quiet = np.quantile(label, 0.05)
        x = np.column_stack(
            [np.log(g["gemm_ms"] / g["gemm_ms"].quantile(0.05)),
             np.log(g["memory_ms"] / g["memory_ms"].quantile(0.05))]
        )  # fmt: skip
        logs = np.log(label)
        p5, p50, p95 = np.percentile(logs, [5, 50, 95])
        per_type = {
            c[: -len("_ms")]: explained(g[c].to_numpy(), x)
            for c in g.columns
            if c.endswith("_ms") and c not in ("label_ms", "gemm_ms", "memory_ms")
            and g[c].gt(0).all()
        }  # fmt: skip
        out[name] = {
            "samples": len(g),
            "quiet_label_ms": float(quiet),
            "label_ratio_p50": float(np.median(label) / quiet),
            "label_ratio_p95": float(np.quantile(label, 0.95) / quiet),
            "label_ratio_max": float(label.max() / quiet),
            "slow_phases": slow_phases(g["t_s"].to_numpy(), label / quiet),
            "lower_spread_log": float(p50 - p5),
            "upper_spread_log": float(p95 - p50),
            "noise_only_adds_time": bool(p95 - p50 > 1.5 * (p50 - p5)),
            "probe_gemm_ratio_p95": float(np.exp(np.quantile(x[:, 0], 0.95))),
            "probe_memory_ratio_p95": float(np.exp(np.quantile(x[:, 1], 0.95))),
            "explained_by_probes": explained(label, x),
            "explained_by_probes_per_layer_type": per_type,
        }
    return out


def cycle_seconds(series: pd.DataFrame) -> float:
    """Mean seconds of one cycle (probe block + every reference workload)."""
    return float(series["t_s"].max() / series.groupby("workload").size().max())


def characterise(minutes: float, result_path: Path = RESULT) -> dict:
    """Sample for ``minutes``, analyse, write ``result_path``; returns the result."""
    started = datetime.now(UTC)
    series = sample(minutes)
    result = {
        "benchmark": "drift",
        "date": started.isoformat(timespec="seconds"),
        "minutes": minutes,
        "cycle_s": cycle_seconds(series),
        "references": REFERENCES,
        "workloads": analyse(series),
    }
    result_path.parent.mkdir(parents=True, exist_ok=True)
    result_path.write_text(json.dumps(result, indent=2) + "\n")
    series.to_csv(result_path.with_suffix(".series.csv"), index=False)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    figures = characterise(args.minutes, args.out)
    print(json.dumps(figures["workloads"], indent=2))
