"""Importer of published LLM training step times (``external/scale_runs/*.csv``) as TrainingJobs.

Six CSV files (46 columns each; ``external/scale_runs/README.md``) hold 519 step times published
by Megatron-LM, Megatron-Bridge, NeMo, torchtitan, the PyTorch/IBM FSDP blogs and NeMo
AutoModel. :func:`read_published_runs` turns every row it can into a
:class:`~scaledl.workloads.training_job.TrainingJob` and quarantines the others, each with its
file (``source``), 1-based data row, column, raw value and reason.

Checks, in order: the header must carry every column (else the file is refused:
:class:`PublishedRunsError`); great-expectations row checks on the numeric columns (positive,
integral, value sets) as :mod:`scaledl.validation` runs them; a cell that is text where a number
is expected; then the mapping below and the job's own validation.

Free text is mapped by explicit tables (:data:`PRECISIONS`, :data:`RECOMPUTES`, the sharding
patterns of :func:`_sharding`); text not in them is quarantined, never guessed. Decisions, each
also written into the row's ``notes`` (and the field into ``assumed``) where it applies:

* **MoE** (``ep > 1``, or no architecture and an MoE model name: DeepSeek, Qwen3 ``aNB``, GPT-OSS,
  Kimi, Nemotron 3) is quarantined with reason ``moe (not modelled)``; a row with no
  architecture otherwise with ``architecture not given``.
* **Precision**: per-tensor FP8 of any recipe (delayed, current scaling, "hybrid", torchao
  Float8 tensorwise, Bridge 25.09's unstated granularity) is ``fp8``; blockwise (H100 128x128)
  is ``fp8_blockwise``; torchao's **rowwise** scaling is ``fp8_rowwise`` (composed from torchao's
  measured row-wise linear speedups, ``external/torchao/``); MXFP8 1x32 and 32x32 are ``mxfp8``.
  torchao's float8 all-gather (FSDP) is recorded in ``notes`` only.
* **Sharding**: Megatron's distributed optimizer is ``zero1`` (also where the source says it is
  the recipes' default); DDP is ``none``; an FSDP group (AutoModel "shard group N", torchtitan
  "over N ranks", Megatron-FSDP "FSDP=N") equal to dp is ``fsdp``, smaller is ``hsdp`` with that
  group, 1 is ``none`` (nothing sharded). IBM rows whose mode is not stated follow the fms-fsdp
  README: HSDP within a node (group 8) for 7B/13B, FSDP for 34B/70B. Not reported (NeMo long
  context, Megatron 2024 strong scaling): ``zero1``, the Megatron/NeMo recipes' default.
* **Recompute** not reported (NeMo, Megatron-Bridge, Megatron 2024): ``none``,
  Megatron-LM's and NeMo's default (no ``--recompute-granularity``). AutoModel's rows take it
  from their benchmark recipe (:data:`AUTOMODEL_RECIPES`: the YAML the page links, at the row's
  ``source_commit``): every multi-GPU recipe sets ``activation_checkpointing: true`` (whole
  blocks: ``full``), the single-GPU LoRA recipes leave it at its ``false`` default. torchtitan's
  "selective layer" / IBM's "checkpoint every n-th block" checkpoint whole blocks (every other by
  default): they are mapped to ``selective`` as the sources call them; read ``notes``.
* **Micro-batch** not reported: 1. **vp** not reported or ``-``: 1 (no interleaving), except the
  torchtitan interleaved-1F1B row: 2 (torchtitan's looped schedules build 2 stages per rank).
  torchtitan's ``micro_batch`` with PP is the local batch, split into ``pp`` micro-batches
  (torchtitan's default ``pipeline_parallel_microbatches``).
* **grad_accum** is derived from ``global_batch / (micro_batch * dp)``. Where a reported GA
  disagrees (6 AutoModel PP LoRA rows, 1 Bridge row) the global batch is kept (it reproduces the
  reported tokens/s) and the conflict is noted; a non-integral result is quarantined.
* **Uneven pipelines** (Llama 3.1 405B, 126 blocks): when ``pp * vp`` does not divide the
  blocks but divides blocks + 2, the embedding and the loss count as one layer each (Megatron's
  ``account_for_embedding/loss_in_pipeline_split``, set by the NeMo / Bridge 405B recipes): the
  first and last virtual stage hold one block less. torchtitan's split points at those commits
  were not read: the same split is assumed there.
* **NeMo long-context "without CP" rows** report no layout. Where the paired CP run has
  ``CP = 1`` and speed-up 1.00, it is the same run: its layout is used (noted); the others are
  quarantined (``layout not reported``). B200 GPU counts are the layout's product (README).
* **NVLink domain**: a GB200/GB300 NVL72 job over more than one rack (128, 256 GPUs) is taken
  to use 64 GPUs (16 of the 18 trays) per rack, so that its power-of-two groups tile the racks;
  the 72-GPU domain of the device table applies to jobs of at most 72 GPUs.
* **Network**: the IBM blog's cluster bandwidths are per node (3.2 Tbps is a DGX H100 node's 8 x
  400 Gb/s): 400 Gbps -> 6.25, 800 Gbps -> 12.5, 3.2 Tbps -> 50 GB/s per GPU; the fms-fsdp README
  table (not stated) takes the blog's 400 Gbps. Elsewhere the device table's reference system.
* **Model shape**: Llama / Qwen: SwiGLU, RMSNorm, no linear biases, untied (Qwen2.5's QKV biases
  are not counted); Nemotron: squared-ReLU MLP (2 GEMMs), LayerNorm, untied; GPT: GELU MLP,
  LayerNorm, biases, tied embeddings, except Megatron-LM's 2024 H100 tables (untied, as the
  README's parameter counts need).
* **Attention kernel** (:data:`ATTENTION_KERNEL_BY_SOURCE`): torchtitan and the IBM FSDP
  runs call PyTorch's ``scaled_dot_product_attention``, whose flash backend is FlashAttention-2
  (IBM's rows name it; PyTorch made its cuDNN backend opt-in after 2.5, pytorch/pytorch#138522,
  so torchtitan's December 2024 runs ran FlashAttention-2 too; its August 2024 405B rows may
  have run PyTorch 2.5's cuDNN default: not stated, FlashAttention-2 assumed). AutoModel's dense
  models call Hugging Face's attention interface with ``flash_attention_2`` (its
  ``DEFAULT_ATTN_IMPLEMENTATION`` where the package is installed) or ``sdpa`` (the 70B
  pre-training recipe): FlashAttention-2 either way; "TE" in its kernel cell is Transformer
  Engine's linear layers. Megatron-LM, NeMo and Megatron-Bridge run cuDNN, except Megatron-LM's
  tables published before 2023 (the 2020 README, SC21, Korthikanti et al. 2022): Megatron-LM
  gained flash attention in 2023, so they ran ``unfused`` attention (the scores materialised
  around its fused scale-mask-softmax).
* **Elementwise operators**: a torchtitan or IBM row that does not name ``torch.compile`` (its
  table, notes or cells; "no-compile" does not count) runs eager PyTorch (``eager``: the blogs'
  and torchtitan's compile-off runs); an AutoModel row is ``eager`` unless its recipe sets
  ``enable_compile: true`` (the June 2026 multi-GPU recipes; the single-GPU LoRA recipes load
  the Hugging Face model with ``force_hf`` and no compile); every other row is ``fused``
  (Transformer Engine and Megatron's fusions, or compiled). An AutoModel row without a recipe
  in :data:`AUTOMODEL_RECIPES` keeps the defaults (``none``, ``fused``), noted and assumed.
* A file may carry the optional columns ``attention_kernel`` and ``elementwise`` (a user's own
  runs); a non-blank cell wins over the rules above and must name a value of ``TrainingJob``.
* **config_key**: the same (source, job, variant) gives the same key: NeMo's three versions and
  Bridge's releases of one configuration share it; the variant is the table for NeMo,
  Megatron-LM, torchtitan and IBM (plus torchtitan/IBM's non-measured cells: compile, async TP,
  schedule), Bridge's primary/alternative quantisation cell, nothing for AutoModel.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from scaledl.devices.specs import UnknownDeviceError, gpu_architecture, resolve_gpu_name
from scaledl.io.safe import check_regular_file
from scaledl.layout import CHECKOUT_EXTERNAL_DIR, external_root
from scaledl.profiles.schemas import ColumnSpec, TableSpec
from scaledl.validation.config import ValidationConfig
from scaledl.validation.gx_runner import GxRunner
from scaledl.validation.quarantine import format_value
from scaledl.validation.suites import (
    INTEGRAL,
    integral_failures,
    row_level_suite,
    table_level_suite,
)
from scaledl.workloads.training_job import (
    ATTENTION_KERNELS,
    ELEMENTWISE,
    ModelShape,
    TrainingJob,
    embedding_and_loss_split,
    job_errors,
)

#: The six files, by source name (the file stem).
SOURCES = (
    "megatron_lm",
    "megatron_bridge_perf",
    "nemo_perf",
    "torchtitan",
    "pytorch_fsdp_ibm",
    "automodel_perf",
)
#: The files in the source checkout (``external/scale_runs``); :func:`default_paths` follows
#: ``$SCALEDL_EXTERNAL_DIR``.
DEFAULT_PATHS = tuple(CHECKOUT_EXTERNAL_DIR / "scale_runs" / f"{s}.csv" for s in SOURCES)
#: The 46 columns every file has (README "Columns").
COLUMNS = (
    "source", "source_repo", "source_path", "source_commit", "source_date", "source_version",
    "table", "task", "model", "n_params", "n_params_basis", "hidden_size", "num_layers",
    "num_heads", "num_kv_heads", "ffn_size", "vocab_size", "arch_basis", "seq_len", "gpu",
    "n_gpus", "gpus_per_node", "n_nodes", "precision", "dp", "tp", "pp", "cp", "vp", "ep",
    "sharding", "activation_checkpointing", "micro_batch", "grad_accum", "global_batch_samples",
    "global_batch_tokens", "tokens_per_s_per_gpu", "tokens_per_s_total", "tflops_per_gpu", "mfu",
    "hfu", "iteration_s", "iteration_s_basis", "is_latest", "notes", "orig",
)  # fmt: skip
ARCH_COLUMNS = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "ffn_size", "vocab_size")
INT_COLUMNS = ARCH_COLUMNS + (
    "seq_len", "n_gpus", "gpus_per_node", "dp", "tp", "pp", "cp", "vp", "ep", "micro_batch",
    "grad_accum", "global_batch_samples",
)  # fmt: skip
#: Text a count column may hold instead of a number: "not applicable" (AutoModel's ``-``).
DASH_COLUMNS = ("vp", "ep", "dp", "grad_accum")
MOE = "moe (not modelled)"
_MOE_NAME = re.compile(r"deepseek|qwen3.*a\d+b|qwen3 moe|gpt[ -_]?oss|kimi|nemotron[ _-]?v?3(?!\d)",
                       re.I)  # fmt: skip

#: Precision cells (lower-cased) -> TrainingJob precision.
PRECISIONS = {
    "fp32": "fp32",
    "fp16": "fp16",
    "bf16": "bf16",
    "bf16 (inferred)": "bf16",
    "bf16 (inferred: mfu = tflop/s / 989)": "bf16",
    "fp16 (mixed, inferred)": "fp16",
    "fp16 (mixed, inferred: megatron default at the time)": "fp16",
    "fp16 (mixed; --fp16 in examples/sc21/config.sh)": "fp16",
    "fp16 (calculon exe json datatype float16)": "fp16",
    "fp8": "fp8",
    "fp8 (hybrid format)": "fp8",
    "fp8 (per-tensor current scaling)": "fp8",
    "fp8 (granularity not stated; per-tensor assumed, inferred)": "fp8",
    "fp8 (float8 linears)": "fp8",
    "fp8 (float8 linears, bf16 attention)": "fp8",
    "fp8 (float8 linears + float8 all-gather)": "fp8",
    "fp8 tensorwise": "fp8",
    "fp8 rowwise": "fp8_rowwise",
    "fp8 blockwise 128x128 w / 1x128 act (h100)": "fp8_blockwise",
    "mxfp8": "mxfp8",
    "mxfp8 32x32 (gb200/b200)": "mxfp8",
    "nvfp4": "nvfp4",
}
#: Activation-checkpointing cells (lower-cased) -> recompute; ``None``: not reported.
RECOMPUTES = {
    "": None,
    "not reported (see scripts/performance recipes)": None,
    "none": "none",
    "full": "full",
    "full (every block)": "full",
    "full recompute (baseline)": "full",
    "full (--activations-checkpoint-method uniform)": "full",
    "selective": "selective",
    "selective op": "selective",
    "selective (per-op)": "selective",
    "selective layer": "selective",
    "selective (toml default, inferred)": "selective",
    "selective (as prior blog)": "selective",
    "selective (checkpoint every n-th block)": "selective",
    "selective recompute + sequence parallel": "selective",
}
#: Sharding cells (lower-cased) with a fixed meaning -> (sharding, shard group or None).
_FIXED_SHARDING = {
    "none": ("none", None),
    "none (ddp)": ("none", None),
    "none (ddp; --ddp-impl torch for <=18b, local above)": ("none", None),
    "ddp + distributed optimizer (fsdp=0)": ("zero1", None),
    "not stated (recipes default: distributed optimizer)": ("zero1", None),
    "distributed optimizer (zero-1-like) assumed (nemo/megatron default in perf recipes)": (
        "zero1",
        None,
    ),
    "distributed optimizer + overlap grad-reduce/param-gather (readme)": ("zero1", None),
    "distributed optimizer (example scripts)": ("zero1", None),
    "fsdp full shard": ("fsdp", None),
    "hsdp (hybrid: shard within node, replicate across)": ("hsdp", "node"),
}
_GROUP_SHARDING = re.compile(
    r"fsdp2 \(shard group (\d+)\)|fsdp2 \(fully_shard\) over (\d+) ranks"
    r"|megatron-fsdp \(fsdp=(\d+)\)"
)
_IBM_NOT_STATED = (
    "fsdp (not stated)",
    "fsdp (sharding mode not stated)",
    "fsdp (sharding mode per size not stated in blog; fms-fsdp readme: hsdp 7b/13b, fsdp 34b/70b)",
)
#: IBM cluster bandwidth per node as the tables name it -> GB/s per GPU (8 GPUs per node).
_IBM_NETWORK = {"400 gbps": 400 / 8 / 8, "800 gbps": 800 / 8 / 8, "3.2 tbps": 3200 / 8 / 8}
#: Optional columns after the 46 -> the values a cell may hold (blank: the source's rule below).
OPTIONAL_COLUMNS = {"attention_kernel": ATTENTION_KERNELS, "elementwise": ELEMENTWISE}
#: Sources whose framework runs PyTorch SDPA's flash attention (FlashAttention-2) -> kernel;
#: every other source runs Transformer Engine's cuDNN attention (the job's default).
ATTENTION_KERNEL_BY_SOURCE = {
    "torchtitan": "flash_attention_2",
    "pytorch_fsdp_ibm": "flash_attention_2",
    "automodel_perf": "flash_attention_2",
}
#: NeMo AutoModel's benchmark recipes, read at the commit of the page that published the row:
#: (first 7 hex of ``source_commit``, ``task``, ``model`` cell) -> (recipe path under
#: ``examples/``, activation checkpointing, ``enable_compile``). MoE rows are refused and absent.
AUTOMODEL_RECIPES: dict[tuple[str, str, str], tuple[str, str, bool]] = {
    ("cb97654", "pretrain", "Llama3 70B"): (
        "llm_benchmark/llama3_3/custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml", "full", True),
    ("cb97654", "lora", "Llama3 8B"): (
        "llm_benchmark/llama3_1/llama3_1_8b_peft_benchmark.yaml", "none", False),
    ("cb97654", "lora", "Qwen2.5 7B"): (
        "llm_benchmark/qwen/qwen2_5_7b_peft_benchmark.yaml", "none", False),
    ("cb97654", "lora", "Llama3 70B"): (
        "llm_benchmark/llama3_3/custom_llama3_3_70b_instruct_peft_benchmark.yaml", "full", True),
    ("cb97654", "lora", "Qwen2.5 32B"): (
        "llm_benchmark/qwen/custom_qwen2_5_32b_peft_benchmark.yaml", "full", True),
    ("cb97654", "lora", "Llama3 70B 2-node"): (
        "llm_benchmark/llama3_3/custom_llama3_3_70b_instruct_peft_benchmark_2nodes.yaml", "full",
        True),
    ("cb97654", "lora", "Qwen2.5 32B 2-node"): (
        "llm_benchmark/qwen/custom_qwen2_5_32b_peft_benchmark_2nodes.yaml", "full", True),
    ("c0e4fe1", "lora", "Llama3 70B"): (
        "llm_finetune/llama3_3/custom_llama3_3_70b_instruct_peft_benchmark.yaml", "full", False),
    ("c0e4fe1", "lora", "Qwen2.5 32B"): (
        "llm_finetune/qwen/qwen2_5_32b_peft_benchmark.yaml", "full", False),
    ("c0e4fe1", "lora", "Llama3 70B 2-node"): (
        "llm_finetune/llama3_3/custom_llama3_3_70b_instruct_peft_benchmark_2nodes.yaml", "full",
        False),
    ("c0e4fe1", "lora", "Qwen2.5 32B 2-node"): (
        "llm_finetune/qwen/qwen2_5_32b_peft_benchmark_2nodes.yaml", "full", False),
    ("507bfb7", "lora", "Llama3 70B"): (
        "llm_finetune/llama3_3/custom_llama3_3_70b_instruct_peft_benchmark.yaml", "full", False),
    ("507bfb7", "lora", "Llama3 70B 2-node"): (
        "llm_finetune/llama3_3/custom_llama3_3_70b_instruct_peft_benchmark_2nodes.yaml", "full",
        False),
}  # fmt: skip
#: The year Megatron-LM gained flash attention (``--use-flash-attn``); its earlier tables ran
#: the materialised-scores attention (``unfused``).
FLASH_ATTENTION_IN_MEGATRON = "2023"
#: Sources whose models run PyTorch's eager operators unless the row names torch.compile.
EAGER_UNLESS_COMPILED = ("torchtitan", "pytorch_fsdp_ibm")
_COMPILED = re.compile(r"(?<!no-)(?<!no )\bcompile\b", re.I)
#: Cells of ``orig`` that are measurements (left out of ``config_key``'s variant).
_MEASURED = re.compile(
    r"tps|wps|mfu|hfu|tflop|throughput|iteration|time|tokens|speedup|pflops|pct_peak|scaling|"
    r"calculon",
    re.I,
)
RUN_COLUMNS = (
    "source", "row", "job", "iteration_s", "iteration_s_basis", "is_latest", "config_key",
    "gpu_generation", "model_name", "precision_raw", "sharding_raw",
    "activation_checkpointing_raw", "table", "source_version", "n_params", "tflops_per_gpu",
    "mfu", "assumed", "notes",
)  # fmt: skip
QUARANTINE_COLUMNS = ("source", "row", "field", "value", "reason")

_SPEC = TableSpec(
    "published_runs",
    (
        ColumnSpec("source", "str"),
        ColumnSpec("task", "str", value_set=("pretrain", "sft", "lora")),
        ColumnSpec("is_latest", "str", value_set=("True", "False")),
        *(ColumnSpec(c, "int", nullable=True, min_value=0, strict_min=True) for c in INT_COLUMNS),
        ColumnSpec("iteration_s", "number", nullable=True, min_value=0, strict_min=True),
    ),
)


class PublishedRunsError(ValueError):
    """A file cannot be imported at all (unreadable, a column missing); names file and column."""


@dataclass
class PublishedRuns:
    """The imported rows.

    Attributes:
        runs: one row per accepted CSV row (:data:`RUN_COLUMNS`; ``job`` holds the
            :class:`TrainingJob`, ``iteration_s`` NaN where the source gives no step time).
        quarantine: one row per refused CSV row (:data:`QUARANTINE_COLUMNS`).
        rows: data rows read per source.
    """

    runs: pd.DataFrame
    quarantine: pd.DataFrame
    rows: dict[str, int] = field(default_factory=dict)

    def counts(self) -> dict[str, Any]:
        """Accepted and quarantined rows, per source and per reason.

        ``rows_with_architecture`` leaves out the MoE and architecture-less rows; the accepted
        share of it is the coverage the issue asks for.
        """
        q = self.quarantine
        reasons = q["reason"].map(_reason_kind) if len(q) else pd.Series(dtype=str)
        without_arch = int(reasons.isin([MOE, "architecture not given"]).sum()) if len(q) else 0
        with_arch = sum(self.rows.values()) - without_arch
        per_source = {
            s: {
                "rows": n,
                "accepted": int((self.runs["source"] == s).sum()),
                "quarantined": int((q["source"] == s).sum()) if len(q) else 0,
                "with_iteration_s": int(
                    ((self.runs["source"] == s) & self.runs["iteration_s"].notna()).sum()
                ),
            }
            for s, n in self.rows.items()
        }
        return {
            "rows": sum(self.rows.values()),
            "accepted": len(self.runs),
            "accepted_with_iteration_s": int(self.runs["iteration_s"].notna().sum()),
            "quarantined": len(q),
            "quarantined_by_reason": {k: int(v) for k, v in reasons.value_counts().items()},
            "rows_with_architecture": with_arch,
            "accepted_share_of_rows_with_architecture": (
                round(len(self.runs) / with_arch, 4) if with_arch else None
            ),
            "per_source": per_source,
        }


class _RowError(Exception):
    """One row's first problem: the CSV column, its raw value and the reason."""

    def __init__(self, column: str, value: Any, reason: str) -> None:
        super().__init__(reason)
        self.column, self.value, self.reason = column, value, reason


