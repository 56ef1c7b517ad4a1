"""``bundle``, ``legacy``: private copies of the tiny bundle (and its skops form) to alter."""

import shutil

import pytest


@pytest.fixture
def bundle(registry_root, tmp_path):
    """A private copy of the latest bundle (tests alter it)."""
    target = tmp_path / "bundle"
    shutil.copytree(registry_root / "scaledl" / "v2", target)
    return target


@pytest.fixture
def legacy(legacy_bundle, tmp_path):
    """A private copy of the tiny bundle as written before ``layerwise.npz`` (tests alter it)."""
    target = tmp_path / "legacy"
    shutil.copytree(legacy_bundle, target)
    return target
