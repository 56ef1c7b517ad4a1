"""The :class:`Workload` spec: what is trained (or served), on what, at which scale.

A workload is one data-parallel training (``mode="train"``) or inference (``mode="infer"``) job:
an architecture (``family`` plus its size fields), a per-rank ``batch_size`` and ``seq_len``, a
``world_size`` (number of ranks over ``num_nodes`` nodes), a numeric ``precision``, the number of
samples in one epoch (``dataset_size``) and the ``device_name``/``backend`` it runs on.

Decisions (written here because nobody answers questions):

* Vision families (``vit``, ``deit``) derive ``seq_len`` from ``image_size`` and ``patch_size``:
  ``(image_size / patch_size) ** 2`` patches plus the class token (plus the distillation token for
  DeiT). A ``seq_len`` given for a vision family must equal that number or be omitted.
* ``t5`` is encoder-decoder: ``seq_len`` is the encoder length, ``decoder_seq_len`` the decoder's.
* ``device_name`` is part of the spec, hence of ``workload_id``: the same architecture measured on
  two machines is two workloads. One naming on every path (CLI, design, pipeline, Python): a spec
  that names no device runs on this host's, ``scaledl.devices.local.local_device_name()``
  (``cpu:<processor model>`` or ``cuda:<GPU name>``), and the old-style bare ``cpu`` / ``cuda``
  is normalised to this host's device of that kind (a bare ``cuda`` on a host without CUDA is an
  error). ``backend`` defaults to ``nccl`` for CUDA devices and ``gloo`` otherwise. A predictor
  reading a workloads file resolves a missing or bare device against its training devices
  instead (:class:`scaledl.Predictor`).
* ``hf`` workloads are completed and checked against their config when parsed (architecture
  fields, position table, attention geometry, vision fields): see :mod:`scaledl.workloads.hf`.
* A NaN or infinite number is never a value: in a mapping (Python dict, YAML, JSON, ``--set``)
  it is an error naming the field (:meth:`Workload.parse`). In a table (DataFrame, CSV,
  parquet) an empty cell is a field not given, since rows of several families leave each
  other's fields empty, except in :data:`SCALE_FIELDS`, the numbers every workload has, where
  it is an error (:func:`table_row`).
* An integer field takes an integer, or an integral float (``2.0``: a table's integer column
  that has an empty cell is read as floats); a fractional float (``2.5``) and a boolean
  (``true``, which pydantic would read as 1) are errors naming the field and the value.
* ``workload_id`` is the first 16 hex digits of the SHA-256 of the normalised spec as sorted JSON
  (fields equal to their default included, except the layout fields of a plain-DDP workload),
  so it is stable across processes and releases.
* Tensor, pipeline and sharded data parallelism are the layout fields ``dp_size``, ``tp_size``,
  ``pp_size``, ``micro_batches``, ``pipeline_schedule`` and ``sharding``; their defaults are
  plain DDP (:mod:`scaledl.workloads.parallelism`).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import numbers
import re
from typing import Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from scaledl.io.excerpt import excerpt
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.hf import fill_hf_workload
from scaledl.workloads.parallelism import (
    LAYOUT_FIELDS,
    PipelineSchedule,
    Sharding,
    check_layout,
    fill_layout,
    is_data_parallel,
)

FAMILIES = ("bert", "vit", "t5", "llama", "deit", "hf")
VISION_FAMILIES = ("vit", "deit")
Family = Literal["bert", "vit", "t5", "llama", "deit", "hf"]
#: Numeric precisions of a workload and the bytes of one element (parameter, gradient,
#: activation) in each: the one table the memory model, the design's cost model and the
#: validation's all-reduce check read.
PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
PRECISIONS = tuple(PRECISION_BYTES)
Precision = Literal["fp32", "bf16", "fp16"]

#: Columns that workload tables carry beside the spec (design and profile tables, predictions);
#: :meth:`Workload.from_record` ignores them. Any other unknown column is an error.
RECORD_METADATA_COLUMNS = frozenset(
    {"workload_id", "sampler", "seed", "log_det", "d_efficiency", "steps_per_epoch"}
)


#: Numeric fields every workload has: an empty table cell there is an error (:func:`table_row`).
SCALE_FIELDS = ("batch_size", "world_size", "num_nodes", "dataset_size")
#: Fields whose ``None`` in a mapping is an error, not "not given" (their default is not None;
#: ``device_name``'s ``None`` means this host's or the predictor's device).
_NONE_IS_VALUE = frozenset(SCALE_FIELDS) | {"family", "precision", "mode", "backend"}


class Workload(BaseModel):
    """One distributed deep-learning workload to profile or predict.

    Attributes:
        family: model family: ``bert``, ``vit``, ``t5``, ``llama``, ``deit``, or ``hf`` (any
            Hugging Face config JSON given by ``config_path``).
        hidden_size: model width d_model.
        num_layers: transformer blocks (the encoder's, for ``t5``).
        num_heads: attention heads; must divide ``hidden_size``.
        num_kv_heads: key/value heads (``llama`` grouped-query attention); divides ``num_heads``.
        intermediate_size: feed-forward inner width.
        vocab_size: vocabulary size (text families).
        max_positions: maximum positions the model accepts (text families).
        image_size: image side in pixels (vision families).
        patch_size: patch side in pixels; must divide ``image_size``.
        num_channels: image channels.
        num_labels: classifier classes (vision families).
        decoder_num_layers: decoder blocks (``t5``); defaults to ``num_layers``.
        decoder_seq_len: decoder tokens (``t5``).
        config_path: Hugging Face config JSON (``family="hf"``).
        seq_len: tokens per sample (patches + special tokens for vision, derived).
        batch_size: samples per data-parallel replica per iteration (per rank for plain DDP).
        world_size: ranks in total, ``dp_size * tp_size * pp_size``.
        num_nodes: nodes the ranks span.
        precision: ``fp32``, ``bf16`` or ``fp16``.
        mode: ``train`` (forward + backward + all-reduce + AdamW step) or ``infer`` (forward).
        dataset_size: samples in one epoch (all ranks together).
        device_name: the device the workload runs on (``cpu:<model>`` or ``cuda:<GPU name>``);
            default this host's device, bare ``cpu``/``cuda`` normalised (module docstring).
        backend: ``gloo`` or ``nccl``; default ``nccl`` on CUDA devices, ``gloo`` otherwise.
        dp_size: data-parallel replicas (derived from ``world_size`` when not given).
        tp_size: tensor-parallel ranks per replica.
        pp_size: pipeline stages per replica.
        micro_batches: micro-batches per iteration of a pipeline.
        pipeline_schedule: ``gpipe`` or ``1f1b``.
        sharding: ``none`` (DDP), ``zero1``, ``zero2`` or ``fsdp`` (ZeRO-3; alias ``zero3``).
            The layout fields and their rules: :mod:`scaledl.workloads.parallelism`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: Family
    hidden_size: int | None = Field(default=None, gt=0)
    num_layers: int | None = Field(default=None, gt=0)
    num_heads: int | None = Field(default=None, gt=0)
    num_kv_heads: int | None = Field(default=None, gt=0)
    intermediate_size: int | None = Field(default=None, gt=0)
    vocab_size: int | None = Field(default=None, gt=0)
    max_positions: int | None = Field(default=None, gt=0)
    image_size: int | None = Field(default=None, gt=0)
    patch_size: int | None = Field(default=None, gt=0)
    num_channels: int | None = Field(default=None, gt=0)
    num_labels: int | None = Field(default=None, gt=0)
    decoder_num_layers: int | None = Field(default=None, gt=0)
    decoder_seq_len: int | None = Field(default=None, gt=0)
    config_path: str | None = None
    seq_len: int | None = Field(default=None, gt=0)
    batch_size: int = Field(gt=0)
    world_size: int = Field(default=1, gt=0)
    num_nodes: int = Field(default=1, gt=0)
    precision: Precision = "fp32"
    mode: Literal["train", "infer"] = "train"
    dataset_size: int = Field(default=256, gt=0)
    device_name: str  # filled by _fill_defaults: this host's device when not given
    backend: Literal["gloo", "nccl"] = "gloo"
    dp_size: int = Field(gt=0)  # filled by _fill_defaults from world_size
    tp_size: int = Field(default=1, gt=0)
    pp_size: int = Field(default=1, gt=0)
    micro_batches: int = Field(default=1, gt=0)
    pipeline_schedule: PipelineSchedule = "1f1b"
    sharding: Sharding = "none"

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_int(cls, value: Any, info: ValidationInfo) -> Any:
        """Refuse a boolean for an integer field (pydantic's lax mode reads ``true`` as 1)."""
        if isinstance(value, (bool, np.bool_)) and _is_int_field(cls.model_fields[info.field_name]):
            raise ValueError("a boolean where an integer is expected; give a number")
        return value

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = {
            k: v
            for k, v in data.items()
            if v is not None or k in _NONE_IS_VALUE or k not in cls.model_fields
        }
        family = data.get("family")
        defaults = _FAMILY_DEFAULTS.get(family, {})
        for key, value in defaults.items():
            data.setdefault(key, value)
        if family == "t5":
            data.setdefault("decoder_num_layers", data.get("num_layers"))
            data.setdefault("decoder_seq_len", data.get("seq_len"))
        if family == "llama":
            data.setdefault("num_kv_heads", data.get("num_heads"))
        _fill_device(data)
        fill_layout(data)
        if family == "hf" and data.get("config_path"):
            data = fill_hf_workload(data)
        if family in VISION_FAMILIES and data.get("image_size") and data.get("patch_size"):
            image, patch = int(data["image_size"]), int(data["patch_size"])
            if image % patch == 0:
                derived = (image // patch) ** 2 + (2 if family == "deit" else 1)
                if data.get("seq_len") is None:
                    data["seq_len"] = derived
                elif int(data["seq_len"]) != derived:
                    raise ValueError(
                        f"seq_len={data['seq_len']} does not match image_size={image} and "
                        f"patch_size={patch} ({derived} tokens for {family})"
                    )
        return data

    @model_validator(mode="after")
    def _check_consistency(self) -> Workload:
        if self.family == "hf":
            # The architecture was checked against the config (scaledl.workloads.hf).
            if not self.config_path:
                raise ValueError("config_path is required for family='hf'")
            if self.seq_len is None:
                raise ValueError("seq_len is required for family='hf' (text configs)")
        else:
            self._check_architecture()
        if self.num_nodes > self.world_size:
            raise ValueError(f"num_nodes={self.num_nodes} exceeds world_size={self.world_size}")
        if self.world_size % self.num_nodes:
            raise ValueError(f"num_nodes={self.num_nodes} must divide world_size={self.world_size}")
        if self.backend == "nccl" and not self.device_name.startswith("cuda"):
            raise ValueError(
                f"backend='nccl' needs a CUDA device, got device_name={self.device_name!r}"
            )
        check_layout(self)
        return self

    def _check_architecture(self) -> None:
        """Required fields and geometry of the built-in families."""
        fam = self.family
        required = ["hidden_size", "num_layers", "num_heads", "intermediate_size"]
        if fam in VISION_FAMILIES:
            required += ["image_size", "patch_size"]
        else:
            required += ["vocab_size"]
        for name in required:
            if getattr(self, name) is None:
                raise ValueError(f"{name} is required for family={fam!r}")
        # Before requiring seq_len: a vision seq_len is derived, and only when patch divides image.
        if fam in VISION_FAMILIES and self.image_size % self.patch_size:
            raise ValueError(
                f"patch_size={self.patch_size} must divide image_size={self.image_size}"
            )
        if self.seq_len is None:
            raise ValueError(f"seq_len is required for family={fam!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"num_heads={self.num_heads} must divide hidden_size={self.hidden_size}"
            )
        if self.num_kv_heads is not None and self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads={self.num_kv_heads} must divide num_heads={self.num_heads}"
            )
        if self.max_positions is not None and self.seq_len > self.max_positions:
            default = _FAMILY_DEFAULTS.get(fam, {}).get("max_positions")
            origin = f" ({fam}'s default when not given)" if self.max_positions == default else ""
            raise ValueError(
                f"seq_len={self.seq_len} exceeds max_positions={self.max_positions}{origin}; "
                f"give max_positions of at least {self.seq_len} for longer sequences"
            )

    # ------------------------------------------------------------------ derived quantities
    @property
    def workload_id(self) -> str:
        """Stable 16-hex-digit id: SHA-256 of the normalised spec as sorted JSON."""
        payload = json.dumps(self.spec_dict(), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def spec_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready fields; a plain-DDP workload leaves out the layout fields.

        What ``workload_id`` hashes and :meth:`to_record` writes, so DDP workloads keep the ids
        and rows they had before layouts existed (:mod:`scaledl.workloads.parallelism`).
        """
        exclude = set(LAYOUT_FIELDS) if is_data_parallel(self) else None
        return self.model_dump(mode="json", exclude=exclude)

    @property
    def global_batch_size(self) -> int:
        """Samples per iteration over all data-parallel replicas (``batch_size * dp_size``)."""
        return self.batch_size * self.dp_size

    @property
    def steps_per_epoch(self) -> int:
        """Iterations in one epoch: ``ceil(dataset_size / (batch_size * dp_size))``."""
        return math.ceil(self.dataset_size / self.global_batch_size)

    @property
    def is_vision(self) -> bool:
        """True for image families (``vit``, ``deit``) and ``hf`` vision configs."""
        return self.family in VISION_FAMILIES or (
            self.family == "hf" and self.image_size is not None
        )

    def to_record(self) -> dict[str, Any]:
        """The spec as a flat dict with ``workload_id`` first (one row of the workloads table)."""
        return {"workload_id": self.workload_id, **self.spec_dict()}

    @classmethod
    def parse(cls, data: dict[str, Any], source: str = "<input>") -> Workload:
        """Validate a mapping (a Python dict, a YAML or JSON entry) into a :class:`Workload`.

        A field given as ``None`` is not given when it stays ``None`` (what :meth:`model_dump`
        writes for a field the workload does not have); an empty value that a default would
        replace, and a NaN or infinite number, are errors for every field, never a silent
        default. Table rows, whose empty cells are
        NaN, go through :meth:`from_record`.

        Args:
            data: the spec fields.
            source: where the mapping came from (file and row), named in errors.

        Returns:
            The validated workload.

        Raises:
            WorkloadError: naming ``source``, the field and the offending value.
        """
        if not isinstance(data, dict):
            raise WorkloadError(
                f"{source}: a workload must be a mapping of fields, got {excerpt(data)}"
            )
        for key, value in data.items():
            if isinstance(value, numbers.Real) and not math.isfinite(value):
                field = cls.model_fields.get(key)
                omit = (
                    ", or omit the field to take its default"
                    if field is not None and not field.is_required()
                    else ""
                )
                raise WorkloadError(
                    f"{source}: invalid workload: field {key!r} (value {excerpt(value)}): not a "
                    f"finite number; give a number{omit}"
                )
        try:
            workload = cls.model_validate(dict(data))
        except ValidationError as exc:
            raise WorkloadError(
                f"{source}: invalid workload: " + "; ".join(_problems(exc, data))
            ) from None
        for key, value in data.items():
            filled = getattr(workload, key, None) if key != "device_name" else None
            if value is None and filled is not None:
                raise WorkloadError(
                    f"{source}: invalid workload: field {key!r} (value None): an empty value, "
                    f"which would silently become {filled!r}; give a value, or omit the field "
                    "to take that default"
                )
        return workload

    @classmethod
    def from_record(cls, record: Any, source: str = "<input>", table: bool = True) -> Workload:
        """:meth:`parse` a table row, ignoring :data:`RECORD_METADATA_COLUMNS`.

        Args:
            record: the row's cells by column.
            source: the file and row, named in errors.
            table: the row comes from a table (DataFrame, CSV, parquet): its empty cells are
                handled by :func:`table_row`; ``False``: a mapping, as :meth:`parse`.

        Raises:
            WorkloadError: as :meth:`parse` and :func:`table_row`; an unknown column is an
                error (with a suggestion), never silently dropped.
        """
        if not isinstance(record, dict):
            raise WorkloadError(
                f"{source}: a workload must be a mapping of fields, got {excerpt(record)}"
            )
        kept = {k: v for k, v in record.items() if k not in RECORD_METADATA_COLUMNS}
        return cls.parse(table_row(kept, source) if table else kept, source)


def _is_int_field(info: Any) -> bool:
    """Whether a pydantic field holds an integer (``int`` or ``int | None``)."""
    return info.annotation is int or int in getattr(info.annotation, "__args__", ())


def _problems(exc: ValidationError, data: dict[str, Any]) -> list[str]:
    """One ``field 'name' (value ...): message`` per pydantic error."""
    problems = []
    for err in exc.errors():
        message = err["msg"].removeprefix("Value error, ")
        if err["loc"]:
            field = ".".join(str(p) for p in err["loc"])
            value = data.get(err["loc"][0])
            if err["type"] == "extra_forbidden":
                close = difflib.get_close_matches(field, list(Workload.model_fields), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                message = "unknown field" + hint
            problems.append(f"field {field!r} (value {excerpt(value)}): {message}")
        else:
            # Cross-field checks name their first field at the start of the message.
            named = re.match(r"(\w+)(=| is required| does not)", message)
            field = named.group(1) if named else "<spec>"
            problems.append(f"field {field!r}: {message}")
    return problems


def table_row(record: dict[str, Any], source: str) -> dict[str, Any]:
    """A table row as a workload mapping: its empty cells are the fields it does not give.

    A table has a cell in every column, so the rows of one family leave the fields of the
    others empty (NaN or ``None``): such a cell is dropped (``precision`` and ``mode`` then take
    their defaults, ``fp32`` and ``train``). A number every workload has (:data:`SCALE_FIELDS`:
    batch, ranks, nodes, dataset size) must not be empty: its default would silently replace a
    value the row was meant to have.

    Args:
        record: the row's cells by column.
        source: the file and row, named in errors.

    Returns:
        The cells that hold values.

    Raises:
        WorkloadError: an empty cell in a :data:`SCALE_FIELDS` column (naming source, field).
    """
    for name in SCALE_FIELDS:
        if name in record and is_missing(record[name]):
            raise WorkloadError(
                f"{source}: invalid workload: field {name!r} (value {excerpt(record[name])}): "
                "empty cell; every workload has this field: fill the cell, or drop the column to "
                "take its default for every row"
            )
    return {k: v for k, v in record.items() if not is_missing(v)}


def _fill_device(data: dict[str, Any]) -> None:
    """Name the device in full (this host's by default) and default the backend to match it."""
    # devices.local loads torch; only resolving a local device name needs it.
    from scaledl.devices.local import local_device_name, local_devices, normalise_device_name

    device = data.get("device_name")
    if device is None:
        device = local_device_name()
    elif isinstance(device, str):
        device = normalise_device_name(device, local_devices(), "this host")
    data["device_name"] = device
    if isinstance(device, str):
        data.setdefault("backend", "nccl" if device.startswith("cuda") else "gloo")


def is_missing(value: Any) -> bool:
    """True for ``None`` and NaN (an empty table cell)."""
    if value is None:
        return True
    try:
        return isinstance(value, float) and math.isnan(value)
    except TypeError:
        return False


_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "bert": {"max_positions": 512, "vocab_size": 30522},
    "t5": {"max_positions": 512, "vocab_size": 32128},
    "llama": {"max_positions": 2048, "vocab_size": 32000},
    "vit": {"num_channels": 3, "num_labels": 1000},
    "deit": {"num_channels": 3, "num_labels": 1000},
}


def micro_batch_activation_bytes(w: Workload) -> int:
    """Bytes of one micro-batch's ``tokens x hidden`` activation (``batch / m * seq * h``).

    The buffer tensor parallelism all-reduces after a unit and a pipeline stage sends, and the
    size the profiler's blocking all-reduce and tensor-parallel probes run at.

    Args:
        w: the layout workload (``micro_batches`` 1 without a pipeline).

    Returns:
        Bytes, at the workload's precision (:data:`PRECISION_BYTES`).
    """
    tokens = (w.batch_size // w.micro_batches) * w.seq_len
    return tokens * w.hidden_size * PRECISION_BYTES[w.precision]
