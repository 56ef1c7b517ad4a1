"""Shared fixtures of every test directory, and the grouping of ``make test``'s parallel phase.

The helper modules in ``tests/`` (``tiny_specs``, ``faults``, ``metrics_factory``,
``profile_tables``, ``scaledl_fixtures``) are importable by name because pyproject's pytest
config puts ``tests`` on ``pythonpath``; test modules are imported with ``--import-mode=importlib``,
so two test files may share a basename. The session fixtures of :mod:`scaledl_fixtures`
(``profiled``, ``registry_root``: a real tiny profile and bundle) are registered here once; each
runs only in a session that requests it.

``make test`` runs the suite in two phases: every test not marked ``serial`` on all cores with
pytest-xdist (``-n auto --dist loadgroup``), then the ``serial`` tests alone. A test is marked
``serial`` when what it asserts depends on the host being otherwise idle: the interference
guard's foreign-load meter, or a bound on the seconds a stop signal takes. In the parallel
phase each test module goes to one worker whole (its module fixtures are built once), and every
test using the shared profile goes to one worker (the profile is measured once); the shared
profile's settings make its labels insensitive to a busy host (``scaledl_fixtures.SETTINGS``).
"""

import pytest

pytest_plugins = ["scaledl_fixtures"]

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