def default_paths() -> tuple[Path, ...]:
    """The six files under ``<external>/scale_runs`` (:func:`scaledl.layout.external_root`)."""
    return tuple(external_root() / "scale_runs" / f"{s}.csv" for s in SOURCES)


def read_published_runs(paths: list[Path] | tuple[Path, ...] | None = None) -> PublishedRuns:
    """Import published step-time CSVs as training jobs, quarantining what cannot be one.

    Args:
        paths: CSV files in the 46-column format, plus the optional ``attention_kernel`` and
            ``elementwise`` columns (default :func:`default_paths`); the file stem is the
            row's ``source``.

    Returns:
        :class:`PublishedRuns` with the accepted rows and the quarantined ones.

    Raises:
        PublishedRunsError: a file is missing, not a regular file, not UTF-8 CSV, lacks a
            column or has none of its rows (naming the file and the column).
    """
    paths = [Path(p) for p in (paths or default_paths())]
    stems = [p.stem for p in paths]
    if len(set(stems)) != len(stems):
        raise PublishedRunsError(f"two files share a source name (file stem): {sorted(stems)}")
    frames = [_read_csv(path) for path in paths]
    rows = {path.stem: len(frame) for path, frame in zip(paths, frames, strict=True)}
    # One great-expectations pass over all files together (a suite run costs ~1 s).
    kept = [*COLUMNS, *OPTIONAL_COLUMNS]
    # a file without an optional column: NaN cells there (the column is absent, not blank)
    frame = pd.concat([f[[c for c in kept if c in f]] for f in frames], ignore_index=True)
    sources = np.repeat(stems, [len(f) for f in frames])
    numbers = np.concatenate([np.arange(1, len(f) + 1) for f in frames])
    failures = _checked(GxRunner(), frame)
    runs: list[dict] = []
    quarantine: list[dict] = []
    for position, record in enumerate(frame.to_dict("records")):
        source, row = str(sources[position]), int(numbers[position])
        if position in failures:
            column, value, reason = failures[position]
            quarantine.append(_quarantined(source, row, column, value, reason))
            continue
        try:
            runs.append(_run(source, row, record))
        except _RowError as exc:
            quarantine.append(_quarantined(source, row, exc.column, exc.value, exc.reason))
    return PublishedRuns(
        runs=pd.DataFrame(runs, columns=list(RUN_COLUMNS)),
        quarantine=pd.DataFrame(quarantine, columns=list(QUARANTINE_COLUMNS)),
        rows=rows,
    )


