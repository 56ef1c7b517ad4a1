"""Profile storage: one atomic part per workload, consolidated into parquet tables.

Layout under a profiles directory ``OUT`` (default ``data/profiles``)::

    OUT/parts/<workload_id>/run.json            the run record (status, error, host, versions)
    OUT/parts/<workload_id>/<table>.parquet     that workload's rows of each table
    OUT/<table>.parquet                         all parts together (:func:`consolidate`)

A part is written into a temporary directory and renamed into place, so a part either exists
whole or not at all: an interrupted batch loses nothing finished, and a rerun skips every
``workload_id`` whose part says ``ok`` (failed ones are tried again). Tables (units in names):

* ``workloads``: the spec of each workload (``Workload.to_record()``).
* ``runs``: ``run_id``, ``workload_id``, ``status`` (ok/failed/oom/timeout), ``error``, ``host``,
  versions, step counts, times, ``instrumentation_overhead`` (fraction) and ``iteration_cv``
  (:func:`robust_cv` of the label steps).
* ``layer_timings``: ``run_id``, ``workload_id``, ``rank``, ``step``, ``layer_index``,
  ``layer_name``, ``layer_type``, ``forward_ms``, ``backward_ms`` and the layer's analytical
  features (``fwd_flops``, ``bwd_flops``, ``params``, ``input_bytes``, ``output_bytes``).
* ``allreduce_timings``: ``run_id``, ``workload_id``, ``rank``, ``step``, ``bucket_index``,
  ``allreduce_bytes``, ``allreduce_ms``.
* ``iteration_timings``: ``run_id``, ``workload_id``, ``rank``, ``step``, ``phase``
  (``instrumented``/``label``), ``iteration_ms``, ``forward_ms``, ``backward_ms``,
  ``optimizer_ms``, ``allreduce_ms``, ``allreduce_bytes``.
* ``epochs``: ``run_id``, ``workload_id``, ``rank``, ``epoch_s``, ``steps_per_epoch``,
  ``dataset_size``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scaledl.graph.layer_graph import LAYER_FEATURE_COLUMNS, build_layer_graph
from scaledl.workloads.spec import Workload

TABLES = (
    "workloads",
    "runs",
    "layer_timings",
    "allreduce_timings",
    "iteration_timings",
    "epochs",
)
_PART_FILES = {
    "layers": "layer_timings",
    "iterations": "iteration_timings",
    "allreduce": "allreduce_timings",
    "epoch": "epochs",
}
_COLUMNS = {
    "layer_timings": [
        "run_id", "workload_id", "rank", "step", "layer_index", "layer_name", "layer_type",
        "forward_ms", "backward_ms", "fwd_flops", "bwd_flops", "fwd_ops", "params", "input_bytes",
        "output_bytes",
    ],
    "allreduce_timings": [
        "run_id", "workload_id", "rank", "step", "bucket_index", "allreduce_bytes",
        "allreduce_ms",
    ],
    "iteration_timings": [
        "run_id", "workload_id", "rank", "step", "phase", "iteration_ms", "forward_ms",
        "backward_ms", "optimizer_ms", "allreduce_ms", "allreduce_bytes",
    ],
    "epochs": ["run_id", "workload_id", "rank", "epoch_s", "steps_per_epoch", "dataset_size"],
}  # fmt: skip


class ProfileStoreError(RuntimeError):
    """A profile part or table cannot be read; the message names the file."""


def parts_dir(out_dir: Path) -> Path:
    """Directory holding one part per workload."""
    return Path(out_dir) / "parts"


def current_marker_path(out_dir: Path) -> Path:
    """File where the worker names the workload it is profiling now (for launch timeouts)."""
    path = parts_dir(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path / "_current.json"


def write_part(
    out_dir: Path, workload: Workload, run: dict[str, Any], records: dict[str, list[dict]]
) -> Path:
    """Write one workload's run and tables atomically.

    Args:
        out_dir: the profiles directory.
        workload: the workload profiled.
        run: the run record (``status``, ``error``, host and versions...).
        records: rows per part table (``layers``, ``iterations``, ``allreduce``, ``epoch``),
            each row with ``rank`` and the table's measurements.

    Returns:
        The part directory.
    """
    run = dict(run)
    run_id = f"{workload.workload_id}-{uuid.uuid4().hex[:8]}"
    run["run_id"] = run_id
    frames = {}
    for key, table in _PART_FILES.items():
        frame = pd.DataFrame(records.get(key, []))
        frame.insert(0, "workload_id", workload.workload_id)
        frame.insert(0, "run_id", run_id)
        frames[table] = frame
    if run["status"] == "ok":
        frames["layer_timings"] = _with_layer_features(frames["layer_timings"], workload)
        frames["epochs"]["dataset_size"] = workload.dataset_size
        run.update(_run_summary(frames["iteration_timings"]))
    else:
        run.update(
            {"measured_steps": 0, "instrumentation_overhead": np.nan, "iteration_cv": np.nan}
        )
    for table, frame in frames.items():
        frames[table] = frame.reindex(columns=_COLUMNS[table])

    final = parts_dir(out_dir) / workload.workload_id
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{workload.workload_id}.", dir=final.parent))
    try:
        (tmp / "workload.json").write_text(json.dumps(workload.to_record(), sort_keys=True))
        (tmp / "run.json").write_text(json.dumps(_jsonable(run), sort_keys=True))
        for table, frame in frames.items():
            frame.to_parquet(tmp / f"{table}.parquet", index=False)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _with_layer_features(frame: pd.DataFrame, workload: Workload) -> pd.DataFrame:
    features = build_layer_graph(workload).layers[["layer_index", *LAYER_FEATURE_COLUMNS]]
    return frame.merge(features, on="layer_index", how="left", validate="many_to_one")


def _run_summary(iterations: pd.DataFrame) -> dict[str, Any]:
    """Label steps, instrumentation overhead and repeat CV of one run's iteration rows."""
    per_step = iterations.groupby(["phase", "step"])["iteration_ms"].max()
    label = per_step.get("label", pd.Series(dtype=float))
    instrumented = per_step.get("instrumented", pd.Series(dtype=float))
    label_median = float(label.median()) if len(label) else np.nan
    return {
        "measured_steps": int(len(label)),
        "instrumentation_overhead": float(instrumented.median() / label_median - 1.0)
        if len(instrumented) and label_median > 0
        else np.nan,
        "iteration_cv": robust_cv(label.to_numpy()),
    }


