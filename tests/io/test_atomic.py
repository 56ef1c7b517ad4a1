"""Durable atomic writes: fsync before every rename and of the directory after; crash-safe."""

import os
import stat
import subprocess
import sys

import pandas as pd
import pytest
from faults import FsyncSpy, count_io, crash_at

from scaledl.io.atomic import (
    atomic_dir,
    atomic_file,
    remove_stale_temps,
    write_atomic,
    write_parquet_atomic,
)


def test_write_atomic_fsyncs_the_file_then_the_directory(tmp_path, monkeypatch):
    spy = FsyncSpy().install(monkeypatch)
    path = write_atomic(tmp_path / "sub" / "latest", "v2\n")
    assert path.read_text() == "v2\n"
    spy.assert_durable()
    assert [p.name for p in path.parent.iterdir()] == ["latest"]


def test_atomic_dir_fsyncs_every_file_and_replaces_whole(tmp_path, monkeypatch):
    target = tmp_path / "part"
    with atomic_dir(target) as tmp:
        (tmp / "a.json").write_text("old")
    spy = FsyncSpy().install(monkeypatch)
    with atomic_dir(target, replace=True) as tmp:
        (tmp / "a.json").write_text("new")
        (tmp / "b.parquet").write_bytes(b"x")
    spy.assert_durable()
    assert sorted(p.name for p in target.iterdir()) == ["a.json", "b.parquet"]
    assert (target / "a.json").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["part"]  # the old folder is gone


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = write_atomic(tmp_path / "f", b"old")
    with pytest.raises(ValueError):
        with atomic_file(path) as tmp:
            tmp.write_bytes(b"half")
            raise ValueError("writer failed")
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["f"]


def test_a_crash_at_every_io_call_leaves_old_or_new(tmp_path):
    target = tmp_path / "part"

    def publish():
        with atomic_dir(target, replace=True) as tmp:
            (tmp / "a").write_text("new")
            (tmp / "b").write_text("new")

    with atomic_dir(target) as tmp:
        (tmp / "a").write_text("old")
        (tmp / "b").write_text("old")
    calls = count_io(publish)
    assert calls > 8
    for n in range(1, calls + 1):
        crashed = crash_at(n, publish)
        contents = {p.name: p.read_text() for p in target.iterdir()}
        assert contents in ({"a": "old", "b": "old"}, {"a": "new", "b": "new"}), (n, contents)
        if not crashed:
            assert contents["a"] == "new"
        publish()  # the retry completes
        assert {p.read_text() for p in target.iterdir()} == {"new"}
        # Reset for the next crash point.
        with atomic_dir(target, replace=True) as tmp:
            (tmp / "a").write_text("old")
            (tmp / "b").write_text("old")


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale_dir = tmp_path / f".v3.{dead.pid}.abc123.tmp"
    stale_dir.mkdir()
    (stale_dir / "gnn.pt").write_bytes(b"x" * 1000)
    stale_file = tmp_path / f".latest.{dead.pid}.q_9z.tmp"
    stale_file.write_text("v3")
    with atomic_dir(tmp_path / "mine") as live:  # this process's own temporary stays
        removed = remove_stale_temps(tmp_path)
        assert live.exists()
    assert sorted(removed) == sorted([stale_dir, stale_file])
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]


def test_write_parquet_atomic_leaves_no_temporary_file(tmp_path):
    path = write_parquet_atomic(pd.DataFrame({"a": [1, 2]}), tmp_path / "sub" / "t.parquet")
    assert pd.read_parquet(path)["a"].tolist() == [1, 2]
    with pytest.raises(ValueError):  # pyarrow cannot convert an object column
        write_parquet_atomic(pd.DataFrame({"a": [object()]}), path)
    assert [p.name for p in path.parent.iterdir()] == ["t.parquet"]
    assert pd.read_parquet(path)["a"].tolist() == [1, 2]


def test_a_written_file_takes_the_umask_mode_not_mkstemps(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_atomic(tmp_path / "out.csv", "a,b\n")
        with atomic_file(tmp_path / "other.csv") as tmp:
            tmp.write_text("x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "other.csv").stat().st_mode) == 0o644


def test_a_published_folder_takes_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        with atomic_dir(tmp_path / "bundle") as tmp:
            (tmp / "x").write_text("1")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "bundle").stat().st_mode) == 0o755
