"""The parallel layout of a workload: data, tensor and pipeline parallelism, and sharding.

A workload's ``world_size`` ranks are arranged as ``dp_size x tp_size x pp_size``:

* ``tp_size``: tensor-parallel ranks (Megatron-style column/row-wise split of each block's
  attention and feed-forward; Shoeybi et al. 2019, arXiv 1909.08053). Each rank holds
  ``num_heads / tp_size`` heads and ``intermediate_size / tp_size`` feed-forward columns.
* ``pp_size``: pipeline stages, each holding ``num_layers / pp_size`` blocks (encoder plus
  decoder blocks for encoder-decoder models). The per-replica batch is split into
  ``micro_batches`` micro-batches run by ``pipeline_schedule``: ``gpipe`` (all forwards, then all
  backwards; Huang et al. 2019) or ``1f1b`` (one forward, one backward; Narayanan et al. 2019,
  PipeDream-Flush). Both have the bubble ``(p - 1) / (m + p - 1)`` of the iteration.
* ``dp_size``: data-parallel replicas, ``world_size / (tp_size * pp_size)``. ``sharding`` says
  what the replicas shard (Rajbhandari et al. 2020, ZeRO): ``none`` (DDP), ``zero1`` (optimizer
  state), ``zero2`` (plus gradients), ``fsdp`` (plus parameters: ZeRO-3, PyTorch FSDP2;
  ``zero3`` is accepted as its alias).

Decisions (written here because nobody answers questions):

* ``batch_size`` stays "samples per data-parallel replica per iteration": the ranks of one
  tensor/pipeline group see the same samples, so the global batch is ``batch_size * dp_size``.
  For plain data parallelism ``dp_size == world_size`` and nothing changes.
* A workload with the defaults (``tp_size = pp_size = micro_batches = 1``, ``sharding="none"``,
  ``pipeline_schedule="1f1b"``) is plain DDP: its layout fields are left out of
  ``workload_id`` and of its table row, so every DDP workload keeps the id and the row it had
  before layouts existed.
* ``micro_batches > 1`` needs ``pp_size > 1`` (gradient accumulation without a pipeline is not a
  layout ScaleDL models); it must divide ``batch_size``.
* ``pp_size`` must divide the number of blocks, ``tp_size`` must divide the heads (the key/value
  heads too) and the feed-forward width, and sharding needs ``dp_size >= 2`` and training.
"""

from __future__ import annotations

import numbers
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

#: The layout fields of :class:`scaledl.workloads.spec.Workload`, in table order.
LAYOUT_FIELDS = ("dp_size", "tp_size", "pp_size", "micro_batches", "pipeline_schedule", "sharding")
PIPELINE_SCHEDULES = ("gpipe", "1f1b")
PipelineSchedule = Literal["gpipe", "1f1b"]
SHARDINGS = ("none", "zero1", "zero2", "fsdp")
Sharding = Literal["none", "zero1", "zero2", "fsdp"]
#: Defaults of the layout fields other than ``dp_size`` (derived): plain data parallelism.
LAYOUT_DEFAULTS: dict[str, Any] = {
    "tp_size": 1,
    "pp_size": 1,
    "micro_batches": 1,
    "pipeline_schedule": "1f1b",
    "sharding": "none",
}
#: Reads a string as the spec's integer fields do (pydantic's lax mode), for :func:`_as_int`.
_INT = TypeAdapter(int)
#: Other names of a sharding, accepted wherever a sharding is (a workload, the planner's
#: layout space, a :class:`~scaledl.workloads.training_job.TrainingJob`): the one alias table.
#: Megatron's distributed optimizer shards optimizer states (ZeRO-1); PyTorch FSDP's
#: ``FULL_SHARD`` / ``SHARD_GRAD_OP`` / ``HYBRID_SHARD`` are ZeRO-3 / ZeRO-2 / HSDP (``hsdp``
#: is a training-job sharding only).
SHARDING_ALIASES = {
    "zero3": "fsdp",
    "fsdp2": "fsdp",
    "ddp": "none",
    "distributed_optimizer": "zero1",
    "full_shard": "fsdp",
    "fsdp_full": "fsdp",
    "shard_grad_op": "zero2",
    "fsdp_grad_op": "zero2",
    "hybrid_shard": "hsdp",
}


def normalise_sharding(value: Any) -> Any:
    """A sharding's own name for an alias (:data:`SHARDING_ALIASES`); anything else unchanged."""
    return SHARDING_ALIASES.get(value, value) if isinstance(value, str) else value


