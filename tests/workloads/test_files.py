"""Workload files are read only when they are regular files: a FIFO or a device is refused."""

import os

import pytest

from scaledl.design import load_preset, read_design
from scaledl.design.errors import DesignError
from scaledl.workloads.files import read_workloads_file


def _special(path, kind):
    if kind == "fifo":
        os.mkfifo(path)  # an open() of it would block for ever
    else:
        path.symlink_to("/dev/zero")  # a read() of it would never end
    return path


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
@pytest.mark.parametrize("suffix", [".csv", ".yaml", ".parquet"])
def test_a_workloads_file_that_is_not_regular_is_refused(tmp_path, kind, suffix):
    path = _special(tmp_path / f"w{suffix}", kind)
    with pytest.raises(ValueError, match=rf"w\{suffix}: is a (FIFO|device), not a regular file"):
        read_workloads_file(path)


def test_a_missing_workloads_file_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"nowhere\.csv: cannot read workloads"):
        read_workloads_file(tmp_path / "nowhere.csv")


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_design_or_preset_that_is_not_regular_is_refused(tmp_path, kind):
    with pytest.raises(DesignError, match=r"design\.parquet: is a"):
        read_design(_special(tmp_path / "design.parquet", kind))
    with pytest.raises(DesignError, match=r"preset\.yaml: is a"):
        load_preset(_special(tmp_path / "preset.yaml", kind))