def robust_cv(values: np.ndarray) -> float:
    """Robust coefficient of variation: ``1.4826 * MAD / median`` (0 for fewer than 2 values).

    The scaled median absolute deviation estimates the standard deviation of normal noise but
    ignores the rare, much slower step (an OS hiccup) that a plain ``std / mean`` lets dominate;
    the labels are medians, which ignore such steps too (Rousseeuw & Croux 1993).
    """
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return 0.0
    median = float(np.median(values))
    return float(1.4826 * np.median(np.abs(values - median)) / median)


def read_run(part: Path) -> dict[str, Any]:
    """The run record of a part.

    Raises:
        ProfileStoreError: the file is missing or not JSON.
    """
    path = Path(part) / "run.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ProfileStoreError(f"{path}: unreadable run record: {exc}") from exc


def completed_workload_ids(out_dir: Path, statuses: tuple[str, ...] = ("ok",)) -> set[str]:
    """Workloads whose part exists with one of ``statuses``."""
    root = parts_dir(out_dir)
    if not root.exists():
        return set()
    done = set()
    for part in root.iterdir():
        if part.is_dir() and not part.name.startswith(".") and (part / "run.json").exists():
            if read_run(part)["status"] in statuses:
                done.add(part.name)
    return done


def consolidate(out_dir: Path, workload_ids: set[str] | None = None) -> dict[str, pd.DataFrame]:
    """Concatenate the parts into ``OUT/<table>.parquet`` (atomic writes).

    Args:
        out_dir: the profiles directory.
        workload_ids: only these workloads' parts (all parts when ``None``).

    Returns:
        The tables by name.

    Raises:
        ProfileStoreError: a part is unreadable (the message names its file).
    """
    root = parts_dir(out_dir)
    collected: dict[str, list[pd.DataFrame]] = {t: [] for t in TABLES}
    parts = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    for part in parts:
        if workload_ids is not None and part.name not in workload_ids:
            continue
        run = read_run(part)
        try:
            record = json.loads((part / "workload.json").read_text())
            collected["workloads"].append(pd.DataFrame([record]))
            collected["runs"].append(pd.DataFrame([run]))
            for table in _COLUMNS:
                collected[table].append(pd.read_parquet(part / f"{table}.parquet"))
        except Exception as exc:
            raise ProfileStoreError(f"{part}: unreadable part: {exc}") from exc
    tables = {}
    for table, frames in collected.items():
        frames = [f for f in frames if len(f)]
        columns = _COLUMNS.get(table)
        tables[table] = (
            pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
        )
        atomic_write_parquet(tables[table], Path(out_dir) / f"{table}.parquet")
    return tables


def atomic_write_parquet(frame: pd.DataFrame, path: Path) -> Path:
    """Write a parquet file through a temporary file and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:6]}.tmp")
    try:
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _jsonable(record: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in record.items():
        if isinstance(v, float) and np.isnan(v):
            out[k] = None
        elif isinstance(v, np.generic):
            out[k] = v.item()
        else:
            out[k] = v
    return out
