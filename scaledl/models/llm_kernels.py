"""Kernel times of a transformer's GEMMs, flash attention and memory-bound operators on one GPU.

Two :class:`KernelModel` implementations, both bound to one device of the device table
(:func:`scaledl.devices.specs.device_spec`) and both free of torch:

* :func:`roofline_kernel_model`: the analytical baseline, ``max(flops / peak, bytes /
  bandwidth)`` with the datasheet peaks (Williams et al. 2009), no overhead;
* :func:`kernel_model`: efficiencies fitted on real kernel measurements, Vidur's fp16 operator
  profiles of A100 and H100 (``external/vidur/compute/<gpu>/``, extracted from
  ``microsoft/vidur`` ``data/profiling/compute/<gpu>/<model>/mlp.csv`` by
  ``scripts/extract_vidur_kernels.py``: the QKV, attention-output, MLP-up and MLP-down GEMMs of
  eight models at tensor-parallel degrees 1-8 and 64-32,768 tokens; RMSNorm, activation and
  residual-add times).

**GEMM model** (``C[m, n] = A[m, k] B[k, n]``, ``flops = 2 m n k``, ``bytes = e (m k + k n + m
n)`` with ``e`` bytes per element)::

    t = t0 + max(flops / (peak * eff), bytes / (bandwidth * eff_mem))
    eff = e_max * m / (m + m_half) * n / (n + n_half) * k / (k + k_half)

``t0`` (launch and tail, seconds), ``e_max`` (the efficiency of a large GEMM), ``eff_mem`` (of
a memory-bound one) and the half-saturation sizes ``m_half, n_half, k_half`` (elements: small
dimensions leave tiles and SMs idle) are fitted per measured GPU by robust least squares on
log time (``scipy.optimize.least_squares``, soft-L1 loss, deterministic, well under a second).

**Transfer to other GPUs**: a GPU without kernel data (V100, H200, B200, GB200...) takes the
dimensionless efficiencies and sizes of the measured GPU closest to it in 16-bit tensor peak
(log scale: V100 and A100 take A100's fit, H100, H200 and Blackwell take H100's) and its own
datasheet peaks and memory bandwidth from the device table. Held-out errors of this rule on
Vidur's data (fit on one GPU, predict the other) are in :func:`evaluate_kernel_model` and
``docs/llm_at_scale.md``.

**Precisions** of :meth:`KernelModel.gemm_s`: ``fp16``/``bf16`` use their tensor peak, ``fp32``
the FP32 peak, ``fp8``, ``fp8_blockwise`` and ``mxfp8`` the dense FP8 peak with 1-byte operands,
``nvfp4`` the dense FP4 peak with half-byte operands, all at the fitted 16-bit efficiency (no
fp8 kernel data exists to fit; Transformer Engine's FP8 GEMMs are the same cuBLASLt tile
kernels). A low-precision GEMM also pays the cast of its activation operand ``A`` (read 2
bytes, write the narrow element per element of ``m k``) at the memory-bound rate; the weight's
cast is the caller's to count once per step. Which GEMMs run in FP8 is the composition's
choice (Transformer Engine / Megatron: the linear layers, forward and both backward GEMMs; the
attention core, embedding and output layer stay 16-bit).

**FP8 row-wise** (torchao's recipe, ``fp8_rowwise``) is composed per linear, not per GEMM: the
16-bit forward and backward GEMMs of a linear ``x[m, k] @ w[k, n]`` divided by torchao's
measured speedup of that linear's forward + backward (:meth:`FittedKernelModel.linear_speedup`,
:func:`fp8_rowwise_speedup`: H100, casts of activation and weight included;
``external/torchao/``). Its CUTLASS row-wise kernel and per-call casts make small linears
slower than bf16 (0.4-0.9x below 4,096 on any side) and large ones up to 1.7x faster.

**Flash attention** (:meth:`KernelModel.attention_s`): ``flops = 4 b h s_q s_kv' d`` with
``s_kv' = s_kv - s_q / 2`` when causal (queries aligned to the end of the keys), backward 2.5x
the forward's FLOPs (FlashAttention-2, Dao 2023: five GEMMs against two), at the efficiency::

    eff = e_dir * s_kv' / (s_kv' + kv_half_dir) * (c_causal if causal) * m / (m + m_half)

``e_dir``, ``kv_half_dir`` (per direction) and ``c_causal`` are fitted on published kernel
throughputs (``external/flash_attention/h100_hd128.csv``: FlashAttention-3 paper, Shah et al.
2024, H100 at head dimension 128, 512-16k tokens) of the cuDNN kernel, Transformer Engine's
fused attention that Megatron-LM and NeMo run; ``m = b h s_q`` takes the GEMM fit's ``m_half``.
The efficiencies are fractions of the 16-bit peak and carry over to every GPU (through its own
peak), as the GEMM efficiencies do. The ``kernel`` argument picks the kernel the job's framework
runs (:data:`~scaledl.workloads.training_job.ATTENTION_KERNELS`): on a GPU that takes the H100's
fit (Hopper, Blackwell) each kernel has its own fit on the same table (FlashAttention-2, PyTorch
SDPA's flash backend, reaches about 60% of cuDNN's throughput there: it predates Hopper's
asynchronous tensor-core instructions); on a GPU that takes the A100's fit every kernel runs at
the default kernel's fractions (FlashAttention-2 is the Ampere kernel, 50-73% of the A100 peak in
Dao 2023, about the cuDNN-on-H100 fractions) and ``flash_attention_3`` is refused (Hopper only).
``unfused`` (Megatron-LM before flash attention) materialises the scores: forward the batched
GEMMs ``Q K^T`` (``[b h s_q, s_kv, d]``) and ``A V`` (``[b h s_q, d, s_kv]``) of the GEMM model,
full even when causal (the mask is applied in the softmax), and per score element 9 bytes of
memory-bound work (scale-mask-softmax reads and writes 2 bytes each; attention dropout reads 2,
writes 2 and a 1-byte mask); backward four such GEMMs and 11 bytes per score (dropout 5,
softmax 6). Flash kernels' memory term: ``Q, K, V, O`` read or written once (backward: twice
that), the score matrix never leaves the chip. Vidur's own attention profiles are Git LFS
objects outside the snapshot this project can fetch; a public copy of its A100 Llama-2-7B
profile (vLLM paged-KV prefill, an inference kernel path) runs at 12-15% of peak and is not used
(figures in ``docs/llm_at_scale.md``).

**Memory-bound operators** (:meth:`KernelModel.memory_s`): ``t0_mem + bytes / (bandwidth *
eff_mem_op)``, fitted on Vidur's RMSNorm, SiLU-and-multiply and residual-add times.

Calls are cached per device (:func:`kernel_model`) and per argument tuple.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
from scipy.interpolate import RegularGridInterpolator
from scipy.optimize import least_squares, nnls

from scaledl.devices.specs import device_spec, gpu_architecture, resolve_gpu_name
from scaledl.io.safe import check_regular_file
from scaledl.layout import external_root
from scaledl.workloads.training_job import ATTENTION_KERNELS, PEAK_PRECISION, PRECISION_BYTES

#: Vidur's measured GPUs: profile folder -> the device table's name of that GPU (Vidur's A100
#: runs are DGX A100 80 GB nodes, its H100 runs DGX H100 nodes).
MEASURED_GPUS = {"a100": "NVIDIA A100-SXM4-80GB", "h100": "NVIDIA H100 80GB HBM3"}
#: GEMM precisions: precision -> (device-table peak column, bytes per element), from the job's
#: one table of each (:data:`~scaledl.workloads.training_job.PEAK_PRECISION`, ``PRECISION_BYTES``).
GEMM_PRECISIONS = {p: (PEAK_PRECISION[p], float(PRECISION_BYTES[p])) for p in PEAK_PRECISION}
#: Backward / forward compute of flash attention (FlashAttention-2: 5 GEMMs against 2).
ATTENTION_BACKWARD_FACTOR = 2.5
#: The attention kernel whose published throughputs set the flash-attention efficiency.
FLASH_KERNEL = "cudnn"
#: The materialised-scores attention (module docstring) and its bytes per score element.
UNFUSED_ATTENTION = "unfused"
UNFUSED_FORWARD_BYTES, UNFUSED_BACKWARD_BYTES = 9.0, 11.0
_GEMM_COLUMNS = ("m", "n", "k", "time_ms")
_ELEMENTWISE_COLUMNS = ("bytes", "time_ms")


def flash_attention_table_path() -> Path:
    """Published flash-attention throughputs (``<external>/flash_attention/h100_hd128.csv``)."""
    return external_root() / "flash_attention" / "h100_hd128.csv"


def fp8_rowwise_table_path() -> Path:
    """The FP8 row-wise linear speedups (``<external>/torchao/h100_fp8_rowwise_speedup.csv``)."""
    return external_root() / "torchao" / "h100_fp8_rowwise_speedup.csv"


def vidur_compute_root() -> Path:
    """Vidur's extracted kernel measurements (``<external>/vidur/compute``)."""
    return external_root() / "vidur" / "compute"


