"""Dagster entry point: everything defined under ``pipelines/defs``, found by Dagster itself.

``[tool.dg]`` in ``pyproject.toml`` names this module (``pipelines.definitions``) as the code
location ``scaledl``, so ``dagster dev`` and ``dagster definitions validate`` work in the
repository root without arguments. Assets, checks, jobs, schedules, resources and the executor
each live in their own module under ``pipelines/defs`` and are collected by
:func:`dagster.load_from_defs_folder`: no list of them is kept by hand.
"""

from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    """The definitions of every module of ``pipelines/defs``."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).resolve().parent)
