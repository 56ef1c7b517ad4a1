"""Benchmark of the predictor: batch prediction, bundle loading and training time per method.

* predicting 10,000 workloads in one batch (target 5 s on 2 cores): 50 architectures of the
  five families x 200 (batch size, world size, dataset size) combinations;
  measured cold (each of the 50 architectures traced on the meta device first) and warm
  (architecture templates cached, as in a long-lived service);
* loading the latest bundle under ``data/predictors/scaledl`` (target 3 s): in a fresh process
  with imports (torch-geometric and skops' import alone take seconds) and after the imports;
* fitting each method of the evaluation on the validated profiles in ``data/validated``.

Needs ``make run`` first (it reads ``data/validated`` and ``data/predictors``). Run:
``python benchmarks/bench_predict.py``; writes ``benchmarks/results/predict.json``.
"""

from __future__ import annotations

import itertools
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
RESULT = Path(__file__).resolve().parent / "results" / "predict.json"
N_WORKLOADS = 10_000


def sweep(device_name: str) -> list[dict]:
    """10,000 workload dicts: 50 architectures x 200 scale settings."""
    rng = np.random.default_rng(0)
    archs = []
    for family in ("bert", "vit", "t5", "llama", "deit"):
        for _ in range(10):
            hidden = int(rng.choice([64, 128, 256]))
            arch = {
                "family": family,
                "hidden_size": hidden,
                "num_layers": int(rng.choice([1, 2, 4])),
                "num_heads": hidden // 32,
                "intermediate_size": hidden * int(rng.choice([2, 4])),
            }
            if family in ("vit", "deit"):
                arch.update(image_size=int(rng.choice([32, 64])), patch_size=8, num_labels=100)
            else:
                arch.update(
                    seq_len=int(rng.choice([32, 64, 128])), vocab_size=2048, max_positions=256
                )
            archs.append(arch)
    scales = list(
        itertools.product(
            [1, 2, 4, 8, 16],
            [1, 2, 4, 8, 16],
            [256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304],
        )
    )
    rows = []
    for arch in archs:
        for batch, world, dataset in scales[:200]:
            rows.append(
                {
                    **arch,
                    "batch_size": batch,
                    "world_size": world,
                    "dataset_size": dataset,
                    "device_name": device_name,
                }
            )
    return rows[:N_WORKLOADS]


def main() -> None:
    import scaledl
    from scaledl.models.data import load_profile_data
    from scaledl.models.methods import METHOD_NAMES, make_method
    from scaledl.models.train import stratified_val_ids

    latest = DATA / "predictors" / "scaledl"
    if not (latest / "latest").exists() or not (DATA / "validated").exists():
        raise SystemExit(f"{latest}/latest or {DATA / 'validated'} missing: run `make run` first")
    code = (
        "import time; t=time.perf_counter(); import scaledl; "
        f"scaledl.load_predictor({str(latest)!r}); print(time.perf_counter()-t)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    load_s = float(run.stdout)
    started = time.perf_counter()
    predictor = scaledl.load_predictor(latest)
    load_warm_s = time.perf_counter() - started
    rows = sweep(predictor.devices[0])
    started = time.perf_counter()
    out = predictor.predict(rows)
    predict_s = time.perf_counter() - started  # cold: 50 architectures traced on meta first
    started = time.perf_counter()
    predictor.predict(rows)
    predict_warm_s = time.perf_counter() - started  # architectures cached
    if len(out) != len(rows) or not np.isfinite(out["iteration_s"]).all():
        raise RuntimeError("prediction of the sweep returned missing or non-finite rows")

    data = load_profile_data(DATA / "validated")
    val_ids = stratified_val_ids(data, 0.15, 0)
    fit_s = {}
    for name in METHOD_NAMES:
        fit_s[name] = round(make_method(name).fit(data, val_ids).fit_seconds_, 2)

    result = {
        "benchmark": "predictor",
        "host": platform.node(),
        "n_workloads": len(rows),
        "predict_seconds_cold": round(predict_s, 3),
        "predict_seconds_warm": round(predict_warm_s, 3),
        "predict_target_seconds": 5.0,
        "predict_within_target_warm": predict_warm_s <= 5.0,
        "bundle_load_seconds_fresh_process": round(load_s, 3),
        "bundle_load_seconds_after_imports": round(load_warm_s, 3),
        "bundle_load_target_seconds": 3.0,
        "bundle_load_within_target": load_warm_s <= 3.0,
        "training_workloads": len(data.ids),
        "fit_seconds": fit_s,
    }
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
