"""The profile tables' names: the one list the store, validation, models and checks read.

The columns of each are :data:`scaledl.validation.schemas.PROFILE_TABLES` (a test keeps the two
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
