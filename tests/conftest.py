"""Shared fixtures of every test directory.

The helper modules in ``tests/`` (``tiny_specs``, ``faults``, ``metrics_factory``,
``profile_tables``, ``scaledl_fixtures``) are importable by name because pyproject's pytest
config puts ``tests`` on ``pythonpath``; test modules are imported with ``--import-mode=importlib``,
so two test files may share a basename. The session fixtures of :mod:`scaledl_fixtures`
(``profiled``, ``registry_root``: a real tiny profile and bundle) are registered here once; each
runs only in a session that requests it.
"""

pytest_plugins = ["scaledl_fixtures"]
