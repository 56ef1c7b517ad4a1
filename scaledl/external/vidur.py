"""Importer for Vidur's measured NCCL all-reduce times.

Source: microsoft/vidur (https://github.com/microsoft/vidur, MIT licence, see
``external/vidur/LICENSE``), files ``data/compute/.../network/<system>/all_reduce.csv``, copied to
``external/vidur/network/<system>/all_reduce.csv``. Each row is one (workers, devices per node,
message size) point measured with NCCL: ``time_stats.all_reduce.{min,max,mean,median,std}`` in
milliseconds, ``num_workers``, ``size`` (bytes per worker), ``devices_per_node``.

The alpha-beta model's evaluation on them is :mod:`scaledl.evaluation.vidur`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from scaledl.io.safe import check_regular_file
from scaledl.layout import vidur_network_root

_TIME_PREFIX = "time_stats.all_reduce."
_SEND_RECV = "time_stats.send_recv."
_REQUIRED = (
    f"{_TIME_PREFIX}median",
    f"{_TIME_PREFIX}mean",
    f"{_TIME_PREFIX}std",
    "num_workers",
    "size",
    "devices_per_node",
)

#: Columns of :func:`load_vidur_allreduce`.
ALLREDUCE_COLUMNS = (
    "system",
    "allreduce_bytes",
    "world_size",
    "devices_per_node",
    "num_nodes",
    "allreduce_ms",
    "allreduce_ms_mean",
    "allreduce_ms_std",
)


def load_vidur_allreduce(root: Path | str | None = None) -> pd.DataFrame:
    """Read every ``<system>/all_reduce.csv`` under ``root``.

    Args:
        root: the ``network`` folder of the Vidur data (default
            :func:`scaledl.layout.vidur_network_root`).

    Returns:
        One row per measurement with columns :data:`ALLREDUCE_COLUMNS`: ``allreduce_ms`` is the
        median time, ``num_nodes = world_size / devices_per_node``. Rows are sorted by system,
        world size, devices per node and size. Duplicated (system, world size, devices per node,
        size) points are kept (Vidur measured a handful twice).

    Raises:
        FileNotFoundError: ``root`` holds no ``*/all_reduce.csv``.
        ValueError: a file that is not a regular CSV file, lacks a required column, has a time,
            size or worker count that is not a finite positive number (a standard deviation:
            finite >= 0), or ``num_workers`` not divisible by ``devices_per_node`` (the message
            names the file, column, row and value).
    """
    root = Path(root) if root is not None else vidur_network_root()
    files = sorted(root.glob("*/all_reduce.csv"))
    if not files:
        raise FileNotFoundError(f"no */all_reduce.csv under {root}")
    frames = []
    for path in files:
        try:
            raw = pd.read_csv(check_regular_file(path))
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: cannot read CSV ({exc})") from None
        missing = [c for c in _REQUIRED if c not in raw.columns]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}")
        for col in _REQUIRED:
            values = pd.to_numeric(raw[col], errors="coerce")
            low = values >= 0 if col == f"{_TIME_PREFIX}std" else values > 0
            bad = ~(np.isfinite(values) & low)
            if bad.any():
                row = int(np.flatnonzero(bad.to_numpy())[0])
                bound = ">= 0" if col == f"{_TIME_PREFIX}std" else "> 0"
                raise ValueError(
                    f"{path}: column {col!r}, row {row}: expected a finite number {bound}, "
                    f"got {raw[col].iloc[row]!r}"
                )
        world = raw["num_workers"].astype(int)
        per_node = raw["devices_per_node"].astype(int)
        if (world % per_node != 0).any():
            row = int(np.flatnonzero((world % per_node != 0).to_numpy())[0])
            raise ValueError(
                f"{path}: column 'num_workers' ({world.iloc[row]}) is not a multiple of "
                f"'devices_per_node' ({per_node.iloc[row]}) in row {row}"
            )
        frames.append(
            pd.DataFrame(
                {
                    "system": path.parent.name,
                    "allreduce_bytes": raw["size"].astype(np.int64),
                    "world_size": world,
                    "devices_per_node": per_node,
                    "num_nodes": world // per_node,
                    "allreduce_ms": raw[f"{_TIME_PREFIX}median"].astype(float),
                    "allreduce_ms_mean": raw[f"{_TIME_PREFIX}mean"].astype(float),
                    "allreduce_ms_std": raw[f"{_TIME_PREFIX}std"].astype(float),
                }
            )
        )
    df = pd.concat(frames, ignore_index=True)
    keys = ["system", "world_size", "devices_per_node", "allreduce_bytes"]
    return df.sort_values(keys, kind="stable").reset_index(drop=True)[list(ALLREDUCE_COLUMNS)]


@cache
def load_vidur_send_recv(root: Path | None = None) -> pd.DataFrame:
    """Every ``<system>/send_recv.csv`` under Vidur's ``network`` folder.

    Returns:
        Columns ``system``, ``bytes`` (sent by one rank), ``num_nodes`` (1: both GPUs in one
        node, 2: two nodes), ``time_ms`` (median).

    Raises:
        FileNotFoundError: no ``*/send_recv.csv``.
        ValueError: a bad file (names the file, row, column and value).
    """
    root = Path(root or vidur_network_root())
    files = sorted(root.glob("*/send_recv.csv"))
    if not files:
        raise FileNotFoundError(f"no */send_recv.csv under {root}")
    frames = []
    for path in files:
        try:
            raw = pd.read_csv(check_regular_file(path))
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: cannot read CSV ({exc})") from None
        columns = (f"{_SEND_RECV}median", "size", "num_workers", "devices_per_node")
        missing = [c for c in columns if c not in raw.columns]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}")
        for col in columns:
            values = pd.to_numeric(raw[col], errors="coerce")
            bad = ~(np.isfinite(values) & (values > 0))
            if bad.any():
                row = int(np.flatnonzero(bad.to_numpy())[0])
                raise ValueError(
                    f"{path}: row {row + 1}, column {col!r}: expected a finite number > 0, "
                    f"got {raw[col].iloc[row]!r}"
                )
        frames.append(
            pd.DataFrame(
                {
                    "system": path.parent.name,
                    "bytes": raw["size"].astype(float),
                    "num_nodes": (raw["num_workers"] // raw["devices_per_node"]).astype(int),
                    "time_ms": raw[f"{_SEND_RECV}median"].astype(float),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)