class KernelModel(Protocol):
    """Kernel times on one device, in seconds; forward only unless said."""

    def gemm_s(self, m: int, n: int, k: int, precision: str) -> float:
        """One GEMM ``C[m, n] = A[m, k] B[k, n]`` in ``precision``."""
        ...

    def attention_s(
        self,
        batch: int,
        heads: int,
        seq_q: int,
        seq_kv: int,
        head_dim: int,
        causal: bool,
        backward: bool,
        kernel: str = FLASH_KERNEL,
    ) -> float:
        """One flash-attention call (16-bit) of ``kernel``, forward or backward."""
        ...

    def memory_s(self, bytes_moved: float) -> float:
        """A memory-bound kernel moving ``bytes_moved`` bytes (read + written)."""
        ...

    def linear_speedup(self, m: int, k: int, n: int, precision: str) -> float | None:
        """A whole linear's (forward + backward) measured speedup over its 16-bit GEMMs.

        ``None`` where the precision's GEMMs are composed one by one (every precision but a
        linear-level recipe, ``fp8_rowwise``, on a model with its measurements).
        """
        ...


@dataclass(frozen=True)
class GemmFit:
    """Fitted efficiencies of one measured GPU (module docstring for the formula).

    Attributes:
        t0_s: constant per GEMM (launch, tail), seconds.
        e_max: compute efficiency of a large GEMM (fraction of the tensor peak).
        eff_mem: memory efficiency of a memory-bound GEMM (fraction of the bandwidth).
        m_half, n_half, k_half: half-saturation sizes (elements).
        mem_t0_s: constant per memory-bound operator, seconds.
        mem_eff: memory efficiency of the memory-bound operators.
        source: the measured GPU (``a100``/``h100``) and how many measurements.
    """

    t0_s: float
    e_max: float
    eff_mem: float
    m_half: float
    n_half: float
    k_half: float
    mem_t0_s: float
    mem_eff: float
    source: str


