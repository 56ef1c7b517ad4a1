"""Profile storage: one atomic part per (workload, repeat), consolidated into parquet tables.

Layout under a profiles directory ``OUT`` (default ``data/profiles``)::

    OUT/parts/<workload_id>/r<repeat>/workload.json    the workload's spec
    OUT/parts/<workload_id>/r<repeat>/run.json         the run record (status, error, host...)
    OUT/parts/<workload_id>/r<repeat>/<table>.parquet  that launch's rows of each table
    OUT/<table>.parquet                                all parts together (:func:`consolidate`)

Each repeat of a workload is an independent launch (:mod:`scaledl.profiling.launch`). A part is
written into a temporary directory, fsynced and renamed into place (:mod:`scaledl.io.atomic`), so
a part either exists whole or not at all, also after a power loss: an interrupted batch loses
nothing finished, and a rerun skips every (workload, repeat) whose part says ``ok`` without
interference (failed, disturbed and unreadable ones are measured again).
Tables (units in names):

* ``workloads``: the spec of each workload (``Workload.to_record()``), once per workload.
* ``runs``: one row per launch of a workload: ``run_id``, ``workload_id``, ``repeat``,
  ``status`` (ok/failed/oom/timeout), ``error``, ``host``, versions, step counts, times,
  ``label_ms`` (5% trimmed mean of the slowest rank's label steps), ``instrumentation_overhead``
  (fraction), ``iteration_cv`` (:func:`robust_cv` of the label steps), the adaptive stop's
  ``label_steps``, ``label_halfwidth`` (relative 95% half-width of the median) and
  ``label_stop_reason``, the interference guard's ``interference``, ``attempts``,
  ``probe_drift``, ``foreign_load_cores`` and probe figures, and each rank's core ``affinity``.
* ``layer_timings``: ``run_id``, ``workload_id``, ``rank``, ``step``, ``layer_index``,
  ``layer_name``, ``layer_type``, ``forward_ms``, ``backward_ms`` and the layer's analytical
  features (``fwd_flops``, ``bwd_flops``, ``params``, ``input_bytes``, ``output_bytes``).
* ``allreduce_timings``: ``run_id``, ``workload_id``, ``rank``, ``step``, ``bucket_index``,
  ``allreduce_bytes``, ``allreduce_ms``.
* ``iteration_timings``: ``run_id``, ``workload_id``, ``rank``, ``step``, ``phase``
  (``instrumented``/``label``), ``iteration_ms``, ``forward_ms``, ``backward_ms``,
  ``optimizer_ms``, ``allreduce_ms``, ``allreduce_bytes``.
* ``epochs``: ``run_id``, ``workload_id``, ``rank``, ``epoch`` (index within the launch),
  ``epoch_s``, ``steps_per_epoch``, ``dataset_size``.

Optional tables (written when some run has rows for them: training at world size > 1):

* ``collective_timings``: ``run_id``, ``workload_id``, ``rank``, ``step``,
  ``collective_index`` (order within the step), ``collective`` (``all_reduce``,
  ``all_gather``, ``reduce_scatter``, ``broadcast``, ``send``, ``recv``), ``group`` (``dp``,
  ``tp``, ``pp``), ``group_size``, ``collective_bytes``, ``collective_ms``, ``source``
  (``measured``/``microbenchmark``: :mod:`scaledl.profiling.collectives`).
* ``pipeline_timings`` (``pp_size > 1``): ``run_id``, ``workload_id``, ``rank``, ``step``,
  ``stage``, ``micro_batch``, ``phase`` (``forward``/``backward``), ``start_ms``, ``end_ms``
  from the start of the instrumented iteration.

Layout runs add ``micro_batch`` (pipeline) and ``tp_shards`` (tensor parallelism) to
``layer_timings``, whose features are then those of the rank's own call
(:func:`local_layer_features`); plain-DDP tables have neither column.
"""

from __future__ import annotations

import errno
import json
import logging
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from scaledl.graph.layer_graph import LAYER_FEATURE_COLUMNS, build_layer_graph
from scaledl.io.atomic import (
    atomic_dir,
    remove_stale_temps,
    write_atomic,
    write_parquet_atomic,
)
from scaledl.profiles.tables import PROFILE_TABLE_NAMES
from scaledl.profiling.shards import SHARDS_SUBDIR
from scaledl.profiling.stopping import label_statistic
from scaledl.workloads.spec import Workload

