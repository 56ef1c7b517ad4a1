"""Parse many workload rows, once per distinct spec less its dataset size.

A workloads file of a planner or a scheduler repeats each architecture and scale at many
dataset sizes; the iteration time does not depend on the dataset size (it sets the steps per
epoch only). :func:`parse_rows` groups the rows by every field but ``dataset_size`` (and the
metadata columns a spec ignores), parses and checks one row of each group with the full rules
(``parse_one``: :class:`~scaledl.workloads.spec.Workload` validation, device, trace), and
checks the other rows' dataset sizes as numbers (a positive integer, the spec's rule). A row
whose dataset size is not plainly such a number is parsed in full, so every error is the one
parsing that row alone raises, for the first bad row in input order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from scaledl.prediction.ids import IdTemplate
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.spec import RECORD_METADATA_COLUMNS, Workload, is_missing

_DATASET = "dataset_size"
_DEFAULT_DATASET = Workload.model_fields[_DATASET].default
_SKIP = RECORD_METADATA_COLUMNS | {_DATASET}


@dataclass(frozen=True)
class ParsedRows:
    """Rows parsed per group of equal specs (all fields but the dataset size).

    Attributes:
        workloads: one parsed workload per group (its own row's dataset size).
        group: the group of each row, shape (n_rows,).
        dataset_size: each row's dataset size, shape (n_rows,), int64.
        workload_ids: each row's ``workload_id``.
    """

    workloads: list[Workload]
    group: np.ndarray
    dataset_size: np.ndarray
    workload_ids: list[str]

    @property
    def steps_per_epoch(self) -> np.ndarray:
        """``ceil(dataset_size / (batch_size * world_size))`` per row, as the spec computes it."""
        gbs = np.array([w.global_batch_size for w in self.workloads], dtype=np.float64)
        return np.ceil(self.dataset_size / gbs[self.group]).astype(np.int64)


def _plain_dataset_size(value: Any) -> int | None:
    """The value as a dataset size when it plainly is one (a positive integer), else ``None``."""
    if type(value) is int:
        return value if value > 0 else None
    if type(value) is float and math.isfinite(value) and value.is_integer() and value > 0:
        return int(value)
    return None


def _group_key(record: Any, table: bool) -> Any:
    """A hashable key equal for records equal in every field but the dataset size."""
    if isinstance(record, Workload):
        return ("w", tuple(v for k, v in record.__dict__.items() if k != _DATASET))
    if not isinstance(record, dict):
        return None
    items = tuple(
        (k, v) for k, v in record.items() if k not in _SKIP and not (table and is_missing(v))
    )
    try:
        hash(items)
    except TypeError:
        return None
    return ("d", items)


def parse_rows(
    records: list[Any],
    parse_one: Callable[[Any, str], Workload],
    source: str = "",
    table: bool = False,
    first_row: int = 1,
) -> ParsedRows:
    """Parse workload rows per group of equal specs (module docstring).

    Args:
        records: the rows: dicts (table rows when ``table``) or ``Workload`` objects.
        parse_one: parses and checks one row, ``parse_one(record, where)``, raising
            :class:`~scaledl.workloads.fields.WorkloadError` naming ``where``.
        source: where the rows came from (a file), named in errors.
        table: the rows are table rows (empty cells are fields not given).
        first_row: the number of ``records[0]`` in the source (a chunk of a file: its offset).

    Returns:
        The :class:`ParsedRows`.

    Raises:
        scaledl.workloads.fields.WorkloadError: the error of the first bad row, as
            ``parse_one`` raises it for that row alone.
    """
    prefix = f"{source}: " if source else ""

    def where(i: int) -> str:
        return f"{prefix}row {first_row + i}"

    n = len(records)
    group = np.empty(n, dtype=np.int64)
    sizes = np.empty(n, dtype=np.int64)
    keys: dict[Any, int] = {}
    members: list[list[int]] = []
    suspect: list[int] = []
    for i, record in enumerate(records):
        key = _group_key(record, table)
        if key is None:
            key = ("row", i)  # unhashable or not a mapping: parsed alone
        g = keys.setdefault(key, len(members))
        if g == len(members):
            members.append([])
        members[g].append(i)
        group[i] = g
        if isinstance(record, Workload):
            sizes[i] = record.dataset_size
            continue
        value = record.get(_DATASET, _DEFAULT_DATASET) if isinstance(record, dict) else None
        size = _plain_dataset_size(value)
        if size is None:
            suspect.append(i)
        else:
            sizes[i] = size
    suspect_set = set(suspect)
    workloads: list[Workload | None] = []
    failed: list[int] = []
    for rows in members:
        rep = next((i for i in rows if i not in suspect_set), None)
        if rep is None:
            workloads.append(None)
            continue
        try:
            workloads.append(parse_one(records[rep], where(rep)))
        except WorkloadError:
            workloads.append(None)
            failed.append(rows[0])
    parsed_alone: dict[int, Workload] = {}
    for i in sorted(suspect_set | set(failed)):
        parsed_alone[i] = parse_one(records[i], where(i))  # raises the row's own error
    for i, w in parsed_alone.items():
        sizes[i] = w.dataset_size
        if workloads[group[i]] is None:
            workloads[group[i]] = w
    ids: list[str] = [""] * n
    for g, rows in enumerate(members):
        template = IdTemplate(workloads[g], (_DATASET,))
        for i, wid in zip(rows, template.ids(sizes[rows]), strict=True):
            ids[i] = wid
    return ParsedRows(list(workloads), group, sizes, ids)