def _read_csv(path: Path) -> pd.DataFrame:
    """A file's cells as text (blank = ""), its columns checked."""
    try:
        check_regular_file(path)
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
    except FileNotFoundError:
        raise PublishedRunsError(f"{path}: no such file") from None
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise PublishedRunsError(f"{path}: cannot read the CSV: {exc}") from None
    _check_header(path)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise PublishedRunsError(
            f"{path}: column(s) {missing} missing (the 46 columns of external/scale_runs/README.md)"
        )
    if frame.empty:
        raise PublishedRunsError(f"{path}: no data rows")
    return frame


def _check_header(path: Path) -> None:
    """Refuse a header naming a column twice, or a known column in another spelling.

    Raises:
        PublishedRunsError: naming the file and the column.
    """
    with path.open(newline="", encoding="utf-8") as handle:
        header = next(csv.reader(handle), [])
    known = {c.lower(): c for c in (*COLUMNS, *OPTIONAL_COLUMNS)}
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise PublishedRunsError(f"{path}: column {name!r} appears more than once")
        seen.add(name)
        meant = known.get(name.strip().lower())
        if meant is not None and meant != name:
            raise PublishedRunsError(
                f"{path}: column {name!r} is not {meant!r} (column names are exact)"
            )


def _checked(runner: GxRunner, frame: pd.DataFrame) -> dict[int, tuple]:
    """Great-expectations checks of the numeric view; ``{position: (column, value, reason)}``.

    A cell that is text where a count or a time is expected fails first (``not a number``).
    """
    failures: dict[int, tuple] = {}
    view = pd.DataFrame(index=frame.index)
    for column in ("source", "task", "is_latest"):
        view[column] = frame[column].astype(object)
    for column in (*INT_COLUMNS, "iteration_s"):
        cells = frame[column].str.strip()
        numbers = pd.to_numeric(cells, errors="coerce")
        text = cells.ne("") & numbers.isna()
        if column in DASH_COLUMNS:
            text &= cells.ne("-")
        for position in np.flatnonzero(text.to_numpy()):
            failures.setdefault(int(position), (column, cells.iloc[position], "not a number"))
        view[column] = numbers.astype(float)
    suites = (
        table_level_suite(_SPEC, view),
        row_level_suite(_SPEC, list(view.columns), ValidationConfig()),
    )
    table, result = (runner.run(_SPEC.name, view, suite) for suite in suites)
    for column, expectation, detail in table.errors + result.errors:
        # The view is built numeric, so only a broken check lands here; never silently.
        raise PublishedRunsError(f"published runs: column {column!r}: {expectation}: {detail}")
    for position, failure in result.row_failures:
        raw = frame[failure.column].iloc[position] if failure.column in frame else failure.value
        reason = _expectation_reason(failure.column, failure.expectation, raw)
        failures.setdefault(position, (failure.column, raw, reason))
    for column, (positions, _) in integral_failures(_SPEC, view).items():
        for position in positions:
            raw = frame[column].iloc[position]
            reason = _expectation_reason(column, INTEGRAL, raw)
            failures.setdefault(int(position), (column, raw, reason))
    return failures


