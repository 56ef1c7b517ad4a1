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
import platform
from pathlib import Path

from common import DATA, PLAN_MODEL, require_predictor, timed_twice, write_result

TARGET_S = 5.0
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--predictor", type=Path, default=DATA / "predictors" / "scaledl")
    predictor = parser.parse_args().predictor
    require_predictor(predictor)
    # Timed in a fresh interpreter, after loading: what a `scaledl plan` user waits for.
    run = timed_twice(
        predictor,
        f"scaledl.plan(predictor, {PLAN_MODEL!r}, **{ARGS!r})",
        check="assert len(out.table) == 500, len(out.table)",
        extra='{"front": int(out.table["pareto"].sum()), '
        '"in_domain": int(out.table["in_domain"].sum())}',
    )
    cold, warm = run["cold_s"], run["warm_s"]
    result = {
        "benchmark": "planner",
        "host": platform.node(),
        "predictor": str(predictor),
        "n_candidates": 500,
        "plan_seconds_cold": round(cold, 3),
        "plan_seconds_warm": round(warm, 3),
        "target_seconds": TARGET_S,
        "within_target_cold": cold <= TARGET_S,
        "pareto_front_size": run["front"],
        "in_domain_candidates": run["in_domain"],
    }
    write_result("plan", result)


if __name__ == "__main__":
    main()
