"""Fixtures of the validation tests: the tables of :mod:`profile_tables` and the folders."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from profile_tables import make_profiles


@pytest.fixture
def tables() -> dict[str, pd.DataFrame]:
    return make_profiles()


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    return {
        "profiles_dir": tmp_path / "profiles",
        "out_dir": tmp_path / "validated",
        "quarantine_dir": tmp_path / "quarantine",
        "report_dir": tmp_path / "reports" / "validation",
    }
