"""Benchmark of the predictor: batch prediction, bundle loading and training time per method.

* loading the latest bundle under ``data/predictors/scaledl`` in a fresh process, imports
  included (``python -c "import scaledl; scaledl.load_predictor(...)"``, target 3 s; the
  median of five processes, :func:`common.fresh_load_seconds`), and after
  the imports; loading verifies and deserialises the bundle, the GNN module is built (PyTorch
  Geometric imported) at the first prediction;
* the first prediction of one workload in a fresh process (import + load + predict: what a
  ``scaledl predict`` user waits for);
* predicting 10,000 workloads in one batch (target 5 s on 2 cores): 50 architectures of the
  five families x 200 (batch size, world size, dataset size) combinations, in a fresh process
  right after loading: cold (the GNN built and each of the 50 architectures traced on the meta
  device first) and warm (architecture templates cached, as in a long-lived service);
* fitting each method of the evaluation on the validated profiles in ``data/validated``.

Needs ``make run`` first (it reads ``data/validated`` and ``data/predictors`` under
``SCALEDL_DATA_DIR``, default ``data/``). Run: ``python benchmarks/bench_predict.py``; writes
``benchmarks/results/predict.json``.
"""

from __future__ import annotations

import itertools
import platform
import time
from pathlib import Path

import numpy as np
from common import DATA, fresh_json, fresh_load_seconds, timed_twice, write_result

N_WORKLOADS = 10_000
PREDICT_TARGET_S = 5.0
LOAD_TARGET_S = 3.0
# Timed in a fresh interpreter: the imports are part of what a new process pays.
_FRESH_FIRST_PREDICTION = """
import json, time
started = time.perf_counter()
import scaledl
predictor = scaledl.load_predictor({latest!r})
predictor.predict([{row!r}])
print(json.dumps({{"seconds": time.perf_counter() - started}}))
"""


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

    latest = str(DATA / "predictors" / "scaledl")
    if not (Path(latest) / "latest").exists() or not (DATA / "validated").exists():
        raise SystemExit(f"{latest}/latest or {DATA / 'validated'} missing: run `make run` first")
    load_s = fresh_load_seconds(latest)["median"]
    started = time.perf_counter()
    predictor = scaledl.load_predictor(latest)
    load_warm_s = time.perf_counter() - started
    row = sweep(predictor.devices[0])[0]
    first_s = fresh_json(_FRESH_FIRST_PREDICTION.format(latest=latest, row=row))["seconds"]
    here = str(Path(__file__).resolve().parent)
    batch = timed_twice(
        latest,
        "predictor.predict(rows)",
        setup=f"import sys\nsys.path.insert(0, {here!r})\nfrom bench_predict import sweep\n"
        "rows = sweep(predictor.devices[0])",
        check='assert len(out) == len(rows) and out["iteration_s"].notna().all()',
    )
    predict_s, predict_warm_s = batch["cold_s"], batch["warm_s"]

    data = load_profile_data(DATA / "validated")
    val_ids = stratified_val_ids(data, 0.15, 0)
    fit_s = {}
    for name in METHOD_NAMES:
        fit_s[name] = round(make_method(name).fit(data, val_ids).fit_seconds_, 2)

    result = {
        "benchmark": "predictor",
        "host": platform.node(),
        "n_workloads": N_WORKLOADS,
        "predict_seconds_cold": round(predict_s, 3),
        "predict_seconds_warm": round(predict_warm_s, 3),
        "predict_target_seconds": PREDICT_TARGET_S,
        "predict_within_target_cold": predict_s <= PREDICT_TARGET_S,
        "predict_within_target_warm": predict_warm_s <= PREDICT_TARGET_S,
        "bundle_load_seconds_fresh_process": round(load_s, 3),
        "bundle_load_seconds_after_imports": round(load_warm_s, 3),
        "bundle_load_target_seconds": LOAD_TARGET_S,
        "bundle_load_within_target": load_s <= LOAD_TARGET_S,
        "first_prediction_seconds_fresh_process": round(first_s, 3),
        "training_workloads": len(data.ids),
        "fit_seconds": fit_s,
    }
    write_result("predict", result)


if __name__ == "__main__":
    main()
