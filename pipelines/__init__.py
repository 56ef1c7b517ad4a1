"""Dagster orchestration of ScaleDL (thin: the logic lives in :mod:`scaledl`).

In the repository root: ``dagster dev`` (the UI), ``dagster definitions validate``, or
``dagster job execute -j scaledl_pipeline``; ``pyproject.toml``'s ``[tool.dg]`` names the code
location (:mod:`pipelines.definitions`).
"""
