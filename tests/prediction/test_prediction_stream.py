"""Streaming: chunked equals one-shot row for row; an error leaves no output file."""

import os

import pandas as pd
import pytest
from tiny_specs import tiny_spec

from scaledl.prediction import stream
from scaledl.prediction.predictor import load_predictor
from scaledl.prediction.stream import predict_file, read_chunks
from scaledl.workloads.fields import WorkloadError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def predictor(registry_root):
    return load_predictor(registry_root / "scaledl")


def workloads_file(path, n=40, bad_row=None):
    families = ("bert", "vit", "t5")
    rows = [
        tiny_spec(families[i % 3], batch_size=1 + i % 4, world_size=1 + i % 2,
                  dataset_size=100 + 37 * i)
        for i in range(n)
    ]  # fmt: skip
    if bad_row is not None:
        rows[bad_row - 1]["batch_size"] = 0
    frame = pd.DataFrame(rows)
    frame.to_parquet(path) if path.suffix == ".parquet" else frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize(("source", "output"), [(".csv", ".csv"), (".parquet", ".parquet")])
def test_chunked_prediction_equals_one_shot(predictor, tmp_path, source, output):
    path = workloads_file(tmp_path / f"w{source}")
    out = tmp_path / f"pred{output}"
    summary = predict_file(predictor, path, out, chunk_rows=7, progress=False)
    assert summary.rows == 40 and summary.chunks == 6
    if output == ".parquet":
        written = pd.read_parquet(out)
    else:  # an empty extrapolation (in domain) is an empty cell, not NaN
        written = pd.read_csv(out, keep_default_na=False)
    one_shot = predictor.predict(next(read_chunks(path, 10**6)), source=str(path))
    pd.testing.assert_frame_equal(written, one_shot, rtol=1e-6, check_dtype=False)
    pd.testing.assert_frame_equal(summary.head, one_shot.head(stream.HEAD_ROWS), rtol=1e-6)


def test_a_bad_row_in_a_later_chunk_leaves_no_output(predictor, tmp_path):
    path = workloads_file(tmp_path / "w.csv", bad_row=33)
    out = tmp_path / "out" / "pred.csv"
    with pytest.raises(WorkloadError, match=r"w.csv: row 33: invalid workload: field 'batch"):
        predict_file(predictor, path, out, chunk_rows=10, progress=False)
    assert not out.exists() and list(out.parent.iterdir()) == []


def test_a_failing_write_keeps_the_old_output_and_no_temporary(predictor, tmp_path, monkeypatch):
    path = workloads_file(tmp_path / "w.csv")
    out = tmp_path / "pred.parquet"
    out.write_bytes(b"the previous output")
    calls = []
    write = stream._Writer.write

    def failing(self, chunk):
        calls.append(len(chunk))
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        write(self, chunk)

    monkeypatch.setattr(stream._Writer, "write", failing)
    with pytest.raises(OSError, match="No space left"):
        predict_file(predictor, path, out, chunk_rows=10, progress=False)
    assert out.read_bytes() == b"the previous output"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pred.parquet", "w.csv"]


def test_strict_names_the_row_in_the_file(predictor, tmp_path):
    rows = [tiny_spec("bert", dataset_size=8 + i) for i in range(12)]  # trained on: in domain
    rows[10].update(hidden_size=64, intermediate_size=128)  # wider than anything trained
    path = tmp_path / "w.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    with pytest.raises(WorkloadError, match=r"w.csv: row 11: outside the predictor's training"):
        predict_file(predictor, path, tmp_path / "p.csv", strict=True, chunk_rows=4,
                     progress=False)  # fmt: skip
    assert not (tmp_path / "p.csv").exists()


def test_a_fifo_is_refused_before_any_output(predictor, tmp_path):
    fifo = tmp_path / "w.csv"
    os.mkfifo(fifo)  # an open() of it would block for ever
    out = tmp_path / "pred.csv"
    with pytest.raises(ValueError, match=r"w\.csv: is a FIFO, not a regular file"):
        predict_file(predictor, fifo, out, progress=False)
    assert list(tmp_path.iterdir()) == [fifo]