def _expectation_reason(column: str, expectation: str, raw: Any) -> str:
    """A failed great-expectations check of one cell in words, e.g. ``must be >= 1 (got 0)``.

    The suite built from :data:`_SPEC` stays the checker; this only words its failure from the
    column's :class:`~scaledl.profiles.schemas.ColumnSpec` (an integer column's exclusive
    minimum ``> 0`` reads ``>= 1``). An expectation without a wording keeps its name.
    """
    spec = next((c for c in _SPEC.columns if c.name == column), None)
    got = f" (got {format_value(raw)})"
    if spec is None:
        return expectation
    if expectation == "expect_column_values_to_be_between":
        bounds = []
        low = spec.min_value
        if low is not None and spec.kind == "int" and spec.strict_min and float(low).is_integer():
            bounds.append(f">= {int(low) + 1}")
        elif low is not None:
            bounds.append(f"{'>' if spec.strict_min else '>='} {low:g}")
        if spec.max_value is not None:
            bounds.append(f"<= {spec.max_value:g}")
        return f"must be {' and '.join(bounds)}{got}"
    if expectation == "expect_column_values_to_be_in_set" and spec.value_set is not None:
        return f"must be one of {', '.join(spec.value_set)}{got}"
    if expectation == "expect_column_values_to_not_be_null":
        return "missing (blank cell)"
    if expectation == INTEGRAL:
        return f"must be a whole number{got}"
    return expectation


