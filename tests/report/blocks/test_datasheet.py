"""The committed reference dataset validates and is complete (its datasheet: test_registry.py)."""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from scaledl.models.data import read_tables
from scaledl.validation.pipeline import validate_profiles
from scaledl.workloads.identity import family_key
from scaledl.workloads.spec import Workload

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

REFERENCE = Path(__file__).resolve().parents[3] / "datasets" / "reference-cpu"


def test_reference_dataset_passes_the_product_validation(tmp_path):
    report = validate_profiles(
        REFERENCE / "validated", tmp_path / "v", tmp_path / "q", tmp_path / "r"
    )
    assert report.quarantined_rows == 0


def test_reference_dataset_has_300_labelled_workloads_over_10_families(monkeypatch):
    monkeypatch.chdir(REFERENCE.parents[1])  # config paths are relative to the repository root
    tables = read_tables(REFERENCE / "validated")
    labelled = tables["workloads"][
        tables["workloads"]["workload_id"].isin(tables["runs"]["workload_id"])
    ]
    workloads = [Workload.from_record(r, source="reference") for r in labelled.to_dict("records")]
    families = pd.Series([family_key(w) for w in workloads]).value_counts()
    assert len(workloads) >= 300
    assert len(families) >= 10 and families.min() >= 10
    assert {w.world_size for w in workloads} == {1, 2}


def test_every_hf_config_the_workloads_name_is_committed_and_used():
    rows = yaml.safe_load((REFERENCE / "workloads.yaml").read_text())
    named = {Path(r["config_path"]).name for r in rows if r["family"] == "hf"}
    committed = {p.name for p in (REFERENCE / "configs").glob("*.json")}
    assert named and named == committed
