"""Dagster orchestration of ScaleDL (thin: the logic lives in :mod:`scaledl`).

In the repository root: ``dagster dev`` (the UI) or ``dagster definitions validate``
(``pyproject.toml``'s ``[tool.dg]`` names the code location, :mod:`pipelines.definitions`), and
``dagster job execute -m pipelines.definitions -j scaledl_pipeline`` (``make run``).
"""
