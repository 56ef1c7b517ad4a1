"""The committed reference dataset: its datasheet matches its tables, and it passes validation."""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from scaledl.models.data import read_tables
from scaledl.report.blocks.datasheet import BEGIN, END, check_datasheet, write_datasheet
from scaledl.validation.pipeline import validate_profiles
from scaledl.workloads.identity import family_key
from scaledl.workloads.spec import Workload

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

REFERENCE = Path(__file__).resolve().parents[3] / "datasets" / "reference-cpu"


def test_committed_datasheet_matches_the_committed_tables():
    check_datasheet(REFERENCE / "DATASHEET.md", REFERENCE / "validated")


def test_a_stale_datasheet_is_an_error_naming_the_fix(tmp_path):
    sheet = tmp_path / "DATASHEET.md"
    sheet.write_text(f"# x\n{BEGIN}\n| family | 1 |\n{END}\n")
    with pytest.raises(ValueError, match="does not match .* regenerate it"):
        check_datasheet(sheet, REFERENCE / "validated")
    write_datasheet(sheet, REFERENCE / "validated")
    check_datasheet(sheet, REFERENCE / "validated")
    assert sheet.read_text().startswith("# x\n")


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