_PART_FILES = {
    "layers": "layer_timings",
    "iterations": "iteration_timings",
    "allreduce": "allreduce_timings",
    "epoch": "epochs",
    "collectives": "collective_timings",
    "pipeline": "pipeline_timings",
}
#: Part tables written only when the launch produced rows for them (a part without the file
#: is complete: parts written before these tables existed stay usable).
_OPTIONAL_PART_TABLES = ("collective_timings", "pipeline_timings")
#: Columns of ``layer_timings`` present only for layouts that need them.
_LAYOUT_LAYER_COLUMNS = ("micro_batch", "tp_shards")
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
    "epochs": [
        "run_id", "workload_id", "rank", "epoch", "epoch_s", "steps_per_epoch", "dataset_size",
    ],
    "collective_timings": [
        "run_id", "workload_id", "rank", "step", "collective_index", "collective", "group",
        "group_size", "collective_bytes", "collective_ms", "source",
    ],
    "pipeline_timings": [
        "run_id", "workload_id", "rank", "step", "stage", "micro_batch", "phase", "start_ms",
        "end_ms",
    ],
}  # fmt: skip


log = logging.getLogger(__name__)

#: Free space a profiles directory needs before a launch (bytes): a part takes well under 1 MB,
#: the consolidated tables a few times the parts.
MIN_FREE_BYTES = 64 << 20
#: ``errno`` values of a folder that cannot take writes: a user error, reported naming it.
UNWRITABLE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


class ProfileStoreError(RuntimeError):
    """A profile part or table cannot be read or written; the message names the file."""