def _sigmoid(x: np.ndarray | float) -> np.ndarray | float:
    return 1.0 / (1.0 + np.exp(-x))


def _compute_efficiency(fit: GemmFit, m, n, k):
    return fit.e_max * m / (m + fit.m_half) * n / (n + fit.n_half) * k / (k + fit.k_half)


def gemm_time_s(
    fit: GemmFit, m, n, k, peak_flops: float, bandwidth: float, element_bytes: float = 2.0
):
    """The fitted GEMM time (module docstring), vectorised over ``m, n, k``.

    Args:
        fit: the efficiencies.
        m: rows of ``A`` and ``C`` (scalar or array, > 0).
        n: columns of ``B`` and ``C``.
        k: the reduced dimension.
        peak_flops: the device's peak FLOP/s of the precision.
        bandwidth: the device's memory bandwidth, bytes/s.
        element_bytes: bytes per operand element.

    Returns:
        Seconds, the broadcast shape of ``m, n, k``.
    """
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    flops = 2.0 * m * n * k
    moved = element_bytes * (m * k + k * n + m * n)
    compute = flops / (peak_flops * _compute_efficiency(fit, m, n, k))
    return fit.t0_s + np.maximum(compute, moved / (bandwidth * fit.eff_mem))


def _read_table(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    try:
        table = pd.read_csv(check_regular_file(path))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read CSV ({exc})") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}")
    for col in columns:
        values = pd.to_numeric(table[col], errors="coerce")
        bad = ~(np.isfinite(values) & (values > 0))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(
                f"{path}: row {row + 1}, column {col!r}: expected a finite number > 0, "
                f"got {table[col].iloc[row]!r}"
            )
        table[col] = values.astype(float)
    return table


@cache
def load_vidur_gemms(gpu: str, root: Path | None = None) -> pd.DataFrame:
    """Vidur's measured GEMMs of one GPU, one row per distinct shape (median over models).

    Args:
        gpu: ``a100`` or ``h100`` (a key of :data:`MEASURED_GPUS`).
        root: the ``compute`` folder (default :func:`vidur_compute_root`).

    Returns:
        Columns ``m, n, k, time_ms``.

    Raises:
        FileNotFoundError: the file is missing.
        ValueError: an unknown GPU, or a bad file (names the file, row and column).
    """
    if gpu not in MEASURED_GPUS:
        raise ValueError(f"gpu must be one of {sorted(MEASURED_GPUS)}; got {gpu!r}")
    path = Path(root or vidur_compute_root()) / gpu / "gemm.csv"
    table = _read_table(path, _GEMM_COLUMNS)
    return table.groupby(["m", "n", "k"], as_index=False)["time_ms"].median()


@cache
def load_vidur_elementwise(gpu: str, root: Path | None = None) -> pd.DataFrame:
    """Vidur's measured memory-bound operators of one GPU (columns ``op, bytes, time_ms``).

    Raises:
        FileNotFoundError: the file is missing.
        ValueError: an unknown GPU, or a bad file (names the file, row and column).
    """
    if gpu not in MEASURED_GPUS:
        raise ValueError(f"gpu must be one of {sorted(MEASURED_GPUS)}; got {gpu!r}")
    path = Path(root or vidur_compute_root()) / gpu / "elementwise.csv"
    return _read_table(path, _ELEMENTWISE_COLUMNS)


def _peaks(device: str) -> tuple[float, float]:
    spec = device_spec(device)
    return spec.peak_flops_per_s("fp16"), spec.mem_bandwidth_gbps * 1e9


def fit_gemm_efficiency(gemms: pd.DataFrame, device: str) -> tuple[float, ...]:
    """Fit ``(t0_s, e_max, eff_mem, m_half, n_half, k_half)`` on measured fp16 GEMMs.

    Args:
        gemms: columns ``m, n, k, time_ms``.
        device: the device-table name of the GPU that measured them (its fp16 peak and
            bandwidth).

    Returns:
        The six parameters.
    """
    peak, bandwidth = _peaks(device)
    m, n, k = (gemms[c].to_numpy(float) for c in ("m", "n", "k"))
    log_t = np.log(gemms["time_ms"].to_numpy(float) * 1e-3)

    def unpack(theta: np.ndarray) -> GemmFit:
        return GemmFit(
            t0_s=math.exp(theta[0]) * 1e-6,
            e_max=float(_sigmoid(theta[1])),
            eff_mem=float(_sigmoid(theta[2])),
            m_half=math.exp(theta[3]),
            n_half=math.exp(theta[4]),
            k_half=math.exp(theta[5]),
            mem_t0_s=0.0,
            mem_eff=1.0,
            source="",
        )

    def residuals(theta: np.ndarray) -> np.ndarray:
        return np.log(gemm_time_s(unpack(theta), m, n, k, peak, bandwidth)) - log_t

    start = np.array([math.log(5.0), 1.0, 1.0, math.log(64), math.log(64), math.log(64)])
    bounds = ([-5, -5, -5, 0, 0, 0], [5, 8, 8, 12, 12, 12])
    theta = least_squares(
        residuals, start, bounds=bounds, loss="soft_l1", f_scale=0.1, method="trf"
    ).x
    fit = unpack(theta)
    return fit.t0_s, fit.e_max, fit.eff_mem, fit.m_half, fit.n_half, fit.k_half


