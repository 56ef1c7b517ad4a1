"""Importer for Vidur's measured NCCL all-reduce times, and an evaluation of the alpha-beta model.

Source: microsoft/vidur (https://github.com/microsoft/vidur, MIT licence, see
``external/vidur/LICENSE``), files ``data/compute/.../network/<system>/all_reduce.csv``, copied to
``external/vidur/network/<system>/all_reduce.csv``. Each row is one (workers, devices per node,
message size) point measured with NCCL: ``time_stats.all_reduce.{min,max,mean,median,std}`` in
milliseconds, ``num_workers``, ``size`` (bytes per worker), ``devices_per_node``.

Evaluation protocol (:func:`evaluate_allreduce_model`): within each (system, world size,
devices per node) sweep, message sizes are sorted and alternately assigned to train and test
(even ranks train, odd ranks test), i.e. interpolation across message sizes for topologies that
were measured. Each system gets one model over all its topologies, fitted on its training half.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scaledl.io.safe import check_regular_file
from scaledl.layout import vidur_network_root
from scaledl.models.allreduce import (
    AlphaBetaAllReduce,
    mean_relative_error,
    select_size_breakpoints,
)

_TIME_PREFIX = "time_stats.all_reduce."
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


def split_by_message_size(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Alternate message sizes between train and test within each sweep.

    Args:
        df: output of :func:`load_vidur_allreduce`.

    Returns:
        ``(train, test)``: in each (system, world size, devices per node) sweep sorted by size,
        rows of even rank go to train and odd rank to test.
    """
    keys = ["system", "world_size", "devices_per_node"]
    ordered = df.sort_values([*keys, "allreduce_bytes"], kind="stable")
    rank = ordered.groupby(keys).cumcount()
    return ordered[rank % 2 == 0], ordered[rank % 2 == 1]


def _metrics(model: AlphaBetaAllReduce, test: pd.DataFrame) -> dict[str, float]:
    pred = model.predict_ms(test["allreduce_bytes"], test["world_size"], test["num_nodes"])
    true = test["allreduce_ms"].to_numpy()
    small = test["allreduce_bytes"].to_numpy() < 1 << 20
    return {
        "mre": mean_relative_error(pred, true),
        "mre_below_1MiB": mean_relative_error(pred[small], true[small]) if small.any() else np.nan,
        "mre_from_1MiB": mean_relative_error(pred[~small], true[~small])
        if (~small).any()
        else np.nan,
        "rmse_ms": float(np.sqrt(np.mean((pred - true) ** 2))),
    }


def _fit(train: pd.DataFrame, **kwargs: Any) -> AlphaBetaAllReduce:
    return AlphaBetaAllReduce(**kwargs).fit(
        train["allreduce_bytes"], train["world_size"], train["allreduce_ms"], train["num_nodes"]
    )


#: Model variants compared by :func:`evaluate_allreduce_model` (name -> constructor kwargs).
VARIANTS: dict[str, dict[str, Any]] = {
    "base": {"per_topology": True},
    "per_configuration": {"per_configuration": True},
    "per_configuration_piecewise": {"per_configuration": True},
}


def evaluate_allreduce_model(df: pd.DataFrame) -> pd.DataFrame:
    """Fit and test the alpha-beta model per system (train/test by :func:`split_by_message_size`).

    Variants (all weighted by 1/t, i.e. least squares on the relative error):

    * ``base``: the textbook model, one (alpha, bandwidth) per topology (single node vs several
      nodes, ``per_topology=True``) shared by all world sizes of the system.
    * ``per_configuration``: one (alpha, bandwidth) per measured (world size, nodes): rings of
      different sizes cross different links (4 GPUs with pairwise NVLink ring through PCIe).
    * ``per_configuration_piecewise``: as ``per_configuration`` plus up to two message-size
      breakpoints per system, chosen on the training half only by
      :func:`~scaledl.models.allreduce.select_size_breakpoints` (NCCL changes protocol with size).

    Args:
        df: output of :func:`load_vidur_allreduce` (any subset of systems).

    Returns:
        One row per (system, variant): ``system``, ``variant``, ``n_train``, ``n_test``, ``mre``
        (mean |pred - true| / true on the test half), ``mre_below_1MiB``, ``mre_from_1MiB``,
        ``rmse_ms``, ``alpha_ms`` and ``bandwidth_gbps`` (bus bandwidth ``1/beta`` in GB/s of
        1e9 bytes) of the first fitted group in its largest size regime, all groups as
        ``params`` (JSON of :meth:`AlphaBetaAllReduce.to_dict`), and ``breakpoints_bytes``.

    Raises:
        ValueError: a sweep too small to fit (see :meth:`AlphaBetaAllReduce.fit`).
    """
    train_all, test_all = split_by_message_size(df)
    rows = []
    for system in sorted(df["system"].unique()):
        train = train_all[train_all["system"] == system]
        test = test_all[test_all["system"] == system]
        for variant, kwargs in VARIANTS.items():
            kwargs = dict(kwargs)
            if variant.endswith("piecewise"):
                kwargs["size_breakpoints_bytes"] = select_size_breakpoints(
                    train["allreduce_bytes"],
                    train["world_size"],
                    train["allreduce_ms"],
                    train["num_nodes"],
                    **kwargs,
                )
            model = _fit(train, **kwargs)
            first = min(g for g, _ in model.params_)
            alpha, inv_bw = model.params_[(first, max(r for g, r in model.params_ if g == first))]
            rows.append(
                {
                    "system": system,
                    "variant": variant,
                    "n_train": len(train),
                    "n_test": len(test),
                    **_metrics(model, test),
                    "alpha_ms": alpha,
                    "bandwidth_gbps": 1e-6 / inv_bw if inv_bw > 0 else np.inf,
                    "params": json.dumps(model.to_dict()),
                    "breakpoints_bytes": list(model.size_breakpoints_bytes),
                }
            )
    return pd.DataFrame(rows)