def _quarantined(source: str, row: int, column: str, value: Any, reason: str) -> dict:
    return {
        "source": source,
        "row": row,
        "field": column,
        "value": format_value(value),
        "reason": reason,
    }


def _reason_kind(reason: str) -> str:
    """A quarantine reason without its row detail, for counting.

    The text before its first ``:`` outside parentheses (``unknown precision (known: ...)``
    stays whole), without a trailing ``(got <value>)`` (``must be >= 1 (got 0)`` counts as
    ``must be >= 1``).
    """
    reason = re.sub(r" \(got [^()]*\)$", "", reason)
    depth = 0
    for i, char in enumerate(reason):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ":" and depth == 0:
            return reason[:i]
    return reason


# ---------------------------------------------------------------------------- one row
def _run(source: str, row: int, r: dict[str, str]) -> dict[str, Any]:
    """One CSV row as a ``runs`` record.

    Raises:
        _RowError: the row cannot be a training job (naming the column, value and reason).
    """
    notes: list[str] = [r["notes"]] if r["notes"] else []
    assumed: list[str] = []
    ep = _int(r, "ep")
    if ep is not None and ep > 1:
        raise _RowError("ep", r["ep"], MOE)
    if all(r[c].strip() == "" for c in ARCH_COLUMNS):
        if _MOE_NAME.search(r["model"]):
            raise _RowError("model", r["model"], MOE)
        raise _RowError("hidden_size", "", "architecture not given")
    for column in (*ARCH_COLUMNS, "seq_len", "gpu", "global_batch_samples"):
        if r[column].strip() == "":
            raise _RowError(column, "", "missing (blank cell)")
    model = _model(source, r)
    gpu = _gpu(r)
    layout = _layout(source, r, notes, assumed)
    precision = PRECISIONS.get(r["precision"].strip().lower())
    if precision is None:
        raise _RowError("precision", r["precision"], f"unknown precision (known: {_known()})")
    if "float8 all-gather" in r["precision"].lower():
        notes.append("float8 FSDP all-gather (halves parameter all-gather bytes) not modelled")
    recipe = _automodel_recipe(source, r, notes, assumed)
    recompute = _recompute(r, notes, assumed, recipe)
    sharding, group = _sharding(source, r, layout["dp"], model, notes, assumed)
    data = {
        "model": model,
        "seq_len": _int(r, "seq_len"),
        "gpu": gpu,
        "n_gpus": layout["n_gpus"],
        "gpus_per_node": _int(r, "gpus_per_node") or 8,
        "precision": precision,
        "tp_size": layout["tp"],
        "pp_size": layout["pp"],
        "cp_size": layout["cp"],
        "vp_size": layout["vp"],
        "sharding": sharding,
        "shard_group_size": group,
        "activation_checkpointing": recompute,
        "micro_batch": layout["micro_batch"],
        "global_batch": _int(r, "global_batch_samples"),
        "task": r["task"],
        "attention_kernel": _optional(r, "attention_kernel", assumed)
        or _attention_kernel(source, r),
        "elementwise": _optional(r, "elementwise", assumed) or _elementwise(source, r, recipe),
    }
    if r["gpus_per_node"].strip() == "":
        assumed.append("gpus_per_node")
    network = _network(source, r, notes, assumed)
    if network is not None:
        data["network_gbps"] = network
    if r["gpu"].strip().endswith("(NVL72)") and layout["n_gpus"] > 72:
        if layout["n_gpus"] % 64:
            raise _RowError(
                "n_gpus",
                r["n_gpus"],
                "an NVL72 job over several racks must be a multiple of 64 GPUs (64 per rack's "
                "NVLink domain: module docstring)",
            )
        data["nvlink_domain_size"] = 64
        assumed.append("nvlink_domain_size")
        notes.append("NVL72 job over several racks: 64 GPUs (16 trays) per rack's NVLink domain")
    data["layers_per_stage"] = _stages(model["num_layers"], layout, source, notes)
    job = _job(data, r, notes)
    return {
        "source": source,
        "row": row,
        "job": job,
        "iteration_s": _float(r["iteration_s"]),
        "iteration_s_basis": r["iteration_s_basis"],
        "is_latest": r["is_latest"] == "True",
        "config_key": _config_key(source, r, job),
        "gpu_generation": gpu_architecture(job.gpu),
        "model_name": r["model"],
        "precision_raw": r["precision"],
        "sharding_raw": r["sharding"],
        "activation_checkpointing_raw": r["activation_checkpointing"],
        "table": r["table"],
        "source_version": r["source_version"],
        "n_params": job.model.n_params(),
        "tflops_per_gpu": _float(r["tflops_per_gpu"]),
        "mfu": _float(r["mfu"]),
        "assumed": tuple(sorted(set(assumed))),
        "notes": "; ".join(notes),
    }