def fit_memory_efficiency(elementwise: pd.DataFrame, device: str) -> tuple[float, float]:
    """Fit ``t = t0 + bytes / (bandwidth * eff)`` on measured memory-bound operators.

    Weighted by ``1 / t`` (relative error), non-negative least squares.

    Returns:
        ``(t0_s, eff)``.
    """
    _, bandwidth = _peaks(device)
    t = elementwise["time_ms"].to_numpy(float) * 1e-3
    x = elementwise["bytes"].to_numpy(float) / bandwidth
    design = np.column_stack([np.ones_like(x), x]) / t[:, None]
    (t0, inv_eff), _ = nnls(design, np.ones_like(t))
    return float(t0), float(1.0 / inv_eff)


@cache
def measured_fit(gpu: str) -> GemmFit:
    """The fitted efficiencies of a Vidur GPU (``a100``/``h100``), cached per process."""
    device = MEASURED_GPUS[gpu]
    gemms = load_vidur_gemms(gpu)
    t0, e_max, eff_mem, m_half, n_half, k_half = fit_gemm_efficiency(gemms, device)
    mem_t0, mem_eff = fit_memory_efficiency(load_vidur_elementwise(gpu), device)
    return GemmFit(
        t0, e_max, eff_mem, m_half, n_half, k_half, mem_t0, mem_eff,
        source=f"Vidur {gpu} ({len(gemms)} GEMM shapes)",
    )  # fmt: skip


def reference_gpu(device: str) -> str:
    """The measured GPU whose fit a device takes: closest 16-bit tensor peak (log scale).

    Args:
        device: a device-table name or alias.

    Returns:
        ``a100`` or ``h100``.
    """
    spec = device_spec(resolve_gpu_name(device))
    peak = spec.peak_flops_per_s("fp16")
    distance = {
        gpu: abs(math.log(peak / device_spec(name).peak_flops_per_s("fp16")))
        for gpu, name in MEASURED_GPUS.items()
    }
    return min(sorted(distance), key=distance.__getitem__)


def _attention_work(batch, heads, seq_q, seq_kv, head_dim, causal):
    """``(flops, rows, kv_effective)`` of a forward flash attention (module docstring)."""
    kv_eff = seq_kv - seq_q / 2.0 if causal else float(seq_kv)
    if kv_eff <= 0:
        raise ValueError(
            f"causal attention needs seq_kv >= seq_q / 2; got seq_q={seq_q}, seq_kv={seq_kv}"
        )
    rows = float(batch) * heads * seq_q
    return 4.0 * rows * kv_eff * head_dim, rows, kv_eff


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0; got {value!r}")


@dataclass(frozen=True)
class FlashFit:
    """Flash-attention efficiency (module docstring for the formula).

    Attributes:
        forward_e, forward_kv_half: forward ceiling and half-saturation key length.
        backward_e, backward_kv_half: the same for the backward.
        causal_factor: efficiency lost to the causal mask's diagonal blocks (multiplier).
        source: what it was fitted on.
    """

    forward_e: float
    forward_kv_half: float
    backward_e: float
    backward_kv_half: float
    causal_factor: float
    source: str


#: The efficiencies of :func:`roofline_kernel_model`: the peak.
PEAK_FLASH = FlashFit(1.0, 0.0, 1.0, 0.0, 1.0, source="datasheet peaks")


@cache
def load_flash_table(path: Path | None = None) -> pd.DataFrame:
    """Published flash-attention throughputs (``external/flash_attention/h100_hd128.csv``).

    Returns:
        Columns ``kernel, direction, causal, seq_len, batch, heads, head_dim, tflops`` and
        ``kv_eff`` (``seq_len``, halved with the causal mask).

    Raises:
        FileNotFoundError: the file is missing.
        ValueError: a bad file (names the file, row, column and value).
    """
    path = Path(path or flash_attention_table_path())
    table = _read_table(path, ("seq_len", "batch", "heads", "head_dim", "tflops"))
    allowed = {"kernel": None, "direction": {"forward", "backward"}, "causal": {True, False}}
    for col, values in allowed.items():
        if col not in table:
            raise ValueError(f"{path}: missing column {col!r}")
        bad = table[col].isna() if values is None else ~table[col].isin(values)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(
                f"{path}: row {row + 1}, column {col!r}: unexpected value {table[col].iloc[row]!r}"
            )
    table["causal"] = table["causal"].astype(bool)
    return table.assign(kv_eff=np.where(table["causal"], table["seq_len"] / 2, table["seq_len"]))


