"""Run every benchmark (``make bench``); each writes its JSON under ``benchmarks/results/``.

When all succeed, the benchmarks page's block is rendered from those files
(``scaledl docs render --block benchmarks``); a failed benchmark leaves the block as it was.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BENCHMARKS = (
    "bench_design.py",
    "bench_profiling.py",
    "bench_predict.py",
    "bench_load.py",
    "bench_predict_gpu.py",
    "bench_plan.py",
    "bench_plan_layouts.py",
    "bench_plan_gpu_layouts.py",
    "bench_llm_plan.py",
    "bench_scale.py",
)

if __name__ == "__main__":
    failed = []
    for name in BENCHMARKS:
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, str(HERE / name)]).returncode:
            failed.append(name)
    if failed:
        sys.exit(f"benchmarks failed: {failed}")
    render = ["-m", "scaledl.cli", "docs", "render", "--block", "benchmarks", "--root", str(ROOT)]
    subprocess.run([sys.executable, *render], check=True)
