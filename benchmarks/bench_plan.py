"""Benchmark of the resource planner: 500 candidate configurations planned (target 5 s).

A BERT model of the quick preset's size range is planned over 100 world sizes x 5 per-rank
batch sizes = 500 candidates (predicted with 90% intervals, memory fit, Pareto front, deadline
pick), in a fresh process right after loading the predictor: the first plan (``cold``: the GNN
built, PyTorch Geometric imported, the architecture traced on the meta device) and a second one
(``warm``). The target is met when the cold plan takes at most 5 s on the 2-core machine.

Needs a registered predictor with an interval calibration: ``make run`` first (it reads
``data/predictors/scaledl`` under ``SCALEDL_DATA_DIR``, default ``data/``), or
``--predictor PATH``. Run: ``python benchmarks/bench_plan.py``; writes
``benchmarks/results/plan.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SCALEDL_DATA_DIR") or ROOT / "data")
RESULT = Path(__file__).resolve().parent / "results" / "plan.json"
TARGET_S = 5.0
MODEL = {
    "family": "bert",
    "hidden_size": 128,
    "num_layers": 2,
    "num_heads": 4,
    "intermediate_size": 512,
    "vocab_size": 2048,
    "seq_len": 128,
}
ARGS = {
    "dataset_size": 100_000,
    "epochs": 3,
    "world_sizes": list(range(1, 101)),
    "batch_sizes": [1, 2, 4, 8, 16],
    "price_per_device_hour": 1.0,
    "device_memory_gb": 16.0,
    "deadline_h": 1.0,
    "coverage": 0.9,
}
# Timed in a fresh interpreter, after loading: what a `scaledl plan` user waits for.
_FRESH = """
import time
import scaledl
predictor = scaledl.load_predictor({predictor!r})
times = []
for _ in range(2):
    started = time.perf_counter()
    plan = scaledl.plan(predictor, {model!r}, **{args!r})
    times.append(time.perf_counter() - started)
assert len(plan.table) == 500, len(plan.table)
print(times[0], times[1], int(plan.table["pareto"].sum()), int(plan.table["in_domain"].sum()))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--predictor", type=Path, default=DATA / "predictors" / "scaledl")
    predictor = parser.parse_args().predictor
    if not (predictor / "latest").exists() and not (predictor / "manifest.json").exists():
        raise SystemExit(f"{predictor}: no predictor: run `make run` first")
    code = _FRESH.format(predictor=str(predictor), model=MODEL, args=ARGS)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    cold, warm, front, in_domain = (float(v) for v in run.stdout.split())
    result = {
        "benchmark": "planner",
        "host": platform.node(),
        "predictor": str(predictor),
        "n_candidates": 500,
        "plan_seconds_cold": round(cold, 3),
        "plan_seconds_warm": round(warm, 3),
        "target_seconds": TARGET_S,
        "within_target_cold": cold <= TARGET_S,
        "pareto_front_size": int(front),
        "in_domain_candidates": int(in_domain),
    }
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
