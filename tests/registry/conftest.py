"""``bundle``: a private copy of the registered tiny bundle that a test may alter."""

import shutil

import pytest


@pytest.fixture
def bundle(registry_root, tmp_path):
    """A private copy of the latest bundle (tests alter it)."""
    target = tmp_path / "bundle"
    shutil.copytree(registry_root / "scaledl" / "v2", target)
    return target