def _flash_predict(theta: np.ndarray, rows: pd.DataFrame) -> np.ndarray:
    """Efficiency of each row given ``(fwd_e, fwd_half, bwd_e, bwd_half, causal)`` logits."""
    fwd_e, bwd_e, causal = (float(_sigmoid(theta[i])) for i in (0, 2, 4))
    halves = np.exp(theta[[1, 3]])
    backward = (rows["direction"] == "backward").to_numpy()
    e = np.where(backward, bwd_e, fwd_e)
    half = np.where(backward, halves[1], halves[0])
    kv = rows["kv_eff"].to_numpy(float)
    return e * kv / (kv + half) * np.where(rows["causal"].to_numpy(bool), causal, 1.0)


def fit_flash_efficiency(table: pd.DataFrame, kernel: str = FLASH_KERNEL) -> FlashFit:
    """Fit :class:`FlashFit` on one kernel's published throughputs (least squares on log).

    Args:
        table: :func:`load_flash_table` rows (H100 at head dimension 128).
        kernel: the kernel (``cudnn``, ``flash_attention_3``, ``flash_attention_2``).

    Returns:
        The fit; the H100 peak (989.4 TFLOP/s, the device table) converts throughput into
        efficiency.

    Raises:
        ValueError: the kernel has no forward or no backward rows.
    """
    rows = table[table["kernel"] == kernel]
    if set(rows["direction"]) != {"forward", "backward"}:
        raise ValueError(
            f"flash-attention table: kernel {kernel!r} needs forward and backward rows "
            f"(kernels: {sorted(table['kernel'].unique())})"
        )
    peak = device_spec(MEASURED_GPUS["h100"]).peak_flops_per_s("bf16") / 1e12
    measured = np.log(rows["tflops"].to_numpy(float) / peak)
    start = np.array([0.5, math.log(512), 0.5, math.log(512), 2.0])
    theta = least_squares(
        lambda th: np.log(_flash_predict(th, rows)) - measured, start, method="lm"
    ).x
    fwd_e, bwd_e, causal = (float(_sigmoid(theta[i])) for i in (0, 2, 4))
    return FlashFit(
        fwd_e, math.exp(theta[1]), bwd_e, math.exp(theta[3]), causal,
        source=f"{kernel} on H100, hd 128 ({len(rows)} published points)",
    )  # fmt: skip


@cache
def _fp8_rowwise_interpolator(path: Path | None = None) -> RegularGridInterpolator:
    """``log(speedup)`` over ``(log2 m, log2 k, log2 n)`` of torchao's table (a full grid)."""
    path = Path(path or fp8_rowwise_table_path())
    table = _read_table(path, ("m", "k", "n", "speedup_vs_bf16"))
    axes = [np.unique(table[c].to_numpy()) for c in ("m", "k", "n")]
    if (
        len(table) != len(axes[0]) * len(axes[1]) * len(axes[2])
        or table.duplicated(["m", "k", "n"]).any()
    ):
        raise ValueError(f"{path}: rows must be the full m x k x n grid, each cell once")
    values = (
        table.set_index(["m", "k", "n"])["speedup_vs_bf16"]
        .reindex(pd.MultiIndex.from_product(axes, names=["m", "k", "n"]))
        .to_numpy()
        .reshape([len(a) for a in axes])
    )
    return RegularGridInterpolator([np.log2(a) for a in axes], np.log(values))


def fp8_rowwise_speedup(m: int, k: int, n: int, path: Path | None = None) -> float:
    """Speedup over bf16 of a linear's forward + backward with torchao's FP8 row-wise scaling.

    Interpolated linearly in ``log2`` sizes and log speedup on torchao's published H100 grid
    (``external/torchao/``: ``LayerNorm -> Linear -> Sigmoid``, casts included), each size
    clamped to the grid's 1,024-32,768. The ratio is taken to hold on other GPUs (their own
    16-bit GEMM times divided by it): no other GPU's row-wise table is published.

    Args:
        m: tokens of the forward's input ``x[m, k]`` (> 0).
        k: input features (> 0).
        n: output features (> 0).
        path: the table (default :func:`fp8_rowwise_table_path`).

    Returns:
        The speedup (bf16 time / row-wise time; < 1 is slower).

    Raises:
        ValueError: a size <= 0, or a bad table (names the file, row and column).
        FileNotFoundError: the table is missing.
    """
    _check_positive(m=m, k=k, n=n)
    interpolate = _fp8_rowwise_interpolator(Path(path) if path else None)
    point = [
        float(np.clip(np.log2(v), axis[0], axis[-1]))
        for v, axis in zip((m, k, n), interpolate.grid, strict=True)
    ]
    return float(np.exp(interpolate(point)[0]))


@cache
def flash_fit(kernel: str = FLASH_KERNEL) -> FlashFit:
    """The fitted flash-attention efficiency of a kernel, cached per process."""
    return fit_flash_efficiency(load_flash_table(), kernel)


def evaluate_attention_model() -> pd.DataFrame:
    """Error of the flash-attention efficiency on the published throughputs.

    Per kernel: in-sample and leave-one-out (each point predicted by a fit without it) mean
    relative error of the throughput, and each kernel's median throughput relative to
    :data:`FLASH_KERNEL`'s fit.

    Returns:
        One row per kernel with forward and backward rows: ``kernel``, ``n``,
        ``mre_in_sample``, ``mre_leave_one_out``, ``median_vs_default``.
    """
    table = load_flash_table()
    default = flash_fit()
    out = []
    for kernel, rows in table.groupby("kernel", sort=True):
        if set(rows["direction"]) != {"forward", "backward"}:
            continue
        fit = fit_flash_efficiency(table, str(kernel))
        measured = rows["tflops"].to_numpy(float)
        loo = []
        for i in range(len(rows)):
            rest = table.drop(index=rows.index[i])
            one = fit_flash_efficiency(rest, str(kernel))
            loo.append(_flash_throughput(one, rows.iloc[[i]])[0])
        out.append(
            {
                "kernel": kernel,
                "n": len(rows),
                "mre_in_sample": _mre(_flash_throughput(fit, rows), measured),
                "mre_leave_one_out": _mre(np.array(loo), measured),
                "median_vs_default": float(np.median(measured / _flash_throughput(default, rows))),
            }
        )
    return pd.DataFrame(out)


