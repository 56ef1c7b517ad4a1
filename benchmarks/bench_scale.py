"""Benchmark of prediction at planner scale: 200,000 distinct workloads, a 262,144-candidate plan.

Workloads are drawn from the quick preset's space: each row is a random feasible candidate of
``scaledl/presets/quick.yaml`` (its architecture, batch and world size) with its own dataset
size, all rows distinct (no two share a ``workload_id``). Every figure comes from a fresh
interpreter, which reports its own peak resident memory (``getrusage``, ``ru_maxrss``):

* ``predict_warm``: ``Predictor.predict`` of a 200,000-row DataFrame in one process, twice;
  the first call (``cold``) builds the GNN and reads or traces the architectures, the second
  (``warm``, the target: 20 s) is what a long-lived planner or scheduler service pays. Peak
  memory target 2 GB.
* ``predict_streamed``: ``scaledl predict --workloads W.csv --out P.parquet`` over the same
  rows as a CSV file, a fresh process (imports and bundle load included).
* ``plan``: ``scaledl plan`` of the BERT of ``bench_plan.py`` over world sizes 1-512 x batch
  sizes 1-512 = 262,144 candidates (90% intervals, Pareto front, deadline pick, table written
  to parquet), a fresh process; targets 30 s and 2 GB.
* ``first_prediction``: a fresh process importing ScaleDL, loading the bundle and predicting
  1,000 distinct workloads (target 5 s), with the trace cache beside the bundle filled by the
  runs above (``cache_warm``) and with an empty cache (``cache_empty``: every architecture
  traced, transformers imported).

Each figure is measured ``--repeats`` times (default 2); the result keeps every run and the
median. Needs a registered predictor with a calibration (``make run`` first, or
``--predictor PATH``). Run: ``python benchmarks/bench_scale.py``; writes
``benchmarks/results/scale.json``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

from common import DATA, PLAN_MODEL, fresh_json, require_predictor, timed_twice, write_result

N_ROWS = 200_000
N_FIRST = 1_000
TARGETS = {"predict_warm_s": 20.0, "plan_s": 30.0, "first_prediction_s": 5.0, "peak_gb": 2.0}
# Every child prints its figures and its own peak RSS (Linux: KiB) as one JSON line.
_FIRST = """
import time
started = time.perf_counter()
import json, resource
import pandas as pd
import scaledl
predictor = scaledl.load_predictor({predictor!r})
out = predictor.predict(pd.read_csv({csv!r}, keep_default_na=False, na_values=[""]))
seconds = time.perf_counter() - started
assert len(out) == {n}
print(json.dumps({{"seconds": seconds,
                  "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}}))
"""
_COMMAND = """
import json, resource, subprocess, sys, time
started = time.perf_counter()
run = subprocess.run(sys.argv[1:], capture_output=True, text=True)
elapsed = time.perf_counter() - started
if run.returncode:
    sys.exit(run.stdout[-2000:] + run.stderr[-2000:])
print(json.dumps({"seconds": elapsed,
                  "peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "stdout_tail": run.stdout[-600:]}))
"""


def preset_rows(device: str, n: int, seed: int):
    """``n`` distinct workloads of the quick preset's space (module docstring), a DataFrame."""
    import numpy as np
    import pandas as pd

    from scaledl.design import load_preset
    from scaledl.design.space import candidate_workloads

    candidates = candidate_workloads(load_preset("quick"), device)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(candidates), n)
    records = [c.model_dump(mode="json", exclude={"device_name", "backend"}) for c in candidates]
    frame = pd.DataFrame([records[i] for i in pick])
    frame["dataset_size"] = rng.choice(10**9, size=n, replace=False) + 1
    return frame


def scaledl_command() -> str:
    return str(Path(sys.executable).with_name("scaledl"))


def summary(runs: list[dict], key: str) -> dict:
    values = [r[key] for r in runs]
    return {"runs": [round(v, 3) for v in values], "median": round(statistics.median(values), 3)}


def gb(runs: list[dict]) -> float:
    return round(max(r["peak_kib"] for r in runs) * 1024 / 1e9, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--predictor", type=Path, default=DATA / "predictors" / "scaledl")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    predictor = str(args.predictor)
    require_predictor(args.predictor)
    import scaledl

    device = scaledl.load_predictor(args.predictor).devices[0]
    with tempfile.TemporaryDirectory(prefix="scaledl-bench-scale-") as tmp:
        csv, first_csv = str(Path(tmp) / "workloads.csv"), str(Path(tmp) / "first.csv")
        frame = preset_rows(device, N_ROWS, 0)
        frame.to_csv(csv, index=False)
        preset_rows(device, N_FIRST, 1).to_csv(first_csv, index=False)
        spec_columns = [c for c in frame.columns if c != "dataset_size"]
        distinct = int(len(frame.drop_duplicates(spec_columns)))
        del frame
        warm = [
            timed_twice(
                predictor,
                "predictor.predict(frame, coverage=0.9)",
                setup=f"frame = pd.read_csv({csv!r}, keep_default_na=False, na_values=[''])",
                check="assert len(out) == len(frame)\n"
                'assert out["workload_id"].nunique() == len(frame)',
            )
            for _ in range(args.repeats)
        ]
        out = str(Path(tmp) / "predictions.parquet")
        streamed = [
            fresh_json(_COMMAND, scaledl_command(), "predict", "--predictor", predictor,
                  "--workloads", csv, "--out", out, "--coverage", "0.9")
            for _ in range(args.repeats)
        ]  # fmt: skip
        plan_args = ["plan", "--predictor", predictor, "--world-sizes", "1-512",
                     "--batch-sizes", "1-512", "--dataset-size", "100000", "--epochs", "3",
                     "--price-per-device-hour", "1", "--device-memory-gb", "16",
                     "--deadline-h", "1", "--out", str(Path(tmp) / "plan.parquet"),
                     "--family", PLAN_MODEL["family"]]  # fmt: skip
        for key, value in PLAN_MODEL.items():
            plan_args += [] if key == "family" else ["--set", f"{key}={value}"]
        plans = [fresh_json(_COMMAND, scaledl_command(), *plan_args) for _ in range(args.repeats)]
        first = _FIRST.format(predictor=predictor, csv=first_csv, n=N_FIRST)
        first_warm = [fresh_json(first) for _ in range(args.repeats)]
        empty = str(Path(tmp) / "empty-trace-cache")
        first_cold = [
            fresh_json(first, env={"SCALEDL_TRACE_CACHE": f"{empty}{i}"})
            for i in range(args.repeats)
        ]
    predict_warm = summary(warm, "warm_s")
    plan_s = summary(plans, "seconds")
    first_s = summary(first_warm, "seconds")
    result = {
        "benchmark": "prediction at planner scale",
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "predictor": predictor,
        "n_rows": N_ROWS,
        "distinct_specs_less_dataset_size": distinct,
        "predict_seconds_cold": summary(warm, "cold_s"),
        "predict_seconds_warm": predict_warm,
        "predict_peak_gb": gb(warm),
        "predict_streamed_seconds": summary(streamed, "seconds"),
        "predict_streamed_peak_gb": gb(streamed),
        "plan_candidates": 512 * 512,
        "plan_seconds": plan_s,
        "plan_peak_gb": gb(plans),
        "plan_output_tail": plans[-1]["stdout_tail"],
        "first_prediction_rows": N_FIRST,
        "first_prediction_seconds_cache_warm": first_s,
        "first_prediction_seconds_cache_empty": summary(first_cold, "seconds"),
        "first_prediction_peak_gb": gb(first_warm),
        "targets": TARGETS,
        "within_target": {
            "predict_warm": predict_warm["median"] <= TARGETS["predict_warm_s"]
            and gb(warm) <= TARGETS["peak_gb"],
            "plan": plan_s["median"] <= TARGETS["plan_s"] and gb(plans) <= TARGETS["peak_gb"],
            "first_prediction": first_s["median"] <= TARGETS["first_prediction_s"],
        },
    }
    write_result("scale", result)


if __name__ == "__main__":
    main()
