"""Dagster entry point: ``dagster dev -m pipelines.definitions``."""

import dagster as dg

from pipelines.defs.assets import ALL_ASSETS
from pipelines.defs.checks import ALL_CHECKS
from pipelines.defs.jobs import ALL_JOBS
from pipelines.defs.resources import default_resources
from pipelines.defs.schedules import ALL_SCHEDULES

defs = dg.Definitions(
    assets=ALL_ASSETS,
    asset_checks=ALL_CHECKS,
    jobs=ALL_JOBS,
    schedules=ALL_SCHEDULES,
    resources=default_resources(),
    executor=dg.in_process_executor,
)