def fill_layout(data: dict[str, Any]) -> None:
    """Default the layout fields of a workload mapping in place and derive the missing size.

    ``world_size`` and ``dp_size`` complete each other: given one (or neither: one rank), the
    other follows from ``world_size = dp_size * tp_size * pp_size``.

    Raises:
        ValueError: ``world_size`` not equal to that product, or not divisible by
            ``tp_size * pp_size`` (the message starts with the field's name).
    """
    if "sharding" in data:
        data["sharding"] = normalise_sharding(data["sharding"])
    for key, value in LAYOUT_DEFAULTS.items():
        data.setdefault(key, value)
    tp, pp = _as_int(data["tp_size"]), _as_int(data["pp_size"])
    if tp is None or pp is None or tp <= 0 or pp <= 0:
        # The field validators name the bad size; no second error about the derived one.
        data.setdefault("dp_size", _as_int(data.get("world_size")) or 1)
        return
    model_ranks = tp * pp
    world, dp = _as_int(data.get("world_size")), _as_int(data.get("dp_size"))
    if world is None and data.get("world_size") is not None:
        data.setdefault("dp_size", 1)  # the field validator names the bad world size
        return
    if data.get("dp_size") is None and data.get("world_size") is None:
        data["dp_size"], data["world_size"] = 1, model_ranks
    elif data.get("dp_size") is None and world is not None:
        if world % model_ranks:
            raise ValueError(
                f"world_size={world} is not divisible by tp_size * pp_size = {tp} * {pp}"
            )
        data["dp_size"] = world // model_ranks
    elif data.get("world_size") is None and dp is not None:
        data["world_size"] = dp * model_ranks
    elif world is not None and dp is not None and world != dp * model_ranks:
        raise ValueError(
            f"world_size={world} must equal dp_size * tp_size * pp_size = {dp} * {tp} * {pp}"
        )


def _as_int(value: Any) -> int | None:
    """An integral number (a table's ``2.0`` included) as ``int``; anything else ``None``.

    A string is read as the spec's integer fields read it (pydantic's lax mode: ``"2"``,
    ``"2.0"``), so a table of strings derives the sizes the spec then holds.
    """
    if isinstance(value, str):
        try:
            return _INT.validate_python(value)
        except ValidationError:
            return None
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return int(value)
    return None


def is_data_parallel(workload: Any) -> bool:
    """True when a workload's layout is plain DDP (every layout field at its default)."""
    return all(getattr(workload, k) == v for k, v in LAYOUT_DEFAULTS.items())


def check_layout(workload: Any) -> None:
    """Check a validated workload's layout against its architecture and mode.

    Args:
        workload: a :class:`scaledl.workloads.spec.Workload` with its architecture filled.

    Raises:
        ValueError: the first problem, its message starting with the field's name.
    """
    w = workload
    if w.micro_batches > 1 and w.pp_size == 1:
        raise ValueError(
            f"micro_batches={w.micro_batches} needs pipeline parallelism (pp_size > 1)"
        )
    if w.batch_size % w.micro_batches:
        raise ValueError(f"micro_batches={w.micro_batches} must divide batch_size={w.batch_size}")
    if w.sharding != "none" and w.mode != "train":
        raise ValueError(f"sharding={w.sharding!r} shards training state; mode={w.mode!r}")
    if w.sharding != "none" and w.dp_size < 2:
        raise ValueError(
            f"sharding={w.sharding!r} shards over the data-parallel ranks; dp_size={w.dp_size}"
        )
    if w.tp_size > 1:
        _check_tensor_parallel(w)
    if w.pp_size > 1:
        blocks = (w.num_layers or 0) + (w.decoder_num_layers or 0 if w.family == "t5" else 0)
        if blocks and blocks % w.pp_size:
            raise ValueError(f"pp_size={w.pp_size} must divide the {blocks} blocks of the model")


def _check_tensor_parallel(w: Any) -> None:
    for name in ("num_heads", "num_kv_heads", "intermediate_size"):
        value = getattr(w, name)
        if value is not None and value % w.tp_size:
            raise ValueError(f"tp_size={w.tp_size} must divide {name}={value}")


def layout_label(workload: Any) -> str:
    """A short human name of the layout, e.g. ``dp2``, ``tp2``, ``pp2-gpipe-m4``, ``dp2-fsdp``."""
    w = workload
    parts = []
    if w.dp_size > 1 or (w.tp_size == 1 and w.pp_size == 1):
        parts.append(f"dp{w.dp_size}" + ("" if w.sharding == "none" else f"-{w.sharding}"))
    if w.tp_size > 1:
        parts.append(f"tp{w.tp_size}")
    if w.pp_size > 1:
        parts.append(f"pp{w.pp_size}-{w.pipeline_schedule}-m{w.micro_batches}")
    return "-".join(parts)
