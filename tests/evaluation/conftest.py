"""Fixtures: a 15-workload, 3-family slice of real CPU profile tables (tests/evaluation/data)."""

from pathlib import Path

import pytest

from scaledl.models.data import load_profile_data

DATA_DIR = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def profile_dir() -> Path:
    return DATA_DIR


@pytest.fixture(scope="session")
def profile_data():
    return load_profile_data(DATA_DIR)
