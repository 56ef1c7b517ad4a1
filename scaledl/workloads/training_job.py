"""One LLM training job at scale: a dense decoder-only transformer, its GPUs and its layout.

A :class:`TrainingJob` is what ScaleDL composes one optimizer step of (``compose_step``), plans
layouts for, and what the published-runs importer turns each CSV row into. Its ``n_gpus`` ranks
are ``tp_size x cp_size x dp_size x pp_size``, numbered tp fastest, then cp, dp and pp
(Megatron-Core's default order ``tp-cp-ep-dp-pp``), so a TP group shares a node whenever
``tp_size <= gpus_per_node``:

* ``tp_size``: tensor parallelism (Shoeybi et al. 2019): each rank holds ``num_heads / tp``
  query heads, ``ffn_size / tp`` feed-forward columns; ``sequence_parallel`` (Korthikanti et
  al. 2022) also splits norms and dropout along the sequence (default: on whenever tp > 1, as
  Megatron-Core's recipes set it).
* ``cp_size``: context parallelism: the sequence split over ``cp`` ranks in ``2 * cp``
  load-balanced chunks (ring attention, Megatron-Core / Transformer Engine).
* ``pp_size`` and ``vp_size``: pipeline stages, each rank running ``vp`` interleaved model
  chunks (Narayanan et al. 2021). ``layers_per_stage`` lists the transformer blocks of the
  ``pp * vp`` virtual stages in Megatron's order: virtual stage ``i = chunk * pp + rank``, so
  entries ``0 .. pp-1`` are the first chunk of ranks ``0 .. pp-1``. ``None``: an even split;
  ``"embedding_and_loss"``: Megatron's ``--account-for-embedding-in-pipeline-split`` and
  ``--account-for-loss-in-pipeline-split`` (the embedding and the loss count as one layer
  each, so the first and last virtual stages hold one block less: Llama 3.1 405B's 126 blocks
  over 8 x 8 stages; :func:`embedding_and_loss_split`).
* ``dp_size``: data-parallel replicas, ``n_gpus / (tp * pp * cp)`` (FSDP ranks count as dp).
  ``sharding`` says what the replicas shard (ZeRO, Rajbhandari et al. 2020): ``none`` (DDP),
  ``zero1`` (optimizer states: Megatron's distributed optimizer), ``zero2`` (plus gradients),
  ``fsdp`` (plus parameters: ZeRO-3, PyTorch FSDP2, Megatron-FSDP over all dp ranks), ``hsdp``
  (FSDP inside groups of ``shard_group_size`` dp ranks, replicated across groups).
* Batches: ``micro_batch`` samples per rank per micro-batch, ``global_batch`` samples per
  optimizer step, ``grad_accum = global_batch / (micro_batch * dp_size)`` micro-batches per
  step per replica (derived; a pipeline runs them as its micro-batches).

Decisions:

* ``precision`` is the GEMM precision of the linear layers: ``fp8`` is per-tensor scaling
  (delayed or current), ``fp8_blockwise`` 128x128 weight / 1x128 activation blocks,
  ``fp8_rowwise`` torchao's per-row scales (composed from its measured linear speedups), ``mxfp8``
  and ``nvfp4`` the micro-scaled formats (Blackwell). Attention, norms and communication stay
  16-bit (bf16) in every low-precision recipe the sources use (Transformer Engine, torchao
  Float8 linears).
* ``gpu`` is resolved to the device table's name (:func:`scaledl.devices.resolve_gpu_name`,
  aliases such as ``GB200 (NVL72)`` included); ``nvlink_domain_size`` ``None`` takes the
  device table's ``nvlink_domain`` (8 on an HGX board, 72 on NVL72); a device whose domain is
  unknown (a PCIe card) then needs it given. ``network_gbps`` (per-GPU scale-out bandwidth one
  direction, GB/s) ``None`` takes the table's; give it where the cluster differs from the
  vendor's reference system.
* ``shard_group_size``: the dp ranks one copy of the sharded state spans. ``None`` is
  ``dp_size`` for ``zero1``/``zero2``/``fsdp`` and 1 for ``none``; ``hsdp`` needs it given,
  dividing ``dp_size``; ``fsdp`` with a smaller group is refused (that layout is ``hsdp``).
* ``tp_size`` must divide ``num_heads`` and ``ffn_size``, and divide ``num_kv_heads`` or be a
  multiple of it (fewer KV heads than tp ranks: each KV head replicated, as Megatron-Core
  does). ``cp_size > 1`` needs ``2 * cp`` to divide ``seq_len``; ``vp_size > 1`` needs
  ``pp_size > 1``; ``sequence_parallel=True`` needs ``tp_size > 1``.
* The GPU must have a peak for the precision's GEMMs (:data:`PEAK_PRECISION`: fp8 needs FP8
  tensor cores, nvfp4 FP4 ones): no fp8 on an A100, no nvfp4 on an H100.
* A job over at least ``gpus_per_node`` GPUs fills whole nodes (``n_gpus % gpus_per_node``);
  a smaller one sits on one node.
* ``attention_kernel`` is the flash-attention kernel the job's framework runs: ``cudnn``
  (Transformer Engine's fused attention, what Megatron-LM, NeMo and Megatron-Bridge run on
  Hopper and Blackwell; the default), ``flash_attention_2`` (PyTorch SDPA's flash backend, which
  eager PyTorch stacks such as torchtitan and FSDP recipes run: PyTorch made its cuDNN backend
  opt-in after 2.5, pytorch/pytorch#138522), ``flash_attention_3`` (Hopper only) or
  ``unfused`` (the scores materialised: two batched GEMMs around a fused scale-mask-softmax and
  attention dropout, Megatron-LM's path before flash attention, 2019-2022). The kernel model
  times each (``scaledl.models.llm_kernels``).
* ``elementwise`` says how the norms, activation and rotary embedding run: ``fused`` (one
  kernel each: Transformer Engine and Megatron's fusions, or ``torch.compile``; the default) or
  ``eager`` (PyTorch's operators one kernel at a time, as torchtitan's Llama writes them:
  RMSNorm in FP32, complex rotary, expanded KV heads; ``scaledl.parallel.llm_step``).
* Mixture-of-experts is not a field: ScaleDL composes dense transformers only.
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from scaledl.devices.specs import (
    UnknownDeviceError,
    device_spec,
    gpu_architecture,
    resolve_gpu_name,
)
from scaledl.io.excerpt import excerpt
from scaledl.io.safe import read_text
from scaledl.workloads.parallelism import normalise_sharding

Precision = Literal["fp32", "bf16", "fp16", "fp8", "fp8_blockwise", "fp8_rowwise", "mxfp8", "nvfp4"]
Sharding = Literal["none", "zero1", "zero2", "fsdp", "hsdp"]
Recompute = Literal["none", "selective", "full"]
Task = Literal["pretrain", "sft", "lora"]
AttentionKernel = Literal["cudnn", "flash_attention_2", "flash_attention_3", "unfused"]
Elementwise = Literal["fused", "eager"]
PRECISIONS: tuple[str, ...] = Precision.__args__
SHARDINGS: tuple[str, ...] = Sharding.__args__
RECOMPUTES: tuple[str, ...] = Recompute.__args__
TASKS: tuple[str, ...] = Task.__args__
ATTENTION_KERNELS: tuple[str, ...] = AttentionKernel.__args__
ELEMENTWISE: tuple[str, ...] = Elementwise.__args__
#: Bytes of one GEMM operand element per precision (the weights' storage for the 8/4-bit
#: formats; master weights and optimizer states are fp32 in every recipe).
PRECISION_BYTES = {
    "fp32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "fp8_blockwise": 1,
    "fp8_rowwise": 1,
    "mxfp8": 1,
    "nvfp4": 0.5,
}
#: The device-table peak column a precision's GEMMs run at (``DeviceSpec.peak_flops_per_s``).
PEAK_PRECISION = {
    "fp32": "fp32",
    "bf16": "bf16",
    "fp16": "fp16",
    "fp8": "fp8",
    "fp8_blockwise": "fp8",
    "fp8_rowwise": "fp8",
    "mxfp8": "fp8",
    "nvfp4": "fp4",
}


class TrainingJobError(ValueError):
    """A training job is invalid; the message names the source, the field and the value."""


class _Strict(BaseModel):
    """Integers are integers: a boolean, text or a fractional number for an int field is an error.

    A quoted ``"32"`` in YAML is text: refused, not converted.
    """

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_int(cls, value: Any, info: ValidationInfo) -> Any:
        annotation = cls.model_fields[info.field_name].annotation
        is_int = annotation is int or int in getattr(annotation, "__args__", ())
        if is_int and isinstance(value, bool):
            raise ValueError("a boolean where an integer is expected; give a number")
        if is_int and isinstance(value, str):
            raise ValueError("text where an integer is expected; write the number without quotes")
        if annotation is bool and not isinstance(value, bool):
            raise ValueError("expected true or false")
        return value


class ModelShape(_Strict):
    """A dense decoder-only transformer (Llama / GPT style).

    Attributes:
        hidden_size: model width h.
        num_layers: transformer blocks.
        num_heads: query heads; divides ``hidden_size`` (head dim ``h / num_heads``).
        num_kv_heads: key/value heads (grouped-query attention); divides ``num_heads``.
        ffn_size: feed-forward inner width.
        vocab_size: vocabulary (the embedding and output layer rows).
        gated_mlp: SwiGLU/GeGLU (3 feed-forward GEMMs: gate, up, down) or a plain GELU /
            squared-ReLU MLP (2: up, down).
        tied_embeddings: the output layer shares the input embedding's weights.
        linear_bias: the attention and MLP linears have biases (GPT-2/3); Llama's do not.
        norm: ``rmsnorm`` (a weight per channel) or ``layernorm`` (weight and bias).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    ffn_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    gated_mlp: bool = True
    tied_embeddings: bool = False
    linear_bias: bool = False
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"

    @model_validator(mode="after")
    def _check_heads(self) -> ModelShape:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"num_heads={self.num_heads} must divide hidden_size={self.hidden_size}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads={self.num_kv_heads} must divide num_heads={self.num_heads}"
            )
        return self

    @property
    def head_dim(self) -> int:
        """Channels per attention head, ``hidden_size / num_heads``."""
        return self.hidden_size // self.num_heads

    @property
    def kv_size(self) -> int:
        """Width of the key (and of the value) projection, ``num_kv_heads * head_dim``."""
        return self.num_kv_heads * self.head_dim

    def layer_params(self) -> int:
        """Parameters of one transformer block (attention, MLP, two norms)."""
        h, kv, f = self.hidden_size, self.kv_size, self.ffn_size
        attention = h * h + 2 * h * kv + h * h  # q, k, v, o
        mlp = (3 if self.gated_mlp else 2) * h * f
        if self.linear_bias:
            attention += h + 2 * kv + h
            mlp += (2 * f if self.gated_mlp else f) + h
        return attention + mlp + 2 * self._norm_params()

    def n_params(self) -> int:
        """Exact parameter count: blocks, final norm, embedding and the untied output layer.

        Rotary position embeddings have no parameters; a learned position table (GPT-2) is not
        counted.
        """
        embedding = self.vocab_size * self.hidden_size
        output = 0 if self.tied_embeddings else embedding
        return self.num_layers * self.layer_params() + self._norm_params() + embedding + output

    def _norm_params(self) -> int:
        return self.hidden_size * (2 if self.norm == "layernorm" else 1)


