"""Cross-check of the LLM GEMM model on NeuSight's measured FP32 matmuls (other GPUs).

The GEMM model (:mod:`scaledl.models.llm_kernels`) is fitted on Vidur's fp16 A100/H100
profiles; NeuSight's traces (``external/neusight``) time every FP32 ``Linear`` and batched
matmul of BERT/GPT models on nine GPUs. This prints, per GPU, the median measured / predicted
ratio and the mean relative error of :func:`~scaledl.models.llm_kernels.kernel_model` at the
FP32 peak: a check of the transfer rule on GPUs without fp16 kernel data (figures in
``docs/llm_at_scale.md``). GPUs the device table gives no 16-bit peak (Tesla P4) are skipped.

Usage::

    python scripts/llm_kernels_neusight_check.py
"""

from __future__ import annotations

from scaledl.devices.specs import device_spec, resolve_gpu_name
from scaledl.external.neusight import load_neusight
from scaledl.models.llm_kernels import evaluate_gemm_table


def main() -> None:
    """Print the per-GPU table."""
    data = load_neusight()
    ops = data.operators[data.operators["op_class"] == "matmul"]
    ops = ops.merge(data.workloads[["workload_id", "gpu"]], on="workload_id")
    ops = ops.assign(
        gpu=ops["gpu"].map(lambda g: resolve_gpu_name(g.replace("_", " "))),
        m=(ops["batch"] * ops["m"]).astype(int),
        precision="fp32",
        time_ms=ops["forward_ms"],
    )
    served = {g for g in ops["gpu"].unique() if device_spec(g).peak_tflops.get("fp16", 0) > 0}
    table = evaluate_gemm_table(ops[ops["gpu"].isin(served)])
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