def _flash_throughput(fit: FlashFit, rows: pd.DataFrame) -> np.ndarray:
    """Predicted TFLOP/s of published rows (H100 peak)."""
    theta = np.array(
        [
            _logit(fit.forward_e),
            math.log(fit.forward_kv_half),
            _logit(fit.backward_e),
            math.log(fit.backward_kv_half),
            _logit(fit.causal_factor),
        ]
    )
    peak = device_spec(MEASURED_GPUS["h100"]).peak_flops_per_s("bf16") / 1e12
    return peak * _flash_predict(theta, rows)


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


@dataclass(frozen=True)
class FittedKernelModel:
    """Kernel times from fitted efficiencies and one device's peaks (module docstring).

    Attributes:
        device: the device-table name.
        fit: the efficiencies (the device's own or its :func:`reference_gpu`'s).
        flash: the flash-attention efficiency of :data:`FLASH_KERNEL`.
        peak_flops: ``{precision: FLOP/s}`` the device supports.
        bandwidth: memory bandwidth, bytes/s.
        kernel_flash: ``(kernel, fit)`` of the kernels with their own fit on this device
            (empty: every kernel runs at ``flash``).
        runs_flash_attention_3: whether the device is a Hopper GPU (FlashAttention-3 is
            written for Hopper's instructions: neither Ampere nor Blackwell runs it).
    """

    device: str
    fit: GemmFit
    peak_flops: tuple[tuple[str, float], ...]
    bandwidth: float
    flash: FlashFit = PEAK_FLASH
    kernel_flash: tuple[tuple[str, FlashFit], ...] = ()
    runs_flash_attention_3: bool = True
    measured_linears: bool = False

    def linear_speedup(self, m: int, k: int, n: int, precision: str) -> float | None:
        """The measured FP8 row-wise speedup of a linear ``x[m, k] @ w[k, n]``, or ``None``.

        Only ``fp8_rowwise`` on a fitted model (``measured_linears``) has one
        (:func:`fp8_rowwise_speedup`); the roofline composes it at the FP8 peak like ``fp8``.
        """
        if precision != "fp8_rowwise" or not self.measured_linears:
            return None
        return fp8_rowwise_speedup(m, k, n)

    def _peak(self, precision: str) -> tuple[float, float]:
        if precision not in GEMM_PRECISIONS:
            raise ValueError(
                f"precision must be one of {sorted(GEMM_PRECISIONS)}; got {precision!r}"
            )
        column, element_bytes = GEMM_PRECISIONS[precision]
        peak = dict(self.peak_flops).get(column, math.nan)
        if not peak > 0:
            raise ValueError(
                f"device {self.device!r}: no {column} peak in the device table for precision "
                f"{precision!r}"
            )
        return peak, element_bytes

    @lru_cache(maxsize=65536)  # noqa: B019 - instances are per-device singletons (kernel_model)
    def gemm_s(self, m: int, n: int, k: int, precision: str) -> float:
        """One GEMM ``C[m, n] = A[m, k] B[k, n]`` in seconds.

        Args:
            m: rows of ``A`` and ``C`` (> 0).
            n: columns of ``B`` and ``C`` (> 0).
            k: the reduced dimension (> 0).
            precision: a key of :data:`GEMM_PRECISIONS`.

        Returns:
            Seconds; FP8/FP4 include the activation cast (module docstring).

        Raises:
            ValueError: a size <= 0, an unknown precision or one the device lacks.
        """
        _check_positive(m=m, n=n, k=k)
        peak, element_bytes = self._peak(precision)
        t = float(gemm_time_s(self.fit, m, n, k, peak, self.bandwidth, element_bytes))
        if element_bytes < 2.0:
            t += self.memory_s(float(m) * k * (2.0 + element_bytes))
        return t

    @lru_cache(maxsize=65536)  # noqa: B019 - instances are per-device singletons
    def attention_s(
        self,
        batch: int,
        heads: int,
        seq_q: int,
        seq_kv: int,
        head_dim: int,
        causal: bool,
        backward: bool,
        kernel: str = FLASH_KERNEL,
    ) -> float:
        """One flash-attention call in seconds (module docstring).

        Args:
            batch: sequences on this rank.
            heads: query heads on this rank.
            seq_q: query length.
            seq_kv: key length.
            head_dim: head dimension.
            causal: causal mask (queries aligned to the end of the keys).
            backward: the backward pass instead of the forward.
            kernel: one of :data:`~scaledl.workloads.training_job.ATTENTION_KERNELS`.

        Raises:
            ValueError: a size <= 0, a causal call with ``seq_kv < seq_q / 2``, an unknown
                kernel, or ``flash_attention_3`` on a GPU other than Hopper.
        """
        _check_positive(batch=batch, heads=heads, seq_q=seq_q, seq_kv=seq_kv, head_dim=head_dim)
        flops, rows, kv_eff = _attention_work(batch, heads, seq_q, seq_kv, head_dim, causal)
        peak = self._attention_peak()
        if kernel == UNFUSED_ATTENTION:
            return self._unfused_attention_s(batch * heads, seq_q, seq_kv, head_dim, backward)
        flash = self._flash(kernel)
        if backward:
            e, half = flash.backward_e, flash.backward_kv_half
        else:
            e, half = flash.forward_e, flash.forward_kv_half
        efficiency = e * kv_eff / (kv_eff + half) * rows / (rows + self.fit.m_half)
        if causal:
            efficiency *= flash.causal_factor
        compute = flops / (peak * efficiency)
        tensors = 2.0 * float(batch) * heads * head_dim * (seq_q + seq_kv)
        moved = 2.0 * tensors
        if backward:
            compute *= ATTENTION_BACKWARD_FACTOR
            moved = 2.0 * moved  # Q, K, V, O, dO read; dQ, dK, dV written
        return self.fit.t0_s + max(compute, moved / (self.bandwidth * self.fit.eff_mem))

    def _unfused_attention_s(
        self, heads: int, seq_q: int, seq_kv: int, head_dim: int, backward: bool
    ) -> float:
        """Materialised attention of ``heads`` (batch x heads) in seconds (module docstring)."""
        precision = "bf16" if dict(self.peak_flops).get("bf16", 0.0) > 0 else "fp16"
        q_rows, kv_rows = heads * seq_q, heads * seq_kv
        scores = float(heads) * seq_q * seq_kv
        if not backward:
            return (
                self.gemm_s(q_rows, seq_kv, head_dim, precision)
                + self.gemm_s(q_rows, head_dim, seq_kv, precision)
                + self.memory_s(UNFUSED_FORWARD_BYTES * scores)
            )
        return (
            self.gemm_s(q_rows, seq_kv, head_dim, precision)  # dP = dO V^T
            + self.gemm_s(kv_rows, head_dim, seq_q, precision)  # dV = P^T dO
            + self.gemm_s(q_rows, head_dim, seq_kv, precision)  # dQ = dS K
            + self.gemm_s(kv_rows, head_dim, seq_q, precision)  # dK = dS^T Q
            + self.memory_s(UNFUSED_BACKWARD_BYTES * scores)
        )

    def _flash(self, kernel: str) -> FlashFit:
        if kernel not in ATTENTION_KERNELS:
            raise ValueError(f"attention kernel must be one of {ATTENTION_KERNELS}; got {kernel!r}")
        if kernel == "flash_attention_3" and not self.runs_flash_attention_3:
            raise ValueError(
                f"device {self.device!r}: flash_attention_3 runs on Hopper GPUs only "
                "(H100, H200); use cudnn or flash_attention_2"
            )
        return dict(self.kernel_flash).get(kernel, self.flash)

    def _attention_peak(self) -> float:
        peaks = dict(self.peak_flops)
        peak = peaks.get("bf16", math.nan)
        peak = peak if peak > 0 else peaks.get("fp16", math.nan)
        if not peak > 0:
            raise ValueError(f"device {self.device!r}: no 16-bit tensor peak for attention")
        return peak

    @lru_cache(maxsize=65536)  # noqa: B019 - instances are per-device singletons
    def memory_s(self, bytes_moved: float) -> float:
        """A memory-bound kernel moving ``bytes_moved`` bytes (>= 0), in seconds."""
        if not (math.isfinite(bytes_moved) and bytes_moved >= 0):
            raise ValueError(f"bytes_moved must be finite and >= 0; got {bytes_moved!r}")
        if bytes_moved == 0:
            return 0.0
        return self.fit.mem_t0_s + bytes_moved / (self.bandwidth * self.fit.mem_eff)


