"""A small, consistent profile dataset: 2 workloads (world size 1 and 2), 3 layers, 4 steps.

The validation tests' tables (:func:`make_profiles`), importable by name from every test, and
the rows of one ``ok`` profiler part (:func:`ok_records`, for ``store.write_part``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

LAYER_PARAMS = [100, 200, 300]  # 600 trainable parameters -> 2400 all-reduced bytes per step
WORKLOADS = {"w1": 1, "w2": 2}  # workload_id -> world_size
RUNS = {"r1": "w1", "r2": "w2"}
INSTRUMENTED_STEPS = (0, 1)
LABEL_STEPS = (2, 3)
ALLREDUCE_COLUMNS = [
    "run_id",
    "workload_id",
    "rank",
    "step",
    "bucket_index",
    "allreduce_bytes",
    "allreduce_ms",
]


def make_profiles(
    runs: dict[str, str] | None = None, workloads: dict[str, int] | None = None
) -> dict[str, pd.DataFrame]:
    """Return consistent, valid fp32 tables.

    ``runs`` maps run_id -> workload_id (default RUNS), ``workloads`` workload_id -> world_size
    (default WORKLOADS).
    """
    runs_of = RUNS if runs is None else runs
    ws_of = WORKLOADS if workloads is None else workloads
    workloads = pd.DataFrame(
        [
            {
                "workload_id": wid,
                "family": "bert",
                "hidden_size": 64,
                "num_layers": 2,
                "num_heads": 4,
                "intermediate_size": 256,
                "vocab_size": 1000,
                "image_size": None,
                "patch_size": None,
                "seq_len": 32,
                "batch_size": 4,
                "world_size": ws,
                "num_nodes": 1,
                "precision": "fp32",
                "mode": "train",
                "dataset_size": 256,
                "device_name": "cpu",
                "backend": "gloo",
            }
            for wid, ws in ws_of.items()
        ]
    )
    runs = pd.DataFrame(
        [
            {
                "run_id": run,
                "workload_id": wid,
                "status": "ok",
                "error": "",
                "host": "h0",
                "device_name": "cpu",
                "world_size": ws_of[wid],
                "torch_version": "2.5.0",
                "warmup_steps": 2,
                "instrumented_steps": len(INSTRUMENTED_STEPS),
                "measured_steps": len(LABEL_STEPS),
                "started_at": "2025-01-01T00:00:00+00:00",
                "finished_at": "2025-01-01T00:01:00+00:00",
                "instrumentation_overhead": -0.01,
                "iteration_cv": 0.02,
            }
            for run, wid in runs_of.items()
        ]
    )
    layers, allreduce, iterations, epochs = [], [], [], []
    for run, wid in runs_of.items():
        for rank in range(ws_of[wid]):
            ids = {"run_id": run, "workload_id": wid, "rank": rank}
            for step in INSTRUMENTED_STEPS:
                for index, params in enumerate(LAYER_PARAMS):
                    layers.append(
                        {
                            **ids,
                            "step": step,
                            "layer_index": index,
                            "layer_name": f"layer{index}",
                            "layer_type": "linear",
                            "forward_ms": 1.0,
                            "backward_ms": 2.0,
                            "fwd_flops": 1e6,
                            "bwd_flops": 2e6,
                            "params": params,
                            "input_bytes": 4096,
                            "output_bytes": 4096,
                        }
                    )
                if ws_of[wid] > 1:
                    for bucket in range(2):
                        allreduce.append(
                            {
                                **ids,
                                "step": step,
                                "bucket_index": bucket,
                                "allreduce_bytes": 4 * sum(LAYER_PARAMS) // 2,
                                "allreduce_ms": 0.5,
                            }
                        )
            for phase, steps in (("instrumented", INSTRUMENTED_STEPS), ("label", LABEL_STEPS)):
                for step in steps:
                    iterations.append(
                        {
                            **ids,
                            "step": step,
                            "phase": phase,
                            "iteration_ms": 12.0,
                            "forward_ms": 3.0,
                            "backward_ms": 6.0,
                            "optimizer_ms": 1.0,
                            "allreduce_ms": 1.0 if ws_of[wid] > 1 else 0.0,
                            "allreduce_bytes": 2400.0 if ws_of[wid] > 1 else 0.0,
                        }
                    )
            # A real epoch: ceil(256 / (4 x world size)) steps of 12 ms, plus 5% data loading.
            steps = math.ceil(256 / (4 * ws_of[wid]))
            epochs.append(
                {
                    **ids,
                    "epoch": 0,
                    "epoch_s": steps * 0.012 * 1.05,
                    "steps_per_epoch": steps,
                    "dataset_size": 256,
                }
            )
    return {
        "workloads": workloads,
        "runs": runs,
        "layer_timings": pd.DataFrame(layers),
        "allreduce_timings": pd.DataFrame(allreduce, columns=ALLREDUCE_COLUMNS).astype(
            {
                "rank": "int64",
                "step": "int64",
                "bucket_index": "int64",
                "allreduce_bytes": "int64",
                "allreduce_ms": "float64",
            }
        ),
        "iteration_timings": pd.DataFrame(iterations),
        "epochs": pd.DataFrame(epochs),
    }


def write_profiles(directory: Path, tables: dict[str, pd.DataFrame]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        frame.to_parquet(directory / f"{name}.parquet", index=False)
    return directory


def ok_records(workload) -> dict[str, list[dict]]:
    """Rows of an ``ok`` part of ``workload`` (5 layers, 2 instrumented and 2 label steps)."""
    layers = [
        {
            "rank": 0,
            "step": s,
            "layer_index": i,
            "layer_name": f"l{i}",
            "layer_type": "x",
            "forward_ms": 1.0 + i,
            "backward_ms": 2.0,
        }
        for s in (0, 1)
        for i in range(5)
    ]
    iterations = [
        {
            "rank": 0,
            "step": s,
            "phase": phase,
            "iteration_ms": ms,
            "forward_ms": 0.0,
            "backward_ms": 0.0,
            "optimizer_ms": 0.0,
            "allreduce_ms": 0.0,
            "allreduce_bytes": 0,
        }
        for phase, values in (("instrumented", (12.0, 12.0)), ("label", (9.0, 11.0)))
        for s, ms in enumerate(values)
    ]
    epoch = [{"rank": 0, "epoch": 0, "epoch_s": 0.05, "steps_per_epoch": 4}]
    return {"layers": layers, "iterations": iterations, "epoch": epoch}
