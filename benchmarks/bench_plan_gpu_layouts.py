"""Benchmark of the GPU layout planner: GPT-2 Large over 1-8 H100s, every Megatron-LM layout.

The GPU predictor (``data/predictors/scaledl-gpu``, registered by ``make run``'s
``gpu_predictor`` asset) plans NeuSight's GPT-2 Large training config
(``data/imported/neusight/configs/gpt2_large-train.json``, imported by ``make run``) at 1,024
tokens on ``NVIDIA H100 80GB HBM3`` over world sizes 1-8 x per-replica batch sizes 1, 2, 4, 8,
16 x every valid layout of the default space without sharding (tp 1/2/4/8, pp 1/2/4,
micro-batches 1/2/4/8, GPipe and 1F1B; the sharded ones are left out by the planner on a GPU),
each composed by Megatron-LM's recipe (:mod:`scaledl.prediction.gpu_layouts`), with its memory
per stage and 90% intervals. Timed in a fresh process after loading the predictor: the first
plan (``cold``: the config read, one rank's layers predicted per micro-batch and split) and a
second one (``warm``, the target); run twice (``--runs``), the slower warm time judged.

Run: ``python benchmarks/bench_plan_gpu_layouts.py``; writes
``benchmarks/results/plan_gpu_layouts.json``.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
from pathlib import Path

from common import DATA, write_result

TARGET_S = 5.0
GPU = "cuda:NVIDIA H100 80GB HBM3"
ARGS = {
    "dataset_size": 100_000,
    "epochs": 1.0,
    "world_sizes": list(range(1, 9)),
    "batch_sizes": [1, 2, 4, 8, 16],
    "price_per_device_hour": 2.5,
    "coverage": 0.9,
}
_FRESH = """
import time
import scaledl
from scaledl.planning import LayoutSpace
predictor = scaledl.load_predictor({predictor!r})
times = []
for _ in range(2):
    started = time.perf_counter()
    plan = scaledl.plan(predictor, {model!r}, layouts=LayoutSpace(), **{args!r})
    times.append(time.perf_counter() - started)
best = plan.best_per_world_size
print(times[0], times[1], len(plan.table), int(plan.table["pareto"].sum()),
      int(plan.table["fits_memory"].sum()), best["world_size"].nunique(),
      ",".join(sorted(plan.table["layout_recipe"].unique())),
      ",".join(best.sort_values("world_size")["layout"]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--predictor", type=Path, default=DATA / "predictors" / "scaledl-gpu")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    config = DATA / "imported" / "neusight" / "configs" / "gpt2_large-train.json"
    for path in (args.predictor, config):
        if not path.exists():
            raise SystemExit(f"{path}: not found: run `make run` first")
    model = {"family": "hf", "config_path": str(config), "seq_len": 1024, "mode": "train",
             "backend": "nccl", "device_name": GPU}  # fmt: skip
    code = _FRESH.format(predictor=str(args.predictor), model=model, args=ARGS)
    runs = []
    for _ in range(args.runs):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)  # fmt: skip
        *numbers, recipe, fastest = out.stdout.split()
        cold, warm, n, front, fits, sizes = (float(v) for v in numbers)
        runs.append({"cold_s": round(cold, 3), "warm_s": round(warm, 3)})
    slowest = max(r["warm_s"] for r in runs)
    write_result("plan_gpu_layouts", {
        "benchmark": "planner_gpu_layouts",
        "host": platform.node(),
        "predictor": str(args.predictor),
        "model": "gpt2_large (NeuSight config), seq_len 1024, train",
        "device_name": GPU,
        "layout_recipe": recipe,
        "n_candidates": int(n),
        "runs": runs,
        "plan_seconds_warm_max": slowest,
        "target_seconds": TARGET_S,
        "within_target": slowest <= TARGET_S,
        "pareto_front_size": int(front),
        "fitting_candidates": int(fits),
        "world_sizes_with_a_best_layout": int(sizes),
        "fastest_layout_per_world_size": fastest.split(","),
    })  # fmt: skip


if __name__ == "__main__":
    main()