def _optional(r: dict[str, str], column: str, assumed: list[str]) -> str | None:
    """An optional column's cell, checked (:data:`OPTIONAL_COLUMNS`); ``None`` when blank."""
    cell = r.get(column)
    if not isinstance(cell, str):  # the row's file has no such column
        return None
    if cell.strip():
        if cell.strip() not in OPTIONAL_COLUMNS[column]:
            known = ", ".join(OPTIONAL_COLUMNS[column])
            raise _RowError(column, cell, f"unknown {column} (known: {known})")
        return cell.strip()
    assumed.append(column)
    return None


def _attention_kernel(source: str, r: dict[str, str]) -> str:
    """The source's attention kernel; Megatron-LM's tables before 2023 ``unfused``."""
    if source == "megatron_lm" and r["source_date"][:4] < FLASH_ATTENTION_IN_MEGATRON:
        return "unfused"
    return ATTENTION_KERNEL_BY_SOURCE.get(source, "cudnn")


def _automodel_recipe(
    source: str, r: dict[str, str], notes: list[str], assumed: list[str]
) -> tuple[str, str, bool] | None:
    """The AutoModel row's recipe facts (:data:`AUTOMODEL_RECIPES`), noted; ``None`` elsewhere."""
    if source != "automodel_perf":
        return None
    recipe = AUTOMODEL_RECIPES.get((r["source_commit"][:7], r["task"], r["model"].strip()))
    if recipe is None:
        assumed.append("elementwise")
        notes.append("no AutoModel recipe known for this row: recompute none, fused operators")
        return None
    path, recompute, compiled = recipe
    notes.append(
        f"recipe examples/{path} at {r['source_commit'][:7]}: activation checkpointing "
        f"{recompute}, {'torch.compile' if compiled else 'no torch.compile (eager operators)'}, "
        "Hugging Face attention (FlashAttention-2)"
    )
    return recipe


