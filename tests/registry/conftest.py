"""Re-export the session fixtures of ``tests/scaledl_fixtures.py`` (profile, tiny bundle).

Also ``bundle``: a private copy of the registered bundle that a test may alter.
"""

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaledl_fixtures import profiled, registry_root  # noqa: E402, F401


@pytest.fixture
def bundle(registry_root, tmp_path):  # noqa: F811 (the fixture, re-exported above)
    """A private copy of the latest bundle (tests alter it)."""
    target = tmp_path / "bundle"
    shutil.copytree(registry_root / "scaledl" / "v2", target)
    return target
