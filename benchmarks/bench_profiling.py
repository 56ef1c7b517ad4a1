"""Benchmark of profiling: throughput, instrumentation overhead and label repeat CV.

Profiles the first ``N`` workloads of the quick preset's D-optimal design (both world sizes)
into a temporary directory with a fresh ``torchrun`` launch per world size, and reports
workloads per minute (wall time, imports included), the median instrumentation overhead
(instrumented iteration / label iteration - 1; target <= 3%) and the median repeat coefficient
of variation of the label iterations (target <= 3%), and the same two figures over the full
``data/profiles`` of the last ``make run`` when present.

Run: ``python benchmarks/bench_profiling.py [N]``; writes ``benchmarks/results/profiling.json``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RESULT = Path(__file__).resolve().parent / "results" / "profiling.json"


def summarise(runs: pd.DataFrame) -> dict:
    ok = runs[runs["status"] == "ok"]
    return {
        "workloads_ok": int(len(ok)),
        "median_instrumentation_overhead": round(float(ok["instrumentation_overhead"].median()), 4),
        "median_iteration_cv": round(float(ok["iteration_cv"].median()), 4),
    }


def main() -> None:
    from scaledl.design import generate_design, load_preset
    from scaledl.profiling.launch import ProfileSettings, profile_workloads
    from scaledl.profiling.store import consolidate
    from scaledl.workloads.device import local_backend, local_device_name
    from scaledl.workloads.spec import Workload

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    preset = load_preset("quick")
    design = generate_design(
        preset,
        preset["design"]["n_workloads"],
        device_name=local_device_name(),
        backend=local_backend(),
    )
    rows = design.table.sort_values("world_size").groupby("world_size").head(n // 2)
    workloads = [
        Workload.parse({k: v for k, v in r.items() if k in Workload.model_fields})
        for r in rows.to_dict("records")
    ]
    settings = ProfileSettings(
        **{k: preset["profiling"][k] for k in ("warmup_steps", "instrumented_steps", "timeout_s")}
    )
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        summary = profile_workloads(workloads, Path(tmp), settings, progress=False)
        wall = time.perf_counter() - started
        runs = consolidate(Path(tmp))["runs"]
    result = {
        "benchmark": "profiling",
        "workloads": len(workloads),
        "failed": summary.failed,
        "wall_seconds": round(wall, 2),
        "workloads_per_minute": round(60 * len(workloads) / wall, 2),
        **summarise(runs),
        "targets": {"instrumentation_overhead": 0.03, "iteration_cv": 0.03},
    }
    last = ROOT / "data" / "profiles" / "runs.parquet"
    if last.exists():
        result["last_make_run"] = summarise(pd.read_parquet(last))
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