#: The efficiencies of :func:`roofline_kernel_model`: the datasheet, no overhead.
PEAK_FIT = GemmFit(0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, source="datasheet peaks")


def _device_peaks(device: str) -> tuple[tuple[str, float], ...]:
    spec = device_spec(device)
    return tuple(sorted((p, v * 1e12) for p, v in spec.peak_tflops.items() if v > 0))


@cache
def kernel_model(gpu: str) -> FittedKernelModel:
    """The kernel model fitted on real kernel data, for one GPU (cached per process).

    Args:
        gpu: a device-table name or alias (``H100-SXM-80GB``, ``NVIDIA B200``...).

    Returns:
        A :class:`KernelModel` with the efficiencies of :func:`reference_gpu` and the GPU's
        own peaks and bandwidth; on the H100's fit each attention kernel has its own fit.

    Raises:
        UnknownDeviceError: the GPU is not in the device table.
        FileNotFoundError: Vidur's extracted kernel data is missing.
    """
    device = resolve_gpu_name(gpu)
    spec = device_spec(device)
    reference = reference_gpu(device)
    on_h100_fit = reference == "h100"
    own = tuple(
        (k, flash_fit(k))
        for k in ATTENTION_KERNELS
        if on_h100_fit and k not in (FLASH_KERNEL, UNFUSED_ATTENTION)
    )
    return FittedKernelModel(
        device, measured_fit(reference), _device_peaks(device),
        spec.mem_bandwidth_gbps * 1e9, flash_fit(), kernel_flash=own,
        runs_flash_attention_3=_is_hopper(device), measured_linears=True,
    )  # fmt: skip