def _elementwise(source: str, r: dict[str, str], recipe: tuple[str, str, bool] | None) -> str:
    """``eager`` or ``fused`` (module docstring).

    ``eager``: a torchtitan or IBM row that does not name torch.compile, or an AutoModel row
    whose recipe does not compile.
    """
    if recipe is not None:
        return "fused" if recipe[2] else "eager"
    if source not in EAGER_UNLESS_COMPILED:
        return "fused"
    text = " ".join((r["table"], r["notes"], r["orig"]))
    return "fused" if _COMPILED.search(text) else "eager"


def _known() -> str:
    return ", ".join(sorted(set(PRECISIONS.values())))


def _int(r: dict[str, str], column: str) -> int | None:
    """A count cell as ``int`` (blank or ``-``: ``None``); integrality was checked before."""
    cell = r[column].strip()
    if cell in ("", "-"):
        return None
    return int(float(cell))


def _float(cell: str) -> float:
    return float(cell) if cell.strip() else math.nan


def _model(source: str, r: dict[str, str]) -> dict[str, Any]:
    """The :class:`ModelShape` fields of a row: its numbers and the family's flags."""
    name = r["model"].lower()
    shape: dict[str, Any] = {c: _int(r, c) for c in ARCH_COLUMNS}
    if "llama" in name or "qwen" in name:
        flags = {"gated_mlp": True, "norm": "rmsnorm", "linear_bias": False}
        flags["tied_embeddings"] = False
    elif "nemotron" in name:
        flags = {"gated_mlp": False, "norm": "layernorm", "linear_bias": False}
        flags["tied_embeddings"] = False
    elif "gpt" in name:
        untied = r["table"].startswith(("Weak scaling on H100", "Strong scaling GPT-3 177B"))
        flags = {"gated_mlp": False, "norm": "layernorm", "linear_bias": True}
        flags["tied_embeddings"] = not untied
    else:
        raise _RowError("model", r["model"], "unknown model family (llama, qwen, nemotron, gpt)")
    return {**shape, **flags}


def _gpu(r: dict[str, str]) -> str:
    try:
        name = resolve_gpu_name(r["gpu"])
    except UnknownDeviceError as exc:
        raise _RowError("gpu", r["gpu"], f"unknown GPU: {exc}") from None
    return name


def _layout(source: str, r: dict[str, str], notes: list[str], assumed: list[str]) -> dict:
    """n_gpus, tp, pp, cp, vp, dp and micro-batch of a row, with the documented defaults."""
    n_gpus = _int(r, "n_gpus")
    tp, pp, cp = _int(r, "tp"), _int(r, "pp"), _int(r, "cp")
    if "without CP" in r["table"]:
        orig = json.loads(r["orig"] or "{}")
        if orig.get("CP") != "1" or orig.get("Speedup") != "1.00":
            raise _RowError("n_gpus", r["n_gpus"], "layout not reported (NeMo 'without CP' run)")
        tp, pp, cp = int(orig["TP"]), int(orig["PP"]), 1
        product = tp * pp * int(orig["DP"])
        if n_gpus is not None and n_gpus != product:
            raise _RowError("n_gpus", r["n_gpus"], f"disagrees with the CP run's layout {product}")
        n_gpus = product
        notes.append("without-CP run at CP=1 (speed-up 1.00) = the CP run: its layout used")
    if n_gpus is None:
        raise _RowError("n_gpus", "", "layout not reported (n_gpus blank)")
    layout = {"n_gpus": n_gpus, "tp": tp or 1, "pp": pp or 1, "cp": cp or 1}
    for name, value in (("tp", tp), ("pp", pp), ("cp", cp)):
        if value is None:
            assumed.append(f"{name}_size")
    vp = _int(r, "vp")
    if vp is None:
        interleaved = source == "torchtitan" and "interleaved" in r["notes"].lower()
        vp = 2 if interleaved else 1
        if r["vp"].strip() == "":
            assumed.append("vp_size")
            notes.append(f"vp not reported: {vp}" + (" (torchtitan looped schedule)" * interleaved))
    layout["vp"] = vp
    model_ranks = layout["tp"] * layout["pp"] * layout["cp"]
    layout["dp"] = n_gpus // model_ranks if n_gpus % model_ranks == 0 else None
    given_dp = _int(r, "dp")
    if given_dp is not None and layout["dp"] is not None and given_dp != layout["dp"]:
        raise _RowError("dp", r["dp"], f"disagrees with n_gpus/(tp*pp*cp) = {layout['dp']}")
    micro = _int(r, "micro_batch")
    if micro is None:
        micro = 1
        assumed.append("micro_batch")
        notes.append("micro-batch not reported: 1")
    if source == "torchtitan" and layout["pp"] > 1:
        if micro % layout["pp"]:
            raise _RowError("micro_batch", r["micro_batch"], "local batch not divisible by pp")
        micro //= layout["pp"]
        assumed.append("micro_batch")
        notes.append(f"torchtitan local batch split into pp={layout['pp']} micro-batches")
    layout["micro_batch"] = micro
    return layout


