"""Synthetic operator-timed GPU profiles (two GPUs, three tiny GPT-2 models) for GPU tests.

Operators are timed at 1/0.6 of their roofline (+4 us) forward and 1/0.5 backward; labels are
the instrumented sum times a per-device bias. Shared by the GPU evaluation and the GPU
predictor bundle tests.
"""

import json
from pathlib import Path

import pandas as pd

from scaledl.graph.layer_graph import build_layer_graph
from scaledl.graph.operators import DESCRIPTOR_COLUMNS, aten_descriptors
from scaledl.models.data import profile_data_from_tables
from scaledl.models.device_columns import device_columns
from scaledl.models.operators import roofline_terms
from scaledl.workloads.spec import Workload

DEVICES = {"cuda:NVIDIA H100 80GB HBM3": 1.0, "cuda:Tesla V100-PCIE-32GB": 1.1}
TINY_GRID = ({"n_estimators": 20, "max_depth": 2, "learning_rate": 0.3, "min_samples_leaf": 2},)


def _configs(directory: Path) -> dict[str, Path]:
    paths = {}
    for name, (width, layers) in {"tiny_a": (32, 1), "tiny_b": (64, 2), "tiny_c": (48, 1)}.items():
        path = directory / f"{name}-any.json"
        path.write_text(json.dumps({"model_type": "gpt2", "n_embd": width, "n_layer": layers,
                                    "n_head": 2, "vocab_size": 64, "n_positions": 64,
                                    "bos_token_id": 0, "eos_token_id": 0}))  # fmt: skip
        paths[name] = path
    return paths


def _tables(directory: Path, biases: dict[str, float]) -> dict[str, pd.DataFrame]:
    """Operators timed at 1/0.6 of their roofline (+4 us); labels = instrumented x device bias."""
    rows = {k: [] for k in ("workloads", "runs", "layer_timings", "iteration_timings",
                            "operator_timings")}  # fmt: skip
    for path in _configs(directory).values():
        for device, bias in biases.items():
            for batch in (2, 4):
                for mode in ("train", "infer"):
                    w = Workload.parse({"family": "hf", "config_path": str(path), "seq_len": 32,
                                        "batch_size": batch, "mode": mode, "device_name": device,
                                        "backend": "nccl"})  # fmt: skip
                    _add(rows, w, bias)
    tables = {k: pd.DataFrame(v) for k, v in rows.items()}
    tables["epochs"] = pd.DataFrame(
        columns=["run_id", "workload_id", "rank", "epoch_s", "steps_per_epoch", "dataset_size"]
    )
    tables["allreduce_timings"] = pd.DataFrame(
        columns=[
            "run_id",
            "workload_id",
            "rank",
            "step",
            "bucket_index",
            "allreduce_bytes",
            "allreduce_ms",
        ]  # fmt: skip
    )
    return tables


def _add(rows: dict, w: Workload, bias: float) -> None:
    graph = build_layer_graph(w)
    ops = aten_descriptors(graph.operators).reset_index(drop=True)
    ops = pd.concat([ops, device_columns([w.device_name] * len(ops), ["fp32"] * len(ops))], axis=1)
    ops["forward_ms"] = roofline_terms(ops, "forward").roofline_ms / 0.6 + 0.004
    train = w.mode == "train"
    ops["backward_ms"] = (roofline_terms(ops, "backward").roofline_ms / 0.5 + 0.004) * train
    run = f"{w.workload_id}-syn"
    rows["workloads"].append(w.to_record())
    rows["runs"].append({"run_id": run, "workload_id": w.workload_id, "status": "ok",
                         "source": "synthetic"})  # fmt: skip
    per_layer = ops.groupby("layer_index")[["forward_ms", "backward_ms"]].sum()
    for layer in graph.layers.itertuples(index=False):
        if layer.layer_index in per_layer.index:
            rows["layer_timings"].append({
                "run_id": run, "workload_id": w.workload_id, "rank": 0, "step": 0,
                "layer_index": layer.layer_index, "layer_name": layer.layer_name,
                "layer_type": layer.layer_type, **per_layer.loc[layer.layer_index].to_dict(),
            })  # fmt: skip
    total = float(per_layer.to_numpy().sum())
    for phase, ms in (("instrumented", total), ("label", total * bias)):
        rows["iteration_timings"].append({"run_id": run, "workload_id": w.workload_id,
                                          "rank": 0, "step": 0, "phase": phase,
                                          "iteration_ms": ms, "optimizer_ms": None})  # fmt: skip
    keep = ["layer_index", *DESCRIPTOR_COLUMNS, "forward_ms", "backward_ms"]
    for op in ops[keep].to_dict("records"):
        rows["operator_timings"].append({"run_id": run, "workload_id": w.workload_id, **op})


def write_synthetic(directory: Path, biases: dict[str, float] | None = None):
    """Write the synthetic tables as parquet into ``directory``; return it and their data.

    ``biases``: label over instrumented sum per device (default :data:`DEVICES`).
    """
    tables = _tables(directory, DEVICES if biases is None else biases)
    for name, frame in tables.items():
        frame.to_parquet(directory / f"{name}.parquet", index=False)
    return directory, profile_data_from_tables(tables, source=str(directory))


def synthetic_layout(data, **layout) -> Workload:
    """The two-block synthetic model (tiny_b) on the H100, training, batch 4, as a layout.

    Args:
        data: :func:`write_synthetic`'s profile data.
        layout: workload fields to set (``tp_size``, ``pp_size``, ``dp_size``, ...); the
            default is ``world_size`` 2, ``dp_size`` 1.
    """
    w = next(w for w in data.workloads.values()
             if "tiny_b" in w.config_path and w.mode == "train"
             and w.device_name.endswith("NVIDIA H100 80GB HBM3") and w.batch_size == 4)  # fmt: skip
    return w.model_copy(update={"world_size": 2, "dp_size": 1, **layout})


def synthetic_layout_labels(data) -> pd.DataFrame:
    """NeuSight-style label rows of three 2-GPU layouts (dp2, tp2, pp2) of the synthetic model.

    Returns:
        Columns ``file``, ``strategy``, ``device_name``, ``model``, ``global_batch_size``,
        ``iteration_ms`` (1.0) and ``workload`` (the layout workload's record as JSON).
    """
    rows = []
    for suffix, layout in (("dp2", {"dp_size": 2, "batch_size": 2}), ("tp2", {"tp_size": 2}),
                           ("pp2_1", {"pp_size": 2})):  # fmt: skip
        w = synthetic_layout(data, **layout)
        rows.append({"file": f"/x/label/G/tiny_b-train-32-4-{suffix}.json", "strategy": suffix[:2],
                     "device_name": w.device_name, "model": "tiny_b", "global_batch_size": 4,
                     "iteration_ms": 1.0, "workload": json.dumps(w.to_record())})  # fmt: skip
    return pd.DataFrame(rows)


def fitted_synthetic(directory: Path):
    """:func:`write_synthetic` into ``directory`` and the GPU predictor the evaluation fits on it.

    Returns:
        ``(data, method)``: the profile data and the fitted
        :class:`~scaledl.models.kernel.KernelGraphMethod` (tiny operator grid).
    """
    from scaledl.evaluation.gpu import GpuEvaluationConfig, fit_scaledl

    _, data = write_synthetic(directory)
    config = GpuEvaluationConfig(operator_params={"grid": TINY_GRID, "min_rows": 5})
    return data, fit_scaledl(data, config)
