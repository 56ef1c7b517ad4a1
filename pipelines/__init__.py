"""Dagster orchestration of ScaleDL (thin: the logic lives in :mod:`scaledl`).

In the repository root: ``dagster dev`` (the UI) or ``dagster definitions validate``
(``pyproject.toml``'s ``[tool.dg]`` names the code location, :mod:`pipelines.definitions`);
``make run`` executes ``design_job``, ``profile_design`` once per shard and ``scaledl_pipeline``
(:mod:`pipelines.defs.jobs`, ``docs/cluster.md``).
"""
