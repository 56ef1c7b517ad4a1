"""Workload files: CSV, YAML or parquet tables of workload rows (``profile``, ``predict``)."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import yaml

from scaledl.io.safe import check_regular_file, read_text
from scaledl.workloads.spec import table_row


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a mapping giving the same key twice (YAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"key {key!r} given twice (lines {seen[key] + 1} and "
                    f"{key_node.start_mark.line + 1}); keep one",
                    key_node.start_mark,
                )  # fmt: skip
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str):
    """YAML text as Python objects, refusing duplicate keys (:class:`_UniqueKeyLoader`).

    Raises:
        yaml.YAMLError: invalid YAML or a key given twice (with its lines).
    """
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def csv_separator(path: Path) -> str:
    """The separator of a CSV file (``,``, ``;``, tab or ``|``, sniffed from its header).

    A header csv.Sniffer finds no separator in is one ``,``-separated column.

    Raises:
        ValueError: a column given twice in the header.
        UnicodeDecodeError: the file is not UTF-8.
    """
    with path.open(newline="", encoding="utf-8") as handle:
        first = handle.readline().rstrip("\r\n")
    try:
        dialect = csv.Sniffer().sniff(first, ",;\t|")
    except csv.Error:
        dialect = csv.excel  # one column: no separator to find
    header = next(csv.reader([first], dialect), [])
    duplicated = sorted({c for c in header if header.count(c) > 1})
    if duplicated:
        raise ValueError(f"column(s) {duplicated} given twice in the header; keep one each")
    return dialect.delimiter


def _read_csv(path: Path) -> pd.DataFrame:
    """A CSV read with its sniffed separator (:func:`csv_separator`).

    Raises:
        ValueError: a column given twice in the header.
        UnicodeDecodeError: the file is not UTF-8.
    """
    # An empty cell is NaN (a field not given); a written "nan" stays text and is refused.
    return pd.read_csv(path, sep=csv_separator(path), keep_default_na=False, na_values=[""])


def read_workloads_file(path: Path) -> list[dict]:
    """Workload rows from a CSV, YAML (a list of mappings) or parquet file.

    A table's (CSV, parquet) empty cells are fields not given, except where every workload
    has the field (:func:`~scaledl.workloads.spec.table_row`); a YAML entry is a mapping whose
    NaN or empty values are errors when parsed. A key or column given twice is an error.

    Returns:
        One mapping per row, in file order.

    Raises:
        ValueError: unknown suffix, unreadable or undecodable file, not a regular file (a FIFO,
            a device: :func:`scaledl.io.safe.check_regular_file`), duplicate key or column, an
            empty scale-field cell (naming the file, row and field).
    """
    suffix = path.suffix.lower()
    try:
        check_regular_file(path)  # before anything opens it: a FIFO's open never returns
    except OSError as exc:
        raise ValueError(f"{path}: cannot read workloads: {exc}") from exc
    try:
        if suffix in (".yaml", ".yml"):
            data = load_yaml(read_text(path))
            if isinstance(data, dict):
                data = data.get("workloads", [data])
            if not isinstance(data, list):
                raise ValueError("expected a list of workload mappings")
            return data
        if suffix == ".csv":
            frame = _read_csv(path)
        elif suffix == ".parquet":
            frame = pd.read_parquet(path)
        else:
            raise ValueError(f"unknown workload file type {suffix!r} (csv, yaml, parquet)")
    except Exception as exc:
        raise ValueError(f"{path}: cannot read workloads: {exc}") from exc
    return [
        table_row(row, f"{path}: row {i + 1}") for i, row in enumerate(frame.to_dict("records"))
    ]
