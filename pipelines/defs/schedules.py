"""Schedules: weekly retraining (stopped by default; start it in the UI)."""

from __future__ import annotations

import dagster as dg

from pipelines.defs.jobs import retrain_job

weekly_retrain = dg.ScheduleDefinition(
    name="weekly_retrain",
    job=retrain_job,
    cron_schedule="0 3 * * 1",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Mondays 03:00 UTC: augment the design, profile the new workloads and retrain.",
)
