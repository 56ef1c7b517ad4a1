"""The pipeline's assets, one module per stage."""

from pipelines.defs.assets.design import search_space, workload_design
from pipelines.defs.assets.evaluation import evaluation_report
from pipelines.defs.assets.imported import imported_profiles
from pipelines.defs.assets.profiling import profiling_runs, validated_profiles
from pipelines.defs.assets.training import predictor_bundle, trained_models
from pipelines.defs.assets.versioning import data_version

ALL_ASSETS = [
    search_space,
    workload_design,
    profiling_runs,
    validated_profiles,
    imported_profiles,
    trained_models,
    evaluation_report,
    predictor_bundle,
    data_version,
]

__all__ = [
    "ALL_ASSETS",
    "data_version",
    "evaluation_report",
    "imported_profiles",
    "predictor_bundle",
    "profiling_runs",
    "search_space",
    "trained_models",
    "validated_profiles",
    "workload_design",
]