def check_writable(out_dir: Path, min_free_bytes: int = MIN_FREE_BYTES) -> None:
    """Check before launching that a profiles directory takes writes and has room.

    Creates the directory and ``parts/``, writes and removes a temporary file there, and
    checks the free space (``shutil.disk_usage``).

    Args:
        out_dir: the profiles directory.
        min_free_bytes: the free space needed.

    Raises:
        ProfileStoreError: the folder cannot be created or written (read-only file system,
            permissions) or has less free space than ``min_free_bytes``; names the folder.
    """
    folder = parts_dir(out_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        free = shutil.disk_usage(folder).free
    except OSError as exc:
        raise ProfileStoreError(
            f"{folder}: cannot write profiles here: {exc.strerror or exc}"
        ) from None
    if free < min_free_bytes:
        raise ProfileStoreError(
            f"{folder}: only {free / 2**20:.1f} MiB free, profiling needs at least "
            f"{min_free_bytes / 2**20:.0f} MiB: free space or choose another --out"
        )


def parts_dir(out_dir: Path) -> Path:
    """Directory holding one part per workload."""
    return Path(out_dir) / "parts"


def part_path(out_dir: Path, workload_id: str, repeat: int) -> Path:
    """Directory of one (workload, repeat) part."""
    return parts_dir(out_dir) / workload_id / f"r{int(repeat)}"


def current_marker_path(out_dir: Path) -> Path:
    """File where the worker names the workload it is profiling now (for launch timeouts)."""
    path = parts_dir(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path / "_current.json"


def probe_baseline_path(out_dir: Path) -> Path:
    """JSON file of the stored per-host probe baselines (``OUT/probe_baselines.json``)."""
    return Path(out_dir) / "probe_baselines.json"


def read_probe_baselines(out_dir: Path) -> dict[str, dict[str, dict[str, float]]]:
    """The stored probe baselines: ``key -> local rank -> {gemm_ms, allreduce_ms}``.

    The key names the host, device type, local world size and cores per rank
    (:func:`scaledl.profiling.worker` builds it); an absent file is an empty mapping.

    Raises:
        ProfileStoreError: the file exists but is not a JSON mapping (names the file).
    """
    path = probe_baseline_path(out_dir)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ProfileStoreError(f"{path}: unreadable probe baselines: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileStoreError(f"{path}: probe baselines must be a JSON mapping")
    return data


def write_probe_baselines(out_dir: Path, baselines: dict[str, dict[str, dict[str, float]]]):
    """Write the stored probe baselines atomically (see :func:`read_probe_baselines`)."""
    text = json.dumps(_jsonable_nested(baselines), indent=1, sort_keys=True)
    write_atomic(probe_baseline_path(out_dir), text)


def _jsonable_nested(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable_nested(v) for k, v in value.items()}
    if isinstance(value, float) and np.isnan(value):
        return None
    return value


def write_part(
    out_dir: Path, workload: Workload, run: dict[str, Any], records: dict[str, list[dict]]
) -> Path:
    """Write one (workload, repeat) run and its tables atomically and durably.

    The part is written into a hidden temporary folder, every file fsynced, and renamed into
    place (:func:`scaledl.io.atomic.atomic_dir`): a crash or power loss leaves the old part or
    the new one, never a part of files never written. Temporaries of dead writers are removed.

    Args:
        out_dir: the profiles directory.
        workload: the workload profiled.
        run: the run record (``repeat``, ``status``, ``error``, host and versions...; a record
            without ``repeat`` is repeat 0).
        records: rows per part table (``layers``, ``iterations``, ``allreduce``, ``epoch``),
            each row with ``rank`` and the table's measurements.

    Returns:
        The part directory.

    Raises:
        OSError: the part could not be written (``ENOSPC``...); the old part, if any, is kept.
    """
    run = {"repeat": 0, "interference": False, **run}
    run_id = f"{workload.workload_id}-r{run['repeat']}-{uuid.uuid4().hex[:8]}"
    run["run_id"] = run_id
    frames = {}
    for key, table in _PART_FILES.items():
        frame = pd.DataFrame(records.get(key, []))
        frame.insert(0, "workload_id", workload.workload_id)
        frame.insert(0, "run_id", run_id)
        frames[table] = frame
    if run["status"] == "ok":
        frames["layer_timings"] = _with_layer_features(frames["layer_timings"], workload)
        frames["layer_timings"] = local_layer_features(frames["layer_timings"], workload)
        frames["epochs"]["dataset_size"] = workload.dataset_size
        run.update(_run_summary(frames["iteration_timings"]))
    else:
        run.update(
            {
                "measured_steps": 0,
                "label_ms": np.nan,
                "instrumentation_overhead": np.nan,
                "iteration_cv": np.nan,
            }
        )
    for table, frame in list(frames.items()):
        extra = [c for c in _LAYOUT_LAYER_COLUMNS if table == "layer_timings" and c in frame]
        if table in _OPTIONAL_PART_TABLES and frame.empty:
            del frames[table]
        else:
            frames[table] = frame.reindex(columns=_COLUMNS[table] + extra)

    final = part_path(out_dir, workload.workload_id, run["repeat"])
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(final.parent)
    with atomic_dir(final, replace=True) as tmp:
        (tmp / "workload.json").write_text(json.dumps(workload.to_record(), sort_keys=True))
        (tmp / "run.json").write_text(json.dumps(_jsonable(run), sort_keys=True))
        for table, frame in frames.items():
            frame.to_parquet(tmp / f"{table}.parquet", index=False)
    return final


def _with_layer_features(frame: pd.DataFrame, workload: Workload) -> pd.DataFrame:
    features = build_layer_graph(workload).layers[["layer_index", *LAYER_FEATURE_COLUMNS]]
    return frame.merge(features, on="layer_index", how="left", validate="many_to_one")


def local_layer_features(frame: pd.DataFrame, workload: Workload) -> pd.DataFrame:
    """The analytical features of the call each layout row timed, not of the full model's.

    * Pipeline parallelism (rows with ``micro_batch``): a call processes
      ``batch_size / micro_batches`` samples, so its features are those of the layer graph of
      that batch size (traced again; parameters unchanged).
    * Tensor parallelism (rows with ``tp_shards > 1``): the unit's FLOPs (forward, backward)
      and parameters are divided by ``tp_shards``: every matrix product of a Megatron-split
      attention or feed-forward unit is split evenly (projections by columns or rows, the
      attention scores by heads); the norms, residual adds and row-wise biases inside the unit
      are replicated, a small share the division leaves out. Input and output bytes are
      unchanged (the unit's input is replicated and its output all-reduced).

    Rows of a plain-DDP workload, or of sharded data parallelism, are returned unchanged.

    Args:
        frame: ``layer_timings`` rows of one run, with the full model's features.
        workload: the run's workload.

    Returns:
        The rows with the local features.
    """
    out = frame
    if "micro_batch" in out and workload.micro_batches > 1:
        micro_batch_size = workload.batch_size // workload.micro_batches
        micro = workload.model_copy(update={"batch_size": micro_batch_size})
        features = build_layer_graph(micro).layers.set_index("layer_index")
        columns = [c for c in LAYER_FEATURE_COLUMNS if c != "params"]
        out = out.copy()
        for column in columns:
            out[column] = out["layer_index"].map(features[column]).to_numpy()
    if "tp_shards" in out and (out["tp_shards"] > 1).any():
        out = out.copy()
        shards = out["tp_shards"].astype(float)
        for column in ("fwd_flops", "bwd_flops"):
            out[column] = out[column] / shards
        out["params"] = (out["params"] // out["tp_shards"]).astype("int64")
    return out


def _run_summary(iterations: pd.DataFrame) -> dict[str, Any]:
    """Label, instrumentation overhead and repeat CV of one run's iteration rows.

    The label of a launch is the label statistic (5% trimmed mean,
    :func:`scaledl.profiling.stopping.label_statistic`) over label steps of the slowest rank's
    step time (data-parallel ranks wait for each other at every all-reduce).
    """
    per_step = iterations.groupby(["phase", "step"])["iteration_ms"].max()
    label = per_step.get("label", pd.Series(dtype=float))
    instrumented = per_step.get("instrumented", pd.Series(dtype=float))
    label_ms = label_statistic(label.to_numpy()) if len(label) else np.nan
    return {
        "measured_steps": int(len(label)),
        "label_ms": label_ms,
        "instrumentation_overhead": float(instrumented.median() / label_ms - 1.0)
        if len(instrumented) and label_ms > 0
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


def part_roots(out_dir: Path) -> list[Path]:
    """The profiles directories whose parts ``out_dir`` holds: itself and its shard directories.

    Shards profiled at once on several nodes write into ``out_dir/shards/<K-of-N>``
    (:func:`scaledl.profiling.shards.shard_dir`); their parts count as the directory's own.
    """
    shards = Path(out_dir) / SHARDS_SUBDIR
    own = sorted(d for d in shards.iterdir() if d.is_dir()) if shards.is_dir() else []
    return [Path(out_dir), *own]


def _part_dirs(out_dir: Path) -> list[Path]:
    """Every part directory (``parts/<workload_id>/r<k>``) of :func:`part_roots`, sorted."""
    found = []
    for root in map(parts_dir, part_roots(out_dir)):
        if not root.exists():
            continue
        found.extend(
            part
            for workload in root.iterdir()
            if workload.is_dir() and not workload.name.startswith((".", "_"))
            for part in workload.iterdir()
            if part.is_dir() and part.name.startswith("r") and (part / "run.json").exists()
        )
    return sorted(found)


def part_problem(part: Path) -> str | None:
    """Why a part cannot be used (``None``: every file of it is readable).

    Checks that ``run.json`` and ``workload.json`` are JSON mappings and that every table file
    is a non-empty parquet file whose footer reads (``pyarrow.parquet.read_metadata``); the
    rows themselves are read by :func:`consolidate`.

    Returns:
        The reason, naming the file, or ``None``.
    """
    part = Path(part)
    for name in ("run.json", "workload.json"):
        try:
            record = json.loads((part / name).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            return f"{part / name}: unreadable: {exc}"
        if not isinstance(record, dict) or (name == "run.json" and "status" not in record):
            return f"{part / name}: not a run record"
    for table in _COLUMNS:
        path = part / f"{table}.parquet"
        if table in _OPTIONAL_PART_TABLES and not path.exists():
            continue
        try:
            pq.read_metadata(path)
        except Exception as exc:  # pyarrow raises OSError, ArrowInvalid...: all unreadable
            return f"{path}: unreadable: {exc}"
    return None


def _usable_parts(out_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every part with its run record, leaving out (and logging) the unreadable ones."""
    usable = []
    for part in _part_dirs(out_dir):
        problem = part_problem(part)
        if problem is not None:
            log.warning("%s: unusable part, measured again: %s", part, problem)
            continue
        usable.append((part, read_run(part)))
    return usable


def completed_parts(out_dir: Path) -> set[tuple[str, int]]:
    """(workload id, repeat) of the parts that need no new measurement.

    A part is complete when every file of it reads (:func:`part_problem`), its run is ``ok``
    and was not disturbed (``interference`` false); failed, timed-out, disturbed and
    unreadable parts (an empty table file after a crash, say: logged) are measured again by
    the next launch.
    """
    done = set()
    for part, run in _usable_parts(out_dir):
        if run["status"] == "ok" and not run.get("interference", False):
            done.add((part.parent.name, int(run.get("repeat", 0))))
    return done


def part_statuses(out_dir: Path) -> dict[tuple[str, int], tuple[str, str]]:
    """``(workload_id, repeat) -> (status, run_id)`` of every usable part present now."""
    result = {}
    for part, run in _usable_parts(out_dir):
        result[(part.parent.name, int(run.get("repeat", 0)))] = (run["status"], run["run_id"])
    return result


def completed_workload_ids(out_dir: Path, repeats: int = 1) -> set[str]:
    """Workloads whose repeats ``0..repeats-1`` are all complete (:func:`completed_parts`)."""
    done = completed_parts(out_dir)
    ids = {wid for wid, _ in done}
    return {wid for wid in ids if all((wid, r) in done for r in range(repeats))}


def consolidate(out_dir: Path, workload_ids: set[str] | None = None) -> dict[str, pd.DataFrame]:
    """Concatenate the parts (those of the shard directories too) into ``OUT/<table>.parquet``.

    Writes are atomic.

    Args:
        out_dir: the profiles directory.
        workload_ids: only these workloads' parts (all parts when ``None``).

    Returns:
        The tables by name.

    Raises:
        ProfileStoreError: a part is unreadable (the message names its file; the next profile
            of that workload measures it again), or the same (workload, repeat) part is in two
            of :func:`part_roots` (both named).
        OSError: a table could not be written (``ENOSPC``...); the old table is kept.
    """
    collected: dict[str, list[pd.DataFrame]] = {t: [] for t in PROFILE_TABLE_NAMES}
    seen: set[str] = set()
    where: dict[tuple[str, str], Path] = {}
    for part in _part_dirs(out_dir):
        workload_id = part.parent.name
        if workload_ids is not None and workload_id not in workload_ids:
            continue
        if (workload_id, part.name) in where:
            raise ProfileStoreError(
                f"{part}: the same part is also in {where[workload_id, part.name]} (profiled "
                "in two shard directories, e.g. after changing the number of shards): delete "
                "one of them"
            )
        where[workload_id, part.name] = part
        run = read_run(part)
        try:
            record = json.loads((part / "workload.json").read_text())
            if workload_id not in seen:
                seen.add(workload_id)
                collected["workloads"].append(pd.DataFrame([record]))
            collected["runs"].append(pd.DataFrame([run]))
            for table in _COLUMNS:
                path = part / f"{table}.parquet"
                if table in _OPTIONAL_PART_TABLES and not path.exists():
                    continue
                collected.setdefault(table, []).append(pd.read_parquet(path))
        except Exception as exc:
            raise ProfileStoreError(f"{part}: unreadable part: {exc}") from exc
    tables = {}
    for table in _OPTIONAL_PART_TABLES:
        if not any(len(f) for f in collected.get(table, [])):
            collected.pop(table, None)
            (Path(out_dir) / f"{table}.parquet").unlink(missing_ok=True)  # no stale table
    for table, frames in collected.items():
        frames = [f for f in frames if len(f)]
        columns = _COLUMNS.get(table)
        tables[table] = (
            pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
        )
        write_parquet_atomic(tables[table], Path(out_dir) / f"{table}.parquet")
    return tables


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
