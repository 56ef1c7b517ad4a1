"""The profile tables' names: the one list the store, validation, models and checks read.

The columns of each are :data:`scaledl.profiles.schemas.PROFILE_TABLES` (a test keeps the two
in step).

A profile is six parquet tables, ``<name>.parquet`` in one folder, in dependency order (parents
first): one row per workload, per launch (run), and per (run, rank, step) of the measurements.
"""

#: The six profile tables, parents first.
PROFILE_TABLE_NAMES = (
    "workloads",
    "runs",
    "layer_timings",
    "allreduce_timings",
    "iteration_timings",
    "epochs",
)
#: Tables whose rows belong to one run (they carry ``run_id``, ``workload_id`` and ``rank``).
RUN_TABLE_NAMES = ("layer_timings", "allreduce_timings", "iteration_timings", "epochs")
#: Tables read when their file exists: per-operator timings of an import or a profiler, and the
#: collectives and pipeline micro-batches of the parallel layouts (:mod:`scaledl.profiling.store`).
OPTIONAL_TABLE_NAMES = ("operator_timings", "collective_timings", "pipeline_timings")
#: Tables that must keep rows after validation for a model to be trained (all-reduce is empty
#: at world size 1; an import may carry no epochs).
TRAINING_TABLE_NAMES = ("workloads", "runs", "layer_timings", "iteration_timings")
#: The tensor-parallel API's cost of one column-wise and one row-wise linear, forward and
#: backward (:mod:`scaledl.parallel.collectives`).
TP_API = ("tp_colwise_forward", "tp_rowwise_forward", "tp_colwise_backward",
          "tp_rowwise_backward")  # fmt: skip
#: FSDP2's cost of one unit beyond its compute, forward and backward (with and without
#: resharding after the forward), and of stepping one DTensor parameter
#: (:mod:`scaledl.parallel.collectives`).
FSDP_API = ("fsdp_forward", "fsdp_backward", "zero2_backward", "fsdp_step")
#: The micro-benchmarked API costs: no collective of their own, nothing derived for them.
API_COSTS = (*TP_API, *FSDP_API)
