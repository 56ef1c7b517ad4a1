"""Benchmark of the layout planner: 10,000+ layout candidates planned warm (target 5 s).

A BERT of 8 blocks, 8 heads, width 256 is planned over world sizes 1-64 x 4 batch sizes per
data-parallel replica x every valid layout of the default space (tp 1/2/4/8, pp 1/2/4/8,
micro-batches 1/2/4/8, GPipe and 1F1B, no sharding / ZeRO-1 / ZeRO-2 / FSDP): each candidate
predicted by the layout composition (layer-wise models on the sharded shapes, collectives,
pipeline replay), with its memory per stage, 90% intervals, the Pareto front and the deadline
pick. Timed in a fresh process after loading the predictor: the first plan (``cold``) and a
second one (``warm``, the target); the whole is run twice (``--runs``) and the slower warm
time is judged. The result names the layout recipe that composed the candidates
(``layout_recipe``: a layout calibration's label when the predictor has one for its device,
``scaledl fit-layouts``, else ``current``).

Needs a registered predictor with an interval calibration (``make run``; it reads
``data/predictors/scaledl`` under ``SCALEDL_DATA_DIR``), or ``--predictor PATH``. Run:
``python benchmarks/bench_plan_layouts.py``; writes ``benchmarks/results/plan_layouts.json``.
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
RESULT = Path(__file__).resolve().parent / "results" / "plan_layouts.json"
TARGET_S = 5.0
TARGET_CANDIDATES = 10_000
MODEL = {
    "family": "bert",
    "hidden_size": 256,
    "num_layers": 8,
    "num_heads": 8,
    "intermediate_size": 1024,
    "vocab_size": 2048,
    "seq_len": 128,
}
ARGS = {
    "dataset_size": 100_000,
    "epochs": 3,
    "world_sizes": list(range(1, 65)),
    "batch_sizes": [8, 16, 32, 64],
    "price_per_device_hour": 1.0,
    "device_memory_gb": 16.0,
    "deadline_h": 1.0,
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
    plan = scaledl.plan(predictor, {model!r}, layouts=LayoutSpace(tp_sizes=(1, 2, 4, 8),
                        pp_sizes=(1, 2, 4, 8)), **{args!r})
    times.append(time.perf_counter() - started)
best = plan.best_per_world_size
print(times[0], times[1], len(plan.table), int(plan.table["pareto"].sum()),
      int(plan.table["fits_memory"].sum()), best["world_size"].nunique(),
      ",".join(sorted(plan.table["layout_recipe"].unique())))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--predictor", type=Path, default=DATA / "predictors" / "scaledl")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    predictor = args.predictor
    if not (predictor / "latest").exists() and not (predictor / "manifest.json").exists():
        raise SystemExit(f"{predictor}: no predictor: run `make run` first")
    code = _FRESH.format(predictor=str(predictor), model=MODEL, args=ARGS)
    runs = []
    for _ in range(args.runs):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)  # fmt: skip
        *numbers, recipe = out.stdout.split()
        cold, warm, n, front, fits, sizes = (float(v) for v in numbers)
        runs.append({"cold_s": round(cold, 3), "warm_s": round(warm, 3)})
    slowest = max(r["warm_s"] for r in runs)
    result = {
        "benchmark": "planner_layouts",
        "host": platform.node(),
        "predictor": str(predictor),
        "layout_recipe": recipe,
        "n_candidates": int(n),
        "runs": runs,
        "plan_seconds_warm_max": slowest,
        "target_seconds": TARGET_S,
        "target_candidates": TARGET_CANDIDATES,
        "within_target": slowest <= TARGET_S and n >= TARGET_CANDIDATES,
        "pareto_front_size": int(front),
        "fitting_candidates": int(fits),
        "world_sizes_with_a_best_layout": int(sizes),
    }
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
