"""Predict a large workloads file in chunks, in bounded memory, writing the output as it goes.

:func:`predict_file` reads a CSV (separator sniffed from the header, as ``scaledl predict``
reads one) or parquet file :data:`CHUNK_ROWS` rows at a time (``pandas.read_csv(chunksize=)``,
``pyarrow.parquet.ParquetFile.iter_batches``), predicts each chunk on the batched path
(:func:`~scaledl.prediction.predict.predict_rows`, row numbers counted over the whole file)
and appends it to the output (CSV, or parquet row groups via ``pyarrow.parquet.ParquetWriter``)
inside :func:`scaledl.io.atomic.atomic_file`: the output appears whole when every row is
predicted, and an error (a bad row, a full disk, Ctrl-C) leaves no output file, not a partial
one. A ``tqdm`` progress bar on stderr counts the rows.

Memory holds one chunk of input and output and the caches (traced architectures, one entry per
distinct architecture), whatever the file's length.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from scaledl.io.atomic import atomic_file
from scaledl.io.safe import check_regular_file
from scaledl.prediction.predict import predict_rows
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.files import csv_separator

if TYPE_CHECKING:
    from scaledl.prediction.predictor import Predictor

#: Rows read, predicted and written at a time.
CHUNK_ROWS = 50_000
#: Rows of the head kept for printing (:attr:`StreamSummary.head`).
HEAD_ROWS = 20
_SUFFIXES = (".csv", ".parquet")


@dataclass
class StreamSummary:
    """What a streamed prediction did.

    Attributes:
        rows: rows predicted.
        chunks: chunks read.
        head: the first :data:`HEAD_ROWS` predictions.
        outside: ``(row number, extrapolation)`` of the first rows outside the training domain.
        outside_rows: rows outside the training domain.
        outside_reasons: reason (field and reason, values dropped) -> rows.
        recipes: rows per ``recipe`` (:mod:`scaledl.prediction.layouts`).
        bases: rows per ``interval_basis`` (``{}`` without intervals), for
            :meth:`~scaledl.models.intervals.IntervalCalibration.unbounded_reasons`.
    """

    rows: int = 0
    chunks: int = 0
    head: pd.DataFrame | None = None
    outside: list[tuple[int, str]] = field(default_factory=list)
    outside_rows: int = 0
    outside_reasons: dict[str, int] = field(default_factory=dict)
    recipes: dict[str, int] = field(default_factory=dict)
    bases: dict[str, int] = field(default_factory=dict)

    def add(self, predictions: pd.DataFrame, first_row: int) -> None:
        """Count a predicted chunk whose first row is row ``first_row`` of the file."""
        if self.head is None:
            self.head = predictions.head(HEAD_ROWS)
        elif len(self.head) < HEAD_ROWS:
            more = predictions.head(HEAD_ROWS - len(self.head))
            self.head = pd.concat([self.head, more], ignore_index=True)
        self.rows += len(predictions)
        self.chunks += 1
        for recipe, n in predictions["recipe"].value_counts().items():
            self.recipes[recipe] = self.recipes.get(recipe, 0) + int(n)
        if "interval_basis" in predictions:
            for basis, n in predictions["interval_basis"].value_counts().items():
                self.bases[basis] = self.bases.get(basis, 0) + int(n)
        flagged = predictions.index[predictions["extrapolation"] != ""]
        self.outside_rows += len(flagged)
        texts = predictions["extrapolation"].to_numpy()
        for i in flagged[: max(0, 5 - len(self.outside))]:
            self.outside.append((first_row + int(i), str(texts[i])))
        for text, n in pd.Series(texts[flagged]).value_counts().items():
            for item in set(str(text).split("; ")):
                name, _, reason = item.partition(": ")
                key = f"{name.partition('=')[0]}: {reason}"
                self.outside_reasons[key] = self.outside_reasons.get(key, 0) + int(n)

    def outside_lines(self) -> list[str]:
        """Lines as :func:`~scaledl.models.guard.summarise_outside` writes them."""
        rows = [f"row {i}: outside the training domain: {text}" for i, text in self.outside]
        if self.outside_rows <= len(self.outside):
            return rows
        lines = [f"{self.outside_rows} of {self.rows} rows outside the training domain, by reason:"]
        ordered = sorted(self.outside_reasons.items(), key=lambda kv: -kv[1])
        lines += [f"  {n} rows: {key}" for key, n in ordered]
        return [*lines, f"the first {len(self.outside)}:", *rows]


def read_chunks(path: Path, chunk_rows: int = CHUNK_ROWS) -> Iterator[pd.DataFrame]:
    """The rows of a CSV or parquet workloads file, ``chunk_rows`` at a time.

    CSV cells are read as ``scaledl predict`` reads them: an empty cell is NaN (a field not
    given), a written ``nan`` stays text (refused when parsed).

    Raises:
        ValueError: an unknown suffix, or an unreadable file (naming it and the cause).
    """
    suffix = path.suffix.lower()
    if suffix not in _SUFFIXES:
        raise ValueError(
            f"{path}: unknown workload file type {suffix!r} for streaming {list(_SUFFIXES)}"
        )
    try:
        if suffix == ".parquet":
            # pyarrow's parquet reader: only a parquet input needs it.
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk_rows):
                yield batch.to_pandas()
            return
        separator = csv_separator(path)
        reader = pd.read_csv(
            path, sep=separator, keep_default_na=False, na_values=[""], chunksize=chunk_rows
        )
        with reader:
            yield from reader
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError) as exc:
        raise ValueError(f"{path}: cannot read workloads: {exc}") from exc


def count_rows(path: Path) -> int | None:
    """Rows of a workloads file for the progress bar (parquet metadata; CSV lines less one)."""
    if path.suffix.lower() == ".parquet":
        # pyarrow's parquet reader: only a parquet input needs it.
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    with path.open("rb") as handle:
        lines = sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))
    return max(lines - 1, 0)


class _Writer:
    """Appends prediction chunks to a temporary CSV or parquet file."""

    def __init__(self, path: Path, parquet: bool) -> None:
        self.path, self.parquet = path, parquet
        self._parquet = None
        self._schema = None
        self._handle = None

    def write(self, chunk: pd.DataFrame) -> None:
        if self.parquet:
            # pyarrow's parquet writer: only a parquet output needs it.
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pandas(chunk, schema=self._schema, preserve_index=False)
            if self._parquet is None:
                self._schema = table.schema
                self._parquet = pq.ParquetWriter(self.path, self._schema)
            self._parquet.write_table(table)
            return
        if self._handle is None:
            self._handle = self.path.open("w", newline="", encoding="utf-8")
            chunk.to_csv(self._handle, index=False)
        else:
            chunk.to_csv(self._handle, index=False, header=False)

    def close(self) -> None:
        if self._parquet is not None:
            self._parquet.close()
        if self._handle is not None:
            self._handle.close()


def predict_file(
    predictor: Predictor,
    path: Path,
    out: Path,
    coverage: float | None = None,
    strict: bool = False,
    chunk_rows: int = CHUNK_ROWS,
    progress: bool = True,
) -> StreamSummary:
    """Predict every row of a workloads file into ``out``, chunk by chunk (module docstring).

    Args:
        predictor: the loaded predictor.
        path: a ``.csv`` or ``.parquet`` workloads file.
        out: the output, ``.csv`` or ``.parquet`` (the columns of
            :meth:`Predictor.predict <scaledl.Predictor.predict>`).
        coverage: interval coverage, or ``None``.
        strict: an error at the first row outside the training domain.
        chunk_rows: rows per chunk.
        progress: show a progress bar on stderr.

    Returns:
        The :class:`StreamSummary`.

    Raises:
        ValueError: an unknown suffix, an unreadable file or not a regular one (a FIFO, a
            device), ``chunk_rows`` not positive.
        scaledl.workloads.fields.WorkloadError: a bad row (named by its number in the file),
            no row, or (``strict``) a row outside the domain.
        scaledl.models.intervals.CalibrationError: ``coverage`` without a calibration.
        OSError: the output cannot be written; no output file is left.
    """
    # tqdm: only a progress bar needs it.
    from tqdm import tqdm

    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows!r}")
    if out.suffix.lower() not in _SUFFIXES:
        raise ValueError(f"{out}: unknown output suffix {out.suffix!r} {list(_SUFFIXES)}")
    if coverage is not None:
        predictor.check_coverage(coverage)
    try:
        check_regular_file(path)  # before anything opens it: a FIFO's open never returns
    except OSError as exc:
        raise ValueError(f"{path}: cannot read workloads: {exc}") from exc
    summary = StreamSummary()
    total = count_rows(path)
    with (
        atomic_file(out) as tmp,
        tqdm(total=total, unit="rows", disable=not progress, desc="predict") as bar,
    ):
        writer = _Writer(tmp, out.suffix.lower() == ".parquet")
        try:
            for chunk in read_chunks(path, chunk_rows):
                first = summary.rows + 1
                predictions = predict_rows(
                    predictor, chunk, str(path), coverage, strict, first_row=first
                )
                writer.write(predictions)
                summary.add(predictions, first)
                bar.update(len(chunk))
        finally:
            writer.close()
        if summary.rows == 0:
            raise WorkloadError(f"{path}: no workload to predict (no row)")
    return summary