class TrainingJob(_Strict):
    """One LLM training job: model, GPUs, numeric precision, parallel layout and batch.

    The layout rules and defaults are in the module docstring.

    Attributes:
        model: the transformer (:class:`ModelShape`).
        seq_len: tokens per sample.
        gpu: the device table's GPU name (aliases resolved when validated).
        n_gpus: GPUs (ranks) in total.
        gpus_per_node: GPUs per node (per compute tray on GB200/GB300 NVL72: 4).
        nvlink_domain_size: GPUs per NVLink domain (filled from the device table).
        network_gbps: scale-out bandwidth per GPU, one direction, GB/s (filled from the table).
        precision: GEMM precision of the linear layers.
        tp_size: tensor-parallel ranks.
        pp_size: pipeline stages.
        cp_size: context-parallel ranks.
        vp_size: interleaved model chunks per pipeline rank (1: no interleaving).
        dp_size: data-parallel replicas (derived; a given value must agree).
        sequence_parallel: Megatron sequence parallelism (filled: ``tp_size > 1``).
        layers_per_stage: blocks per virtual stage in Megatron's order (``None``: even; given
            as ``"embedding_and_loss"``: :func:`embedding_and_loss_split`).
        sharding: ``none``, ``zero1``, ``zero2``, ``fsdp`` or ``hsdp``.
        shard_group_size: dp ranks one copy of the sharded state spans (filled).
        activation_checkpointing: ``none``, ``selective`` or ``full`` recompute.
        micro_batch: samples per rank per micro-batch.
        global_batch: samples per optimizer step.
        grad_accum: micro-batches per step per replica (derived; a given value must agree).
        task: ``pretrain``, ``sft`` (full fine-tuning) or ``lora``.
        attention_kernel: ``cudnn``, ``flash_attention_2``, ``flash_attention_3`` or
            ``unfused``.
        elementwise: ``fused`` or ``eager`` norms, activation and rotary embedding.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: ModelShape
    seq_len: int = Field(gt=0)
    gpu: str
    n_gpus: int = Field(gt=0)
    gpus_per_node: int = Field(default=8, gt=0)
    nvlink_domain_size: int | None = Field(default=None, gt=0)
    network_gbps: float | None = Field(default=None, gt=0)
    precision: Precision = "bf16"
    tp_size: int = Field(default=1, gt=0)
    pp_size: int = Field(default=1, gt=0)
    cp_size: int = Field(default=1, gt=0)
    vp_size: int = Field(default=1, gt=0)
    dp_size: int = Field(gt=0)
    sequence_parallel: bool | None = None
    layers_per_stage: tuple[int, ...] | None = None
    sharding: Sharding = "zero1"
    shard_group_size: int | None = Field(default=None, gt=0)
    activation_checkpointing: Recompute = "none"
    micro_batch: int = Field(default=1, gt=0)
    global_batch: int = Field(gt=0)
    grad_accum: int = Field(gt=0)
    task: Task = "pretrain"
    attention_kernel: AttentionKernel = "cudnn"
    elementwise: Elementwise = "fused"

    @model_validator(mode="before")
    @classmethod
    def _derive(cls, data: Any) -> Any:
        """Resolve the GPU, fill the device defaults and derive ``dp_size`` and ``grad_accum``."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "sharding" in data:
            data["sharding"] = normalise_sharding(data["sharding"])
        if isinstance(data.get("gpu"), str):
            try:
                data["gpu"] = resolve_gpu_name(data["gpu"])
            except UnknownDeviceError as exc:
                raise ValueError(f"gpu={data['gpu']!r}: {exc}") from None
            spec = device_spec(data["gpu"])
            if data.get("nvlink_domain_size") is None:
                if spec.nvlink_domain <= 0:
                    raise ValueError(
                        f"nvlink_domain_size is required: the device table has no NVLink "
                        f"domain for gpu={data['gpu']!r} (a PCIe card); give it"
                    )
                data["nvlink_domain_size"] = spec.nvlink_domain
            if data.get("network_gbps") is None and spec.network_gbps > 0:
                data["network_gbps"] = spec.network_gbps
        sizes = {k: _as_int(data.get(k, 1)) for k in ("tp_size", "pp_size", "cp_size")}
        n_gpus = _as_int(data.get("n_gpus"))
        if (
            n_gpus is not None
            and n_gpus > 0
            and all(v is not None and v > 0 for v in sizes.values())
        ):
            model_ranks = math.prod(sizes.values())
            if n_gpus % model_ranks:
                raise ValueError(
                    f"n_gpus={n_gpus} is not divisible by tp_size * pp_size * cp_size = "
                    f"{sizes['tp_size']} * {sizes['pp_size']} * {sizes['cp_size']}"
                )
            dp = n_gpus // model_ranks
            if data.get("dp_size") is not None and _as_int(data["dp_size"]) != dp:
                raise ValueError(
                    f"dp_size={data['dp_size']} must equal n_gpus / (tp_size * pp_size * "
                    f"cp_size) = {n_gpus} / {model_ranks} = {dp}"
                )
            data["dp_size"] = dp
            _derive_grad_accum(data, dp)
            if data.get("shard_group_size") is None and data.get("sharding") != "hsdp":
                data["shard_group_size"] = 1 if data.get("sharding") == "none" else dp
        if data.get("layers_per_stage") == EMBEDDING_AND_LOSS:
            data["layers_per_stage"] = _embedding_and_loss_stages(data)
        if data.get("sequence_parallel") is None and sizes["tp_size"] is not None:
            data["sequence_parallel"] = sizes["tp_size"] > 1
        return data

    @model_validator(mode="after")
    def _check_layout(self) -> TrainingJob:
        peak = device_spec(self.gpu).peak_tflops.get(self.peak_precision, math.nan)
        if not peak > 0:
            raise ValueError(
                f"precision={self.precision!r} needs {self.peak_precision} tensor cores; "
                f"gpu={self.gpu!r} has no {self.peak_precision} peak in the device table"
            )
        m, tp = self.model, self.tp_size
        if m.num_heads % tp:
            raise ValueError(f"tp_size={tp} must divide num_heads={m.num_heads}")
        if m.num_kv_heads % tp and tp % m.num_kv_heads:
            raise ValueError(
                f"tp_size={tp} must divide num_kv_heads={m.num_kv_heads} or be a multiple of it"
            )
        if m.ffn_size % tp:
            raise ValueError(f"tp_size={tp} must divide ffn_size={m.ffn_size}")
        if self.sequence_parallel and tp == 1:
            raise ValueError("sequence_parallel=True needs tensor parallelism (tp_size > 1)")
        if self.cp_size > 1 and self.seq_len % (2 * self.cp_size):
            raise ValueError(
                f"cp_size={self.cp_size}: 2 * cp_size must divide seq_len={self.seq_len} "
                "(load-balanced context-parallel chunks)"
            )
        if self.cp_size > 1 and self.attention_kernel == "unfused":
            raise ValueError(
                f"attention_kernel='unfused' cannot run context parallelism (cp_size="
                f"{self.cp_size}): ring attention runs flash-attention chunks"
            )
        if self.attention_kernel == "flash_attention_3" and gpu_architecture(self.gpu) != "hopper":
            raise ValueError(
                f"attention_kernel='flash_attention_3' runs on Hopper GPUs only; gpu={self.gpu!r} "
                f"is {gpu_architecture(self.gpu)} (use cudnn or flash_attention_2)"
            )
        if self.vp_size > 1 and self.pp_size == 1:
            raise ValueError(f"vp_size={self.vp_size} needs pipeline parallelism (pp_size > 1)")
        self._check_stages()
        if self.n_gpus >= self.gpus_per_node and self.n_gpus % self.gpus_per_node:
            raise ValueError(
                f"n_gpus={self.n_gpus} must fill whole nodes of gpus_per_node={self.gpus_per_node}"
            )
        self._check_sharding()
        return self

    def _check_stages(self) -> None:
        stages, layers = self.pp_size * self.vp_size, self.model.num_layers
        if self.layers_per_stage is None:
            if layers % stages:
                raise ValueError(
                    f"pp_size * vp_size = {self.pp_size} * {self.vp_size} = {stages} must "
                    f"divide num_layers={layers} for an even split; give layers_per_stage "
                    f"({stages} numbers summing to {layers}) for an uneven one"
                    + (
                        f", or layers_per_stage: {EMBEDDING_AND_LOSS} (Megatron's embedding and "
                        "loss accounting)"
                        if embedding_and_loss_split(layers, stages) is not None
                        else ""
                    )
                )
            return
        given = self.layers_per_stage
        if len(given) != stages:
            raise ValueError(
                f"layers_per_stage={list(given)} must have pp_size * vp_size = {stages} entries"
            )
        if any(n < 0 for n in given) or sum(given) != layers:
            raise ValueError(
                f"layers_per_stage={list(given)} must be >= 0 and sum to num_layers={layers}"
            )

    def _check_sharding(self) -> None:
        group, dp = self.shard_group_size, self.dp_size
        if self.sharding == "hsdp":
            if group is None:
                raise ValueError("shard_group_size is required for sharding='hsdp'")
            if dp % group:
                raise ValueError(f"shard_group_size={group} must divide dp_size={dp}")
        elif self.sharding == "fsdp" and group not in (None, dp):
            raise ValueError(
                f"shard_group_size={group} with sharding='fsdp' must equal dp_size={dp}; "
                "sharding within smaller groups is sharding='hsdp'"
            )
        elif self.sharding == "none" and group not in (None, 1):
            raise ValueError(f"shard_group_size={group} with sharding='none' must be 1")
        elif group is not None and dp % group:
            raise ValueError(f"shard_group_size={group} must divide dp_size={dp}")

    # ------------------------------------------------------------------ derived quantities
    @property
    def n_nodes(self) -> int:
        """Nodes (trays on NVL72) the job spans: ``ceil(n_gpus / gpus_per_node)``."""
        return -(-self.n_gpus // self.gpus_per_node)

    @property
    def is_multi_node(self) -> bool:
        """Whether the job spans more than one node."""
        return self.n_nodes > 1

    @property
    def n_nvlink_domains(self) -> int:
        """NVLink domains the job spans: ``ceil(n_gpus / nvlink_domain_size)``."""
        return -(-self.n_gpus // self.nvlink_domain_size)

    @property
    def tokens_per_step(self) -> int:
        """Tokens per optimizer step, ``global_batch * seq_len``."""
        return self.global_batch * self.seq_len

    @property
    def model_parallel_size(self) -> int:
        """Ranks of one model replica, ``tp_size * pp_size * cp_size``."""
        return self.tp_size * self.pp_size * self.cp_size

    @property
    def n_virtual_stages(self) -> int:
        """Pipeline model chunks in all, ``pp_size * vp_size``."""
        return self.pp_size * self.vp_size

    @property
    def stage_layers(self) -> tuple[int, ...]:
        """Blocks per virtual stage in Megatron's order (``layers_per_stage`` or even)."""
        if self.layers_per_stage is not None:
            return self.layers_per_stage
        return (self.model.num_layers // self.n_virtual_stages,) * self.n_virtual_stages

    @property
    def rank_layers(self) -> tuple[int, ...]:
        """Blocks each pipeline rank holds (its ``vp_size`` chunks together), rank 0 first."""
        lay = self.stage_layers
        return tuple(sum(lay[c * self.pp_size + r] for c in range(self.vp_size)) for r in
                     range(self.pp_size))  # fmt: skip

    @property
    def peak_precision(self) -> str:
        """The device-table peak column the GEMMs run at (:data:`PEAK_PRECISION`)."""
        return PEAK_PRECISION[self.precision]

    def label(self) -> str:
        """A short layout name, e.g. ``dp16-zero1-tp4-pp2-vp4-cp2-mb1-ga8-full``."""
        parts = [f"dp{self.dp_size}-{self.sharding}"]
        if self.sharding == "hsdp":
            parts[0] += str(self.shard_group_size)
        for name, size in (("tp", self.tp_size), ("pp", self.pp_size), ("vp", self.vp_size),
                           ("cp", self.cp_size)):  # fmt: skip
            if size > 1:
                parts.append(f"{name}{size}")
        parts.append(f"mb{self.micro_batch}-ga{self.grad_accum}")
        if self.activation_checkpointing != "none":
            parts.append(self.activation_checkpointing)
        return "-".join(parts)

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_mapping(cls, data: Any, source: str = "<input>") -> TrainingJob:
        """Validate a mapping (a Python dict, a YAML or JSON document) into a job.

        ``model`` is a mapping of :class:`ModelShape` fields. A NaN or infinite number is an
        error, never a default.

        Args:
            data: the job's fields.
            source: where the mapping came from (file, row), named in errors.

        Returns:
            The validated job.

        Raises:
            TrainingJobError: naming ``source``, each bad field and its value.
        """
        if not isinstance(data, dict):
            raise TrainingJobError(
                f"{source}: a training job must be a mapping of fields, got {excerpt(data)}"
            )
        for key, value in _leaves(data):
            if isinstance(value, numbers.Real) and not math.isfinite(value):
                raise TrainingJobError(
                    f"{source}: invalid training job: field {key!r} (value {excerpt(value)}): "
                    "not a finite number"
                )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise TrainingJobError(
                f"{source}: invalid training job: " + "; ".join(job_problems(exc, data))
            ) from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainingJob:
        """Read a job from a YAML file: a mapping of fields, or ``{job: {...}}``.

        Raises:
            TrainingJobError: unreadable file, not YAML, a key given twice, or an invalid job
                (naming the file, the field and the value).
        """
        from scaledl.workloads.files import load_yaml  # files imports spec; keep this module light

        try:
            data = load_yaml(read_text(path))
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise TrainingJobError(f"{path}: cannot read the training job: {exc}") from None
        except Exception as exc:  # yaml.YAMLError: invalid YAML, a duplicate key
            raise TrainingJobError(f"{path}: not a YAML training job: {exc}") from None
        if isinstance(data, dict) and set(data) == {"job"}:
            data = data["job"]
        return cls.from_mapping(data, str(path))


#: ``layers_per_stage`` value asking for :func:`embedding_and_loss_split`.
EMBEDDING_AND_LOSS = "embedding_and_loss"


def embedding_and_loss_split(num_layers: int, stages: int) -> tuple[int, ...] | None:
    """Megatron's split with the embedding and the loss counted as one layer each.

    ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``
    (the NeMo and Megatron-Bridge 405B recipes): ``num_layers + 2`` layers split evenly over
    ``stages`` virtual stages, so the first and the last hold one block less.

    Args:
        num_layers: transformer blocks.
        stages: ``pp_size * vp_size`` virtual stages, > 1.

    Returns:
        Blocks per virtual stage in Megatron's order, or ``None`` where ``stages`` does not
        divide ``num_layers + 2`` (or is 1).
    """
    if stages <= 1 or (num_layers + 2) % stages:
        return None
    per = (num_layers + 2) // stages
    return (per - 1,) + (per,) * (stages - 2) + (per - 1,)


def _embedding_and_loss_stages(data: dict[str, Any]) -> tuple[int, ...]:
    """``layers_per_stage`` of a job mapping that asks for :data:`EMBEDDING_AND_LOSS`."""
    model = data.get("model")
    layers = _as_int(model.get("num_layers")) if isinstance(model, dict) else None
    pp, vp = _as_int(data.get("pp_size", 1)), _as_int(data.get("vp_size", 1))
    if layers is None or pp is None or vp is None or layers <= 0 or pp <= 0 or vp <= 0:
        raise ValueError(
            f"layers_per_stage={EMBEDDING_AND_LOSS!r} needs valid model.num_layers, pp_size and "
            "vp_size"
        )
    split = embedding_and_loss_split(layers, pp * vp)
    if split is None:
        raise ValueError(
            f"layers_per_stage={EMBEDDING_AND_LOSS!r}: pp_size * vp_size = {pp} * {vp} = "
            f"{pp * vp} must be > 1 and divide num_layers + 2 = {layers + 2}"
        )
    return split


def _derive_grad_accum(data: dict[str, Any], dp: int) -> None:
    """Fill ``grad_accum`` from the batches, or check a given one against them."""
    micro, glob = _as_int(data.get("micro_batch", 1)), _as_int(data.get("global_batch"))
    if micro is None or glob is None or micro <= 0 or glob <= 0:
        return  # the field validators name the bad batch
    per_step = micro * dp
    if glob % per_step:
        raise ValueError(
            f"global_batch={glob} must be a multiple of micro_batch * dp_size = {micro} * {dp} "
            f"= {per_step} (grad_accum would be {glob / per_step:g})"
        )
    accum = glob // per_step
    if data.get("grad_accum") is not None and _as_int(data["grad_accum"]) != accum:
        raise ValueError(
            f"grad_accum={data['grad_accum']} must equal global_batch / (micro_batch * dp_size) "
            f"= {glob} / ({micro} * {dp}) = {accum}"
        )
    data["grad_accum"] = accum


def _as_int(value: Any) -> int | None:
    """An integral number (``2.0`` included) as ``int``; anything else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


def _leaves(data: dict[str, Any], prefix: str = ""):
    """``(dotted key, value)`` of a nested mapping's leaves."""
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def job_problems(exc: ValidationError, data: dict[str, Any]) -> list[str]:
    """One ``field 'name' (value ...): message`` per pydantic error of a job mapping."""
    return [f"field {f!r} (value {excerpt(v)}): {m}" for f, v, m in job_errors(exc, data)]


def job_errors(exc: ValidationError, data: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """``(field, value, message)`` per pydantic error of a job mapping (the importer's form).

    Cross-field errors name their field at the start of the message (``tp_size=3 must ...``):
    that field and its value are returned.
    """
    out = []
    errors = exc.errors()
    derived = {("dp_size",), ("grad_accum",)}
    if any(tuple(e["loc"]) not in derived for e in errors):
        # A derived size is missing because a field it comes from is bad: name only that one.
        errors = [e for e in errors if not (e["type"] == "missing" and tuple(e["loc"]) in derived)]
    for err in errors:
        message = err["msg"].removeprefix("Value error, ")
        loc = [str(p) for p in err["loc"]]
        if loc and loc[-1].isdigit() and len(loc) > 1:
            loc = loc[:-1]  # an element of layers_per_stage: name the field
        named = message.split("=", 1)[0].split(" ", 1)[0] if message else ""
        if loc == ["model"] and err["type"] == "value_error" and named in ModelShape.model_fields:
            loc = ["model", named]  # a ModelShape cross-field check: name its field
        if loc:
            field, value = ".".join(loc), _lookup(data, loc)
            if err["type"] == "extra_forbidden":
                message = "unknown field"
        else:
            field = named or "<job>"
            value = _lookup(data, field.split("."))
            if value is None and field in ModelShape.model_fields:
                value = _lookup(data, ["model", field])
                field = f"model.{field}"
        out.append((field, value, message))
    return out


def _lookup(data: Any, keys: list[str]) -> Any:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data
