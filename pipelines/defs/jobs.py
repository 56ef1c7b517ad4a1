"""Jobs: design, profile the design in shards, the rest of the pipeline, and retraining.

Dagster runs one job's assets under one partitions definition, so the full pipeline is three
jobs run in sequence (``make run``):

1. ``design_job``: the search space and the workload design;
2. ``profile_design``: ``profiling_shard``, partitioned by shard; a backfill over all its
   partitions is the "profile the design" action (one run per shard, each tagged
   ``scaledl/profiling``: the run queue starts one such run at a time per instance);
3. ``scaledl_pipeline``: every other asset, from the consolidated profile tables
   (``profiling_runs``) to the data version.

``retrain_job`` stays one run: it augments the design and profiles the new workloads in
``profiling_runs`` itself (``profile_missing``), as the weekly schedule needs.

A cluster deployment adds run tags to the shard runs from the YAML file named by
``$SCALEDL_SHARD_RUN_TAGS`` (e.g. ``deploy/k8s/shard_run_tags.yaml``: the
``dagster-k8s/config`` tag asking for a node's GPUs per shard pod), read when the definitions
load.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg
import yaml

from pipelines.defs.assets.profiling import shard_partitions
from scaledl.io.safe import read_text

PROFILING_TAGS = {"scaledl/profiling": "true"}
RETRAIN_AUGMENT_K = 4
SHARD_RUN_TAGS_ENV = "SCALEDL_SHARD_RUN_TAGS"


def shard_run_tags(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The extra run tags of the shard runs: the mapping in ``$SCALEDL_SHARD_RUN_TAGS``.

    Args:
        environ: the environment (``os.environ`` when ``None``).

    Returns:
        Tag name -> value (a string, or a mapping Dagster stores as JSON, as
        ``dagster-k8s/config`` is); empty when the variable is unset.

    Raises:
        ValueError: the file is unreadable, not YAML, not a mapping of tag names, or sets
            ``scaledl/profiling`` (the one-at-a-time tag stays), naming the file.
    """
    path = (os.environ if environ is None else environ).get(SHARD_RUN_TAGS_ENV, "").strip()
    if not path:
        return {}
    where = f"{SHARD_RUN_TAGS_ENV}={path}"
    try:
        tags = yaml.safe_load(read_text(Path(path)))
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ValueError(f"{where}: unreadable run tags: {exc}") from None
    if not isinstance(tags, dict) or not all(isinstance(k, str) for k in tags):
        raise ValueError(f"{where}: expected a mapping of tag names to values")
    for name, value in tags.items():
        if not isinstance(value, (str, dict)):
            raise ValueError(f"{where}: tag {name!r}: value {value!r} is not a string or mapping")
    if set(tags) & set(PROFILING_TAGS):
        raise ValueError(f"{where}: sets {sorted(set(tags) & set(PROFILING_TAGS))}, kept as is")
    return tags


DESIGN_ASSETS = dg.AssetSelection.assets("search_space", "workload_design")
SHARD_ASSETS = dg.AssetSelection.assets("profiling_shard")
#: Published-runs evaluation: its inputs are committed, so no job of ``make run`` runs it.
PUBLISHED_RUNS_ASSETS = dg.AssetSelection.assets("published_runs_evaluation")

design_job = dg.define_asset_job(
    name="design_job",
    selection=DESIGN_ASSETS,
    description="The preset's search space and the D-optimal workload design (make run, step 1).",
)

profile_design = dg.define_asset_job(
    name="profile_design",
    selection=SHARD_ASSETS,
    partitions_def=shard_partitions,
    description=(
        "Profile one shard of the design per run; a backfill of every partition profiles the "
        "design (make run, step 2). Runs carry scaledl/profiling, so the run queue starts one at "
        "a time per instance; a cluster's run launcher places them on its nodes."
    ),
    tags={**PROFILING_TAGS, **shard_run_tags()},
)

scaledl_pipeline = dg.define_asset_job(
    name="scaledl_pipeline",
    selection=dg.AssetSelection.all() - DESIGN_ASSETS - SHARD_ASSETS - PUBLISHED_RUNS_ASSETS,
    description=(
        "Consolidate the shards' profiles, validate, train, evaluate, register and version the "
        "data (make run, step 3, after design_job and the profile_design backfill)."
    ),
    tags=PROFILING_TAGS,
)

retrain_job = dg.define_asset_job(
    name="retrain_job",
    selection=dg.AssetSelection.all() - SHARD_ASSETS - PUBLISHED_RUNS_ASSETS,
    description=(
        f"Augment the design by {RETRAIN_AUGMENT_K} D-optimal workloads not yet profiled, profile "
        "only those (in this run), validate, retrain and re-evaluate; register the new predictor "
        "only if, on held-out workloads neither has seen, it is better than the current one or "
        "not distinguishable from it (paired bootstrap interval)."
    ),
    tags={**PROFILING_TAGS, "scaledl/retrain": "true"},
    config={
        "ops": {
            "workload_design": {"config": {"augment_k": RETRAIN_AUGMENT_K}},
            "profiling_runs": {"config": {"profile_missing": True}},
            "predictor_bundle": {"config": {"policy": "if_not_worse"}},
        }
    },
)
