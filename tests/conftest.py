"""Shared fixtures of every test directory, and the grouping of ``make test``'s parallel phase.

The helper modules in ``tests/`` (``tiny_specs``, ``faults``, ``metrics_factory``,
``profile_tables``, ``scaledl_fixtures``) are importable by name because pyproject's pytest
config puts ``tests`` on ``pythonpath``; test modules are imported with ``--import-mode=importlib``,
so two test files may share a basename. The session fixtures of :mod:`scaledl_fixtures`
(``profiled``, ``registry_root``: a real tiny profile and bundle) are registered here once; each
runs only in a session that requests it.

``make test`` runs the suite in three phases: every test marked neither ``timed`` nor
``serial`` on all cores with pytest-xdist (``-n auto --dist loadgroup``); then the ``timed``
tests two at a time (``-n 2 --dist load``: test by test, as none shares a fixture); then the
``serial`` tests alone. A test is marked ``timed`` when it bounds the seconds a stop takes (a
stop signal, ``kill -9``, the UI's shutdown): measured two at a time (one run), those stops took
2-3.5 s against bounds of 10-30 s; the parallel phase's load could stretch them past a bound.
A test is marked ``serial`` when what it asserts needs the host otherwise idle: the interference
guard's foreign-load meter counts every other process.

In the parallel phase each test module goes to one worker whole (its module fixtures are built
once), and every test using the shared profile goes to one worker (the profile is measured
once); the shared profile's settings make its labels insensitive to a busy host
(``scaledl_fixtures.SETTINGS``).
The groups are handed out longest first (:func:`pytest_collection_modifyitems`, with
``--no-loadscope-reorder``: pytest-xdist's own order is by number of tests, which handed the
single end-to-end test out last, so the phase waited on it alone).
"""

import os

import pytest

from scaledl.profiling.shards import SHARDS_ENV

pytest_plugins = ["scaledl_fixtures"]

#: Shards of the pipeline's definitions in this session (``make run`` keeps the default 4): the
#: in-process pipeline tests import the definitions once per worker, and every shard of theirs
#: is four torchrun launches (two repeats times two world sizes), about 48 s of the end-to-end
#: test's profiling per shard; one shard profiles the same parts. Shards write one profiles
#: folder, so consolidation is the same for any count. Shard assignment for any count is tested
#: in ``tests/profiling/test_shards.py``, two shards through Dagster (resumed alone, never
#: overlapping) in ``tests/pipelines/test_pipeline_shards.py``, whose children set their own.
SUITE_SHARDS = "1"
os.environ.setdefault(SHARDS_ENV, SUITE_SHARDS)

#: Session fixtures that one real profile backs: their tests share one xdist worker.
SHARED_PROFILE_FIXTURES = frozenset({"profiled", "registry_root"})


def xdist_group_of(item: pytest.Item) -> str:
    """The group a test runs in: the shared profile's, else its module's path."""
    if SHARED_PROFILE_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "shared-profile"
    return item.nodeid.split("::")[0]


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark each test with its xdist group (:func:`xdist_group_of`).

    (At collection, before pytest-xdist's ``pytest_collection_modifyitems`` reads the marks
    under ``--dist loadgroup``; without xdist the marks do nothing.)
    """
    item.add_marker(pytest.mark.xdist_group(xdist_group_of(item)))


def run_order_of(item: pytest.Item, slow_groups: set[str]) -> int:
    """Where a test's group comes in the parallel phase: the longest groups first.

    0 for the shared profile's group (about a minute of profiling, then its tests), 1 for a
    group with a test marked ``slow`` (tens of seconds), 2 for the rest, which fill the tail.
    """
    group = xdist_group_of(item)
    if group == "shared-profile":
        return 0
    return 1 if group in slow_groups else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the tests by :func:`run_order_of` (a stable sort: a module keeps its order)."""
    slow_groups = {xdist_group_of(item) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: run_order_of(item, slow_groups))
