"""Jobs: the full pipeline and scheduled retraining (augment, profile new, retrain, gate)."""

from __future__ import annotations

import dagster as dg

PROFILING_TAGS = {"scaledl/profiling": "true"}
RETRAIN_AUGMENT_K = 4

scaledl_pipeline = dg.define_asset_job(
    name="scaledl_pipeline",
    selection=dg.AssetSelection.all(),
    description="Design, profile, validate, train, evaluate, register and version the data.",
    tags=PROFILING_TAGS,
)

retrain_job = dg.define_asset_job(
    name="retrain_job",
    selection=dg.AssetSelection.all(),
    description=(
        f"Augment the design by {RETRAIN_AUGMENT_K} D-optimal workloads not yet profiled, profile "
        "only those, validate, retrain and re-evaluate; register the new predictor only if, on "
        "held-out workloads neither has seen, it is better than the current one or not "
        "distinguishable from it (paired bootstrap interval)."
    ),
    tags={**PROFILING_TAGS, "scaledl/retrain": "true"},
    config={
        "ops": {
            "workload_design": {"config": {"augment_k": RETRAIN_AUGMENT_K}},
            "predictor_bundle": {"config": {"policy": "if_not_worse"}},
        }
    },
)