def _is_hopper(device: str) -> bool:
    """Whether the device is a Hopper GPU (:data:`~scaledl.devices.specs.GPU_ARCHITECTURES`)."""
    return gpu_architecture(device) == "hopper"


@cache
def roofline_kernel_model(gpu: str) -> FittedKernelModel:
    """The analytical baseline: datasheet peaks, ``max(flops/peak, bytes/bandwidth)``.

    Args:
        gpu: a device-table name or alias.

    Raises:
        UnknownDeviceError: the GPU is not in the device table.
    """
    device = resolve_gpu_name(gpu)
    spec = device_spec(device)
    return FittedKernelModel(
        device, PEAK_FIT, _device_peaks(device), spec.mem_bandwidth_gbps * 1e9,
        runs_flash_attention_3=_is_hopper(device),
    )  # fmt: skip


def _mre(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.mean(np.abs(predicted - measured) / measured))


def _predict_ms(fit: GemmFit, gemms: pd.DataFrame, gpu: str) -> np.ndarray:
    peak, bandwidth = _peaks(MEASURED_GPUS[gpu])
    m, n, k = (gemms[c].to_numpy(float) for c in ("m", "n", "k"))
    return gemm_time_s(fit, m, n, k, peak, bandwidth) * 1e3


def _fit_from(gemms: pd.DataFrame, gpu: str) -> GemmFit:
    params = fit_gemm_efficiency(gemms, MEASURED_GPUS[gpu])
    return GemmFit(*params, mem_t0_s=0.0, mem_eff=1.0, source=gpu)


def evaluate_kernel_model(seed: int = 0, test_fraction: float = 0.2) -> pd.DataFrame:
    """Held-out error of the GEMM model on Vidur's measurements.

    Protocols: ``random``: fit on a random ``1 - test_fraction`` of a GPU's shapes, test on the
    rest; ``transfer``: fit on the other GPU and predict this one through its own peaks (the
    rule for GPUs without kernel data); ``in_sample``: fit and test on all shapes. Errors are
    mean relative errors over all shapes and over shapes with ``m >= 1024`` (training sizes).

    Args:
        seed: random split seed.
        test_fraction: share of shapes held out by ``random``.

    Returns:
        One row per (gpu, protocol): ``gpu``, ``protocol``, ``fitted_on``, ``n_test``,
        ``mre``, ``mre_m_from_1024``.
    """
    rows = []
    data = {gpu: load_vidur_gemms(gpu) for gpu in MEASURED_GPUS}
    for gpu, gemms in data.items():
        rng = np.random.default_rng(seed)
        test = rng.random(len(gemms)) < test_fraction
        other = next(g for g in MEASURED_GPUS if g != gpu)
        protocols = {
            "in_sample": (_fit_from(gemms, gpu), gemms, gpu),
            "random": (_fit_from(gemms[~test], gpu), gemms[test], gpu),
            "transfer": (_fit_from(data[other], other), gemms, other),
        }
        for protocol, (fit, tested, fitted_on) in protocols.items():
            predicted = _predict_ms(fit, tested, gpu)
            measured = tested["time_ms"].to_numpy(float)
            big = tested["m"].to_numpy() >= 1024
            rows.append(
                {
                    "gpu": gpu,
                    "protocol": protocol,
                    "fitted_on": fitted_on,
                    "n_test": len(tested),
                    "mre": _mre(predicted, measured),
                    "mre_m_from_1024": _mre(predicted[big], measured[big]),
                }
            )
    return pd.DataFrame(rows)


def evaluate_gemm_table(gemms: pd.DataFrame) -> pd.DataFrame:
    """Error of :func:`kernel_model` on measured GEMMs of any GPUs (e.g. NeuSight's traces).

    Args:
        gemms: columns ``gpu`` (a device-table name or alias), ``m``, ``n``, ``k`` (a batched
            GEMM flattened to ``batch * m`` rows), ``precision`` and ``time_ms``.

    Returns:
        One row per GPU: ``gpu``, ``reference`` (the measured GPU whose fit it takes),
        ``n``, ``median_ratio`` (measured / predicted) and ``mre``.

    Raises:
        ValueError: a missing column, or a GPU or precision the device table cannot serve.
    """
    missing = [c for c in ("gpu", "m", "n", "k", "precision", "time_ms") if c not in gemms]
    if missing:
        raise ValueError(f"GEMM table: missing column(s) {missing}")
    rows = []
    for gpu, group in gemms.groupby("gpu", sort=True):
        model = kernel_model(str(gpu))
        predicted = np.array(
            [
                model.gemm_s(int(m), int(n), int(k), str(p)) * 1e3
                for m, n, k, p in zip(
                    group["m"], group["n"], group["k"], group["precision"], strict=True
                )
            ]
        )
        measured = group["time_ms"].to_numpy(float)
        rows.append(
            {
                "gpu": gpu,
                "reference": reference_gpu(str(gpu)),
                "n": len(group),
                "median_ratio": float(np.median(measured / predicted)),
                "mre": _mre(predicted, measured),
            }
        )
    return pd.DataFrame(rows)
