"""History: the ``scaledl_v1`` GPU column, the kernel-aware recipe before issue 25b.

Until issue 52 the product's GPU evaluation (:func:`scaledl.evaluation.gpu.evaluate_gpu`)
fitted, beside ``scaledl``, the recipe it replaced: operator models on the device's absolute
specs (``device_features="absolute"``: log2 of its peak, bandwidth, SMs, L2, clock and machine
balance) where ScaleDL's see the device only relative to itself, and the training devices'
correction applied to GPUs never trained on. The committed ``docs/results/metrics.json``
(section ``gpu``) holds that column as the product wrote it then; this script reproduces it
through the evaluation's ``baselines`` setting, on the same folds as ``scaledl``.

Run (the inputs of ``make run``'s GPU evaluation; fits every fold, tens of minutes)::

    PYTHONPATH=. python benchmarks/history/gpu_v1.py --out /tmp/gpu_v1.json

Imports ``scaledl``; nothing in ``scaledl`` imports it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scaledl.evaluation.gpu import GpuEvaluationConfig, evaluate_gpu
from scaledl.layout import DataLayout, neusight_peer_root, vidur_network_root

#: The column's name in the metrics.
V1 = "scaledl_v1"
#: The kernel-aware recipe before issue 25b: device-absolute operator features (ScaleDL's are
#: device-relative), the training devices' correction applied to GPUs never trained on.
V1_PARAMS = {
    "unseen_device_correction": "training_devices",
    "operator_params": {"device_features": "absolute"},
}


def v1_config(config: GpuEvaluationConfig) -> GpuEvaluationConfig:
    """``config`` with the ``scaledl_v1`` column added to its baselines.

    Args:
        config: the GPU evaluation's settings.

    Returns:
        A copy whose ``baselines`` also hold :data:`V1` with :data:`V1_PARAMS`.
    """
    return GpuEvaluationConfig(**{**vars(config), "baselines": {**config.baselines, V1: V1_PARAMS}})


def main(argv: list[str] | None = None) -> int:
    """Evaluate the GPU protocols with the ``scaledl_v1`` column; write the ``gpu`` block."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--profiles", type=Path, help="validated imported GPU profiles")
    parser.add_argument("--parallel-labels", type=Path, help="the import's parallel_labels")
    parser.add_argument("--out", type=Path, required=True, help="the gpu block JSON to write")
    parser.add_argument("--n-jobs", type=int, default=-1, help="joblib processes of the folds")
    args = parser.parse_args(argv)
    data_layout = DataLayout.from_env()
    labels = args.parallel_labels or data_layout.imported_parallel_labels()
    config = v1_config(
        GpuEvaluationConfig(
            parallel_labels=labels if labels.is_file() else None,
            vidur_root=vidur_network_root(),
            peer_root=neusight_peer_root(),
            n_jobs=args.n_jobs,
        )
    )
    metrics, _ = evaluate_gpu(args.profiles or data_layout.imported_validated_dir(), config)
    args.out.write_text(json.dumps(metrics, indent=2, default=str) + "\n")
    for protocol in ("leave_one_model_out", "leave_one_gpu_out"):
        means = (metrics.get(protocol) or {}).get("mean_over_gpus", {})
        print(f"{protocol}: {V1} {means.get(V1)}, scaledl {means.get('scaledl')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
