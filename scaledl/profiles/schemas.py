"""Column and table specifications of the design and the six profile tables.

Column kinds: ``str`` (Python strings), ``int`` (integral numbers; a float dtype is accepted
because an integer parquet column with nulls reads back as float, and each value is then checked
to be integral), ``number`` (any int or float), ``bool``. Extra columns are allowed everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from scaledl.graph.operators import DESCRIPTOR_COLUMNS, OP_CLASSES, OP_KINDS
from scaledl.profiles.tables import API_COSTS
from scaledl.workloads.fields import ARCHITECTURE_FIELDS
from scaledl.workloads.parallelism import PIPELINE_SCHEDULES, SHARDINGS
from scaledl.workloads.spec import FAMILIES

Kind = Literal["str", "int", "number", "bool"]

RUN_STATUSES = ("ok", "failed", "oom", "timeout")
PRECISIONS = ("fp32", "bf16", "fp16")
MODES = ("train", "infer")
BACKENDS = ("gloo", "nccl")
PHASES = ("instrumented", "label")


@dataclass(frozen=True)
class ColumnSpec:
    """Expectations on one column.

    Attributes:
        name: column name.
        kind: ``str``, ``int``, ``number`` or ``bool``.
        nullable: nulls allowed.
        required: the column must exist (optional columns are checked only when present).
        min_value: smallest allowed value (inclusive unless ``strict_min``).
        strict_min: the minimum is exclusive (``> min_value``).
        max_value: largest allowed value (inclusive).
        max_from_config: name of the :class:`ValidationConfig` field giving the maximum.
        value_set: allowed values.
        unique: values must be unique.
    """

    name: str
    kind: Kind
    nullable: bool = False
    required: bool = True
    min_value: float | None = None
    strict_min: bool = False
    max_value: float | None = None
    max_from_config: str | None = None
    value_set: tuple[str, ...] | None = None
    unique: bool = False


@dataclass(frozen=True)
class TableSpec:
    """Expectations on one table.

    Attributes:
        name: table name (file stem).
        columns: column specifications.
        unique_together: columns whose combination must be unique.
        allow_empty: an empty table is valid.
    """

    name: str
    columns: tuple[ColumnSpec, ...]
    unique_together: tuple[str, ...] = field(default_factory=tuple)
    allow_empty: bool = False

    def column(self, name: str) -> ColumnSpec:
        """Return the specification of one column.

        Args:
            name: column name.

        Returns:
            The column's :class:`ColumnSpec`.

        Raises:
            KeyError: the table has no such column.
        """
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(f"table {self.name!r} has no column {name!r}")


def _ms(name: str, *, positive: bool = True, nullable: bool = False) -> ColumnSpec:
    """Return a millisecond column: > 0 (or >= 0), at most ``max_time_ms``."""
    return ColumnSpec(
        name,
        "number",
        nullable=nullable,
        min_value=0.0,
        strict_min=positive,
        max_from_config="max_time_ms",
    )


def _count(
    name: str, minimum: float = 0, *, nullable: bool = False, required: bool = True
) -> ColumnSpec:
    """Return an integer column with a lower bound."""
    return ColumnSpec(name, "int", nullable=nullable, required=required, min_value=minimum)


_ID = ColumnSpec("run_id", "str")
_WID = ColumnSpec("workload_id", "str")
_RANK = _count("rank")
_STEP = _count("step")

_ARCHITECTURE = tuple(
    ColumnSpec(
        name,
        "number",
        nullable=True,
        required=name
        in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "vocab_size",
            "image_size",
            "patch_size",
        ),
        min_value=0,
        strict_min=True,
    )
    for name in ARCHITECTURE_FIELDS
)

_SPEC_COLUMNS = (
    ColumnSpec("family", "str", value_set=FAMILIES),
    *_ARCHITECTURE,
    ColumnSpec("seq_len", "int", min_value=0, strict_min=True),
    ColumnSpec("batch_size", "int", min_value=0, strict_min=True),
    ColumnSpec("world_size", "int", min_value=0, strict_min=True),
    ColumnSpec("num_nodes", "int", min_value=0, strict_min=True),
    ColumnSpec("precision", "str", value_set=PRECISIONS),
    ColumnSpec("mode", "str", value_set=MODES),
    ColumnSpec("dataset_size", "int", min_value=0, strict_min=True),
    ColumnSpec("device_name", "str"),
    ColumnSpec("backend", "str", value_set=BACKENDS),
    # The layout: absent (or empty) for plain-DDP workloads (scaledl.workloads.parallelism).
    *(
        ColumnSpec(name, "int", required=False, nullable=True, min_value=0, strict_min=True)
        for name in ("dp_size", "tp_size", "pp_size", "micro_batches")
    ),
    ColumnSpec(
        "pipeline_schedule", "str", required=False, nullable=True, value_set=PIPELINE_SCHEDULES
    ),
    ColumnSpec("sharding", "str", required=False, nullable=True, value_set=SHARDINGS),
)

WORKLOADS = TableSpec("workloads", (ColumnSpec("workload_id", "str", unique=True), *_SPEC_COLUMNS))

RUNS = TableSpec(
    "runs",
    (
        ColumnSpec("run_id", "str", unique=True),
        _WID,
        ColumnSpec("status", "str", value_set=("ok",)),  # other statuses: quarantined
        ColumnSpec("error", "str", nullable=True),
        ColumnSpec("host", "str"),
        ColumnSpec("device_name", "str"),
        ColumnSpec("world_size", "int", min_value=0, strict_min=True),
        ColumnSpec("torch_version", "str"),
        _count("warmup_steps"),
        _count("instrumented_steps", 1),
        _count("measured_steps", 1),
        ColumnSpec("started_at", "str"),
        ColumnSpec("finished_at", "str"),
        ColumnSpec(
            "instrumentation_overhead", "number", nullable=True, min_value=-1.0, max_value=100.0
        ),
        # Null when the source does not say (an import with one averaged label).
        ColumnSpec("iteration_cv", "number", nullable=True, min_value=0.0),
        _count("repeat", required=False),
        _count("attempts", 1, required=False),
        ColumnSpec("label_ms", "number", required=False, min_value=0.0, strict_min=True),
        _count("label_steps", 1, required=False),
        ColumnSpec("label_halfwidth", "number", required=False, min_value=0.0),
        ColumnSpec("foreign_load_cores", "number", required=False, nullable=True, min_value=0.0),
        # The profiler's runs: ranks forked by the zygote (profiling.fork_ranks) or fresh
        # interpreters; null in parts written before the column existed.
        ColumnSpec("fork_ranks", "bool", required=False, nullable=True),
    ),
)

LAYER_TIMINGS = TableSpec(
    "layer_timings",
    (
        _ID,
        _WID,
        _RANK,
        _STEP,
        _count("layer_index"),
        ColumnSpec("layer_name", "str"),
        ColumnSpec("layer_type", "str"),
        _ms("forward_ms"),
        _ms("backward_ms", positive=False),
        ColumnSpec("fwd_flops", "number", min_value=0),
        ColumnSpec("bwd_flops", "number", min_value=0),
        _count("params"),
        ColumnSpec("input_bytes", "number", min_value=0),
        ColumnSpec("output_bytes", "number", min_value=0),
        # Parallel layouts only (absent for plain DDP): the pipeline micro-batch of the call
        # and the tensor-parallel split of the unit's weights (scaledl.profiling.layout_session).
        _count("micro_batch", nullable=True, required=False),
        _count("tp_shards", 1, nullable=True, required=False),
    ),
    unique_together=("run_id", "rank", "step", "layer_index", "micro_batch"),
)

ALLREDUCE_TIMINGS = TableSpec(
    "allreduce_timings",
    (
        _ID,
        _WID,
        _RANK,
        _STEP,
        _count("bucket_index"),
        ColumnSpec("allreduce_bytes", "number", min_value=0, strict_min=True),
        _ms("allreduce_ms"),
    ),
    unique_together=("run_id", "rank", "step", "bucket_index"),
    allow_empty=True,
)

ITERATION_TIMINGS = TableSpec(
    "iteration_timings",
    (
        _ID,
        _WID,
        _RANK,
        _STEP,
        ColumnSpec("phase", "str", value_set=PHASES),
        _ms("iteration_ms"),
        _ms("forward_ms", positive=False, nullable=True),
        _ms("backward_ms", positive=False, nullable=True),
        _ms("optimizer_ms", positive=False, nullable=True),
        _ms("allreduce_ms", positive=False, nullable=True),
        ColumnSpec("allreduce_bytes", "number", nullable=True, min_value=0),
    ),
    unique_together=("run_id", "rank", "phase", "step"),
)

EPOCHS = TableSpec(
    "epochs",
    (
        _ID,
        _WID,
        _RANK,
        _count("epoch"),
        ColumnSpec(
            "epoch_s", "number", min_value=0, strict_min=True, max_from_config="max_epoch_s"
        ),
        ColumnSpec("steps_per_epoch", "int", min_value=0, strict_min=True),
        ColumnSpec("dataset_size", "int", min_value=0, strict_min=True),
    ),
    unique_together=("run_id", "rank", "epoch"),
    allow_empty=True,  # imports without epoch times; the profiler's runs need rows (run rule)
)

OPERATOR_TIMINGS = TableSpec(
    "operator_timings",
    (
        _ID,
        _WID,
        _RANK,
        _STEP,
        ColumnSpec("layer_index", "int", min_value=-1),
        ColumnSpec("op_class", "str", value_set=OP_CLASSES),
        ColumnSpec("op_kind", "str", value_set=tuple(k for v in OP_KINDS.values() for k in v)),
        *(
            ColumnSpec(name, "number", min_value=0)
            for name in DESCRIPTOR_COLUMNS
            if name not in ("op_class", "op_kind")
        ),
        _ms("forward_ms"),
        _ms("backward_ms", positive=False),
    ),
    allow_empty=True,
)

#: The profiler's collectives and the tensor-parallel and FSDP API probes' rows
#: (:mod:`scaledl.profiling.tp_probe`, :mod:`scaledl.profiling.fsdp_probe`).
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv",
               *API_COSTS)  # fmt: skip
COLLECTIVE_TIMINGS = TableSpec(
    "collective_timings",
    (
        _ID,
        _WID,
        _RANK,
        _STEP,
        _count("collective_index"),
        ColumnSpec("collective", "str", value_set=COLLECTIVES),
        ColumnSpec("group", "str", value_set=("dp", "tp", "pp")),
        ColumnSpec("group_size", "int", min_value=1, strict_min=True),
        ColumnSpec("collective_bytes", "number", min_value=0, strict_min=True),
        _ms("collective_ms"),
        ColumnSpec("source", "str", value_set=("measured", "microbenchmark")),
    ),
    unique_together=("run_id", "rank", "step", "collective_index"),
    allow_empty=True,
)

PIPELINE_TIMINGS = TableSpec(
    "pipeline_timings",
    (
        _ID,
        _WID,
        _RANK,
        _STEP,
        _count("stage"),
        _count("micro_batch"),
        ColumnSpec("phase", "str", value_set=("forward", "backward")),
        _ms("start_ms", positive=False),
        _ms("end_ms"),
    ),
    unique_together=("run_id", "rank", "step", "micro_batch", "phase"),
    allow_empty=True,
)

#: Tables validated when their file exists (per-operator timings of an import or a profiler
#: that records them; the collectives and pipeline micro-batches of the parallel layouts).
OPTIONAL_PROFILE_TABLES: dict[str, TableSpec] = {
    t.name: t for t in (OPERATOR_TIMINGS, COLLECTIVE_TIMINGS, PIPELINE_TIMINGS)
}

#: The profile tables in dependency order (parents first).
PROFILE_TABLES: dict[str, TableSpec] = {
    t.name: t
    for t in (WORKLOADS, RUNS, LAYER_TIMINGS, ALLREDUCE_TIMINGS, ITERATION_TIMINGS, EPOCHS)
}


def _design_column(col: ColumnSpec) -> ColumnSpec:
    """Return a workload spec column as the design table expects it.

    Only the columns every design needs are required; ``seq_len`` may be null (vision families
    derive it from ``image_size`` and ``patch_size``).
    """
    if col.name == "seq_len":
        return replace(col, nullable=True)
    if col.name in _DESIGN_REQUIRED:
        return col
    return replace(col, required=False)


_DESIGN_REQUIRED = {"family", "batch_size", "world_size", "precision", "mode"}

DESIGN = TableSpec(
    "design",
    (
        ColumnSpec("workload_id", "str", required=False, unique=True),
        *(_design_column(c) for c in _SPEC_COLUMNS),
        ColumnSpec("sampler", "str"),
        ColumnSpec("seed", "int"),
    ),
)