def _recompute(
    r: dict[str, str], notes: list[str], assumed: list[str], recipe: tuple[str, str, bool] | None
) -> str:
    cell = r["activation_checkpointing"].strip()
    if cell.lower() not in RECOMPUTES:
        raise _RowError("activation_checkpointing", cell, "unknown activation checkpointing")
    value = RECOMPUTES[cell.lower()]
    if value is None and recipe is not None:
        return recipe[1]
    if value is None:
        assumed.append("activation_checkpointing")
        notes.append("activation checkpointing not reported: none (Megatron/NeMo default)")
        return "none"
    if "layer" in cell.lower() or "n-th block" in cell.lower():
        notes.append("block-level checkpointing (every n-th block) mapped to selective")
    return value


def _sharding(
    source: str, r: dict[str, str], dp: int | None, model: dict, notes: list, assumed: list
) -> tuple[str, int | None]:
    """(sharding, shard_group_size) of a row (module docstring)."""
    cell = r["sharding"].strip()
    key = cell.lower()
    if key == "":
        assumed.append("sharding")
        notes.append("sharding not reported: zero1 (distributed optimizer, recipes' default)")
        return "zero1", None
    if key in _IBM_NOT_STATED:
        assumed.append("sharding")
        small = model["hidden_size"] <= 5120  # Llama-2 7B/13B
        notes.append("sharding mode not stated: fms-fsdp README's " + ("HSDP" if small else "FSDP"))
        key = "hsdp (hybrid: shard within node, replicate across)" if small else "fsdp full shard"
    if key in _FIXED_SHARDING:
        sharding, group = _FIXED_SHARDING[key]
        if group == "node":
            group = _int(r, "gpus_per_node") or 8
        return sharding, group
    match = _GROUP_SHARDING.fullmatch(key)
    if match is None:
        raise _RowError("sharding", cell, "unknown sharding")
    group = int(next(g for g in match.groups() if g))
    if dp is None:
        return "fsdp", None  # the job's own check names the indivisible n_gpus
    if group == 1:
        return "none", None
    if group == dp:
        return "fsdp", None
    return "hsdp", group


def _network(source: str, r: dict[str, str], notes: list, assumed: list) -> float | None:
    """Per-GPU scale-out GB/s where the source names its cluster (IBM), else ``None``."""
    if source != "pytorch_fsdp_ibm":
        return None
    table = r["table"].lower()
    for text, gbps in _IBM_NETWORK.items():
        if text in table:
            return gbps
    assumed.append("network_gbps")
    notes.append("network not stated: the blog's A100 cluster (400 Gbps per node)")
    return _IBM_NETWORK["400 gbps"]


def _stages(layers: int, layout: dict, source: str, notes: list) -> tuple[int, ...] | None:
    """Uneven virtual stages when pp*vp divides the blocks only with embedding and loss."""
    stages = layout["pp"] * layout["vp"]
    split = None if layers % stages == 0 else embedding_and_loss_split(layers, stages)
    if split is None:
        return None
    notes.append(
        f"{layers} blocks over {stages} virtual stages: embedding and loss counted as one layer "
        f"each (first/last stage {split[0]}, others {split[1]})"
        + ("; torchtitan split points assumed" if source == "torchtitan" else "")
    )
    return split


#: TrainingJob fields -> the CSV column a quarantine names.
_FIELD_COLUMN = {
    "tp_size": "tp",
    "pp_size": "pp",
    "cp_size": "cp",
    "vp_size": "vp",
    "dp_size": "dp",
    "global_batch": "global_batch_samples",
    "layers_per_stage": "num_layers",
    "shard_group_size": "sharding",
    "nvlink_domain_size": "gpu",
    "network_gbps": "table",
}


def _job(data: dict, r: dict[str, str], notes: list) -> TrainingJob:
    reported_ga = _int(r, "grad_accum")
    try:
        job = TrainingJob.model_validate(data)
    except ValidationError as exc:
        problems = job_errors(exc, data)
        field_name, value, message = problems[0]
        column = _FIELD_COLUMN.get(field_name, field_name.removeprefix("model."))
        raw = r.get(column, value)
        reason = "; ".join(f"{f}: {m}" for f, _, m in problems)
        if field_name == "global_batch" and "grad_accum" in message:
            column, raw = "grad_accum", r["grad_accum"] or message.rsplit(" ", 1)[-1].strip(")")
            reason = f"non-integer grad accum: {reason}"
        raise _RowError(column, raw, f"invalid job: {reason}") from None
    if reported_ga is not None and reported_ga != job.grad_accum:
        notes.append(
            f"reported GA={reported_ga} disagrees with global/(micro*dp)={job.grad_accum}; "
            "global batch kept"
        )
    computed = ModelShape.model_validate(data["model"]).n_params()
    reported = _float(r["n_params"])
    if r["n_params_basis"].startswith("computed") and abs(computed / reported - 1) > 0.01:
        notes.append(f"n_params {computed} vs the row's {reported:.0f}")
    return job


def _config_key(source: str, r: dict[str, str], job: TrainingJob) -> str:
    """Same (source, job, variant) -> same 16-hex key (module docstring)."""
    if source == "megatron_bridge_perf":
        variant: Any = json.loads(r["orig"] or "{}").get("_variant", "")
    elif source == "automodel_perf":
        variant = ""
    elif source in ("torchtitan", "pytorch_fsdp_ibm"):
        orig = json.loads(r["orig"] or "{}")
        variant = [r["table"], sorted((k, str(v)) for k, v in orig.items()
                                      if not _MEASURED.search(k))]  # fmt: skip
    else:
        variant = r["table"]
    payload = json.dumps([source, job.model_dump(mode="json"), variant], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
