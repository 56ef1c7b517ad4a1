"""Dagster orchestration of ScaleDL (thin: the logic lives in :mod:`scaledl`).

Load with ``dagster dev -m pipelines.definitions`` or
``dagster asset materialize -m pipelines.definitions --select '*'``.
"""
