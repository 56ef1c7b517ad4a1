"""Benchmark of the device-aware (GPU) predictor: 10,000 GPU workloads in one batch (target 5 s).

The kernel-aware :class:`~scaledl.models.kernel.KernelGraphMethod` is fitted on the imported
and validated NeuSight profiles (``data/imported/validated/neusight``, written by ``make run``'s
``imported_profiles`` asset, or ``--profiles DIR``), then predicts 10,000 workloads: 50
architectures (the five families, GPU-sized: hidden 512-2048, 4-24 layers) x 200 settings
(batch size 1-16 x world size 1-8 x five GPUs of the device table, two of them never trained
on: H200, L40S). Measured cold (each architecture traced on the meta device first: layer graph
and operators) and warm (templates cached, as in a long-lived service).

Run: ``python benchmarks/bench_predict_gpu.py``; writes ``benchmarks/results/predict_gpu.json``.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import time
from pathlib import Path

import numpy as np
from common import DATA, write_result

PROFILES = DATA / "imported" / "validated" / "neusight"
N_WORKLOADS = 10_000
GPUS = (
    "cuda:NVIDIA H100 80GB HBM3",
    "cuda:NVIDIA A100 80GB PCIe",
    "cuda:Tesla V100-PCIE-32GB",
    "cuda:NVIDIA H200",
    "cuda:NVIDIA L40S",
)


def sweep() -> list[dict]:
    """10,000 workload dicts: 50 architectures x 200 (batch, world size, GPU) settings."""
    rng = np.random.default_rng(0)
    archs = []
    for family in ("bert", "vit", "t5", "llama", "deit"):
        for _ in range(10):
            hidden = int(rng.choice([512, 1024, 2048]))
            arch = {
                "family": family,
                "hidden_size": hidden,
                "num_layers": int(rng.choice([4, 12, 24])),
                "num_heads": hidden // 64,
                "intermediate_size": 4 * hidden,
                "mode": str(rng.choice(["train", "infer"])),
            }
            if family in ("vit", "deit"):
                arch.update(image_size=224, patch_size=16, num_labels=1000)
            else:
                arch.update(seq_len=int(rng.choice([256, 512, 1024])), vocab_size=32000,
                            max_positions=1024)  # fmt: skip
            archs.append(arch)
    settings = list(itertools.product([1, 2, 4, 8, 16], [1, 2, 4, 8, 8, 1, 2, 4], GPUS))
    rows = [
        {**arch, "batch_size": b, "world_size": ws, "device_name": gpu, "backend": "nccl"}
        for arch in archs
        for b, ws, gpu in settings[:200]
    ]
    return rows[:N_WORKLOADS]


def main() -> None:
    from scaledl.models.data import load_profile_data
    from scaledl.models.kernel import KernelGraphMethod
    from scaledl.workloads.spec import Workload

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=Path, default=PROFILES)
    args = parser.parse_args()
    if not args.profiles.is_dir():
        raise SystemExit(f"{args.profiles} missing: run `make run` first (imported_profiles)")
    data = load_profile_data(args.profiles)
    started = time.perf_counter()
    method = KernelGraphMethod().fit(data, [])
    fit_s = time.perf_counter() - started
    workloads = [Workload.parse(r, source=f"sweep row {i + 1}") for i, r in enumerate(sweep())]
    started = time.perf_counter()
    out = method.predict(workloads)
    cold_s = time.perf_counter() - started
    started = time.perf_counter()
    method.predict(workloads)
    warm_s = time.perf_counter() - started
    if len(out) != len(workloads) or not np.isfinite(out["iteration_s"]).all():
        raise RuntimeError("prediction of the sweep returned missing or non-finite rows")
    result = {
        "benchmark": "GPU predictor (kernel-aware ScaleDL)",
        "host": platform.node(),
        "n_workloads": len(workloads),
        "architectures": 50,
        "gpus": list(GPUS),
        "unseen_gpu_share": float((~out["device_seen"]).mean()),
        "predict_seconds_cold": round(cold_s, 3),
        "predict_seconds_warm": round(warm_s, 3),
        "predict_target_seconds": 5.0,
        "predict_within_target_warm": warm_s <= 5.0,
        "fit_seconds": round(fit_s, 2),
        "training_workloads": len(data.ids),
    }
    write_result("predict_gpu", result)


if __name__ == "__main__":
    main()
