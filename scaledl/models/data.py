"""Training data of the predictors, assembled from validated profile tables.

From a directory of validated tables (:mod:`scaledl.profiling.store` layout) this builds, for the
workloads whose run is ``ok``:

* ``run_labels``: one row per launch (repeat) of a workload: ``iteration_ms`` (the 5% trimmed
  mean, :func:`~scaledl.profiling.stopping.label_statistic`, over the launch's un-instrumented
  label steps of the slowest rank's step time: data-parallel ranks wait for each other) and
  ``epoch_s`` (median over the launch's epochs of the slowest rank's epoch wall time);
* ``labels``: one row per workload: ``iteration_ms`` and ``epoch_s`` (medians of the launch
  labels), ``iteration_repeats`` (launches), ``iteration_rel_se`` (relative standard error of
  the label: the launch-to-launch standard deviation over the square root of the launches, or,
  with one launch, its label's 95% half-width / 1.96), ``steps_per_epoch``, ``iteration_cv``
  (robust CV of the label steps of all launches, :func:`~scaledl.profiling.store.robust_cv`),
  ``instrumented_ms`` (the same median over the instrumented steps, whose layer times the
  layer-wise models learn) and ``family`` (:func:`scaledl.workloads.identity.family_key`: the
  built-in family, or ``hf:<model_type>`` for other Hugging Face configs, so each architecture
  is its own family for leave-one-family-out splits);
* ``graphs``: the layer graphs of those workloads (a :class:`~scaledl.graph.features.GraphSet`
  in label order) whose nodes carry, where measured, ``forward_ms``/``backward_ms`` (median over
  ranks and instrumented steps; the optimizer node carries the AdamW step time as
  ``forward_ms``);
* ``buckets``: measured gradient all-reduce buckets (``allreduce_bytes``, ``allreduce_ms``,
  ``world_size``, ``num_nodes``), median per bucket over ranks and steps.
* ``operators``: the ``operator_timings`` table when the directory has one (per-operator
  times of an import, :mod:`scaledl.external.neusight_tables`), else ``None``.

**Host-drift correction.** Every launch label, and the instrumented layer, optimizer and epoch
times of that launch, are divided by the launch's slowdown factor
(:func:`scaledl.profiling.drift.correct_launch_labels`: a model of the host's slowdown fitted
on the profile's own repeated launches and their concurrent reference probes). The measured
values stay beside them in ``run_labels`` (``iteration_ms_raw``, ``slowdown_factor``); a launch
whose probes lie beyond the model's validated range is left out (counted in
``label_correction``). Profiles without probe figures (imports) keep their raw labels.

A launch without ``epochs`` rows (an import that measured no epoch) keeps its iteration label
with ``epoch_s`` NaN; a label of one step has ``iteration_cv`` NaN (no spread measured).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from scaledl.graph.features import GraphSet, build_graph_set
from scaledl.profiles.tables import (
    OPTIONAL_TABLE_NAMES,
    PROFILE_TABLE_NAMES,
    RUN_TABLE_NAMES,
)
from scaledl.profiling.drift import PROBE_COLUMNS, correct_launch_labels
from scaledl.profiling.stopping import label_statistic
from scaledl.profiling.store import robust_cv
from scaledl.workloads.identity import family_key
from scaledl.workloads.spec import Workload


class ProfileDataError(ValueError):
    """Profile tables cannot be turned into training data; names the file and column."""


@dataclass
class ProfileData:
    """Per-workload labels, per-node measurements and all-reduce buckets.

    Attributes:
        workloads: workload id -> :class:`Workload`.
        labels: one row per workload (see module docstring), indexed by position.
        graphs: the workloads' layer graphs, graph ``g`` is ``labels.iloc[g]``.
        buckets: measured all-reduce buckets.
        run_labels: one row per launch of a workload (``workload_id``, ``repeat``,
            ``iteration_ms``, ``epoch_s``).
        operators: per-operator timings (``operator_timings``) or ``None``.
        label_correction: the host-drift correction applied (see :func:`launch_labels`).
    """

    workloads: dict[str, Workload]
    labels: pd.DataFrame
    graphs: GraphSet
    buckets: pd.DataFrame
    run_labels: pd.DataFrame
    operators: pd.DataFrame | None = None
    label_correction: dict | None = None

    @property
    def ids(self) -> list[str]:
        """Workload ids, in label order."""
        return list(self.labels["workload_id"])

    @property
    def nodes(self) -> pd.DataFrame:
        """Every graph node (with measurements where measured)."""
        return self.graphs.nodes

    def subset(self, ids) -> ProfileData:
        """The data of the given workload ids only (in label order)."""
        keep = set(ids)
        positions = np.flatnonzero(self.labels["workload_id"].isin(keep).to_numpy())
        return ProfileData(
            workloads={k: v for k, v in self.workloads.items() if k in keep},
            labels=self.labels.iloc[positions].reset_index(drop=True),
            graphs=self.graphs.select(positions),
            buckets=self.buckets[self.buckets["workload_id"].isin(keep)].reset_index(drop=True),
            run_labels=self.run_labels[self.run_labels["workload_id"].isin(keep)].reset_index(
                drop=True
            ),
            operators=None
            if self.operators is None
            else self.operators[self.operators["workload_id"].isin(keep)].reset_index(drop=True),
            label_correction=self.label_correction,
        )


def read_tables(directory: Path) -> dict[str, pd.DataFrame]:
    """Read the six profile tables of a directory (and the optional ones present).

    Raises:
        ProfileDataError: a table file is missing or unreadable (the message names it).
    """
    tables = {}
    optional = [n for n in OPTIONAL_TABLE_NAMES if (Path(directory) / f"{n}.parquet").exists()]
    for name in (*PROFILE_TABLE_NAMES, *optional):
        path = Path(directory) / f"{name}.parquet"
        try:
            tables[name] = pd.read_parquet(path)
        except Exception as exc:
            raise ProfileDataError(f"{path}: cannot read table {name!r}: {exc}") from exc
    return tables


def load_profile_data(directory: Path) -> ProfileData:
    """Build :class:`ProfileData` from a directory of (validated) profile tables.

    Args:
        directory: holds ``workloads.parquet``, ``runs.parquet``, ``layer_timings.parquet``,
            ``allreduce_timings.parquet``, ``iteration_timings.parquet``, ``epochs.parquet``.

    Returns:
        The training data of every workload with an ``ok`` run and labels.

    Raises:
        ProfileDataError: a table is unreadable, or no workload is usable.
    """
    return profile_data_from_tables(read_tables(directory), source=str(directory))


def _usable_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs with status ``ok`` that the interference guard did not flag."""
    ok = runs["status"] == "ok"
    if "interference" in runs.columns:
        ok &= ~runs["interference"].fillna(False).astype(bool)
    return runs[ok]


def launch_labels(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One label per usable launch (run) of a workload.

    Args:
        tables: the six profile tables.

    Returns:
        Columns ``run_id``, ``workload_id``, ``repeat``, ``iteration_ms`` (label statistic,
        the 5% trimmed mean, over label steps of the slowest rank's step time),
        ``iteration_cv`` (robust CV of those steps), ``label_halfwidth`` (the run's recorded
        95% half-width of its label, ``nan`` when not recorded), ``instrumented_ms`` (median
        over instrumented steps) and ``epoch_s`` (median over epochs of the slowest rank's
        epoch time; NaN for a launch without epochs), all corrected for host drift, with
        ``iteration_ms_raw`` and ``slowdown_factor`` beside them. ``frame.attrs
        ["label_correction"]`` holds ``{"models": {world size: model}, "launches",
        "corrected", "not_correctable"}``.
    """
    runs = _usable_runs(tables["runs"])
    iters = tables["iteration_timings"]
    iters = iters[(iters["phase"] == "label") & iters["run_id"].isin(set(runs["run_id"]))]
    per_step = iters.groupby(["run_id", "step"])["iteration_ms"].max()
    per_run = per_step.groupby("run_id").agg([label_statistic, robust_cv, "size"])
    per_run.loc[per_run["size"] < 2, "robust_cv"] = np.nan  # one step: no spread measured
    instrumented = tables["iteration_timings"]
    instrumented = instrumented[instrumented["phase"] == "instrumented"]
    instrumented = (
        instrumented.groupby(["run_id", "step"])["iteration_ms"].max().groupby("run_id").median()
    )
    epochs = tables["epochs"]
    epochs = epochs[epochs["run_id"].isin(set(runs["run_id"]))]
    epoch_keys = ["run_id", "epoch"] if "epoch" in epochs.columns else ["run_id"]
    epoch_s = epochs.groupby(epoch_keys)["epoch_s"].max().groupby("run_id").median()
    steps = epochs.groupby("run_id")["steps_per_epoch"].max()
    frame = runs[["run_id", "workload_id"]].copy()
    frame["repeat"] = runs["repeat"].fillna(0).astype(int) if "repeat" in runs else 0
    frame["label_halfwidth"] = (
        runs["label_halfwidth"].astype(float) if "label_halfwidth" in runs else np.nan
    )
    frame["iteration_ms"] = frame["run_id"].map(per_run["label_statistic"])
    frame["iteration_cv"] = frame["run_id"].map(per_run["robust_cv"])
    # A low quantile of the steps, a label candidate where noise only adds time (compared
    # across runs by scaledl.evaluation.reproducibility, never used for training).
    frame["iteration_ms_p10"] = frame["run_id"].map(per_step.groupby("run_id").quantile(0.1))
    frame["instrumented_ms"] = frame["run_id"].map(instrumented)
    frame["epoch_s"] = frame["run_id"].map(epoch_s)
    frame["steps_per_epoch"] = frame["run_id"].map(steps)
    # A launch without epochs (an import) keeps its iteration label; epoch_s stays NaN.
    frame = frame.dropna(subset=["iteration_ms"])
    frame, report = _corrected(frame, runs)
    frame = frame.sort_values(["workload_id", "repeat"]).reset_index(drop=True)
    frame.attrs["label_correction"] = report
    return frame


def _corrected(frame: pd.DataFrame, runs: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Launch labels divided by their slowdown factors; the not-correctable ones left out."""
    by_run = runs.set_index("run_id")
    for column in PROBE_COLUMNS:
        source = by_run[column] if column in by_run else pd.Series(np.nan, index=by_run.index)
        frame[column] = frame["run_id"].map(source.astype(float))
    world = frame["run_id"].map(by_run["world_size"]) if "world_size" in by_run else 1
    frame, models = correct_launch_labels(frame, pd.Series(world, index=frame.index))
    frame["iteration_ms_p10_raw"] = frame["iteration_ms_p10"].astype(float)
    for column in ("instrumented_ms", "epoch_s", "iteration_ms_p10"):
        # An empty table maps to an all-missing column of any dtype: numbers first.
        frame[column] = frame[column].astype(float) / frame["slowdown_factor"]
    report = {
        "models": models,
        "launches": len(frame),
        "corrected": int((frame["slowdown_factor"] != 1.0).sum()),
        "not_correctable": int((~frame["drift_correctable"]).sum()),
    }
    frame = frame[frame["drift_correctable"]].drop(columns=list(PROBE_COLUMNS))
    return frame, report


def _relative_se(group: pd.DataFrame) -> float:
    """Relative standard error of a workload's label (see the module docstring)."""
    values = group["iteration_ms"].to_numpy(dtype=float)
    if len(values) >= 2:
        return float(np.std(values, ddof=1) / np.sqrt(len(values)) / np.median(values))
    halfwidth = float(group["label_halfwidth"].iloc[0])
    return halfwidth / 1.96 if halfwidth == halfwidth else float("nan")


def profile_data_from_tables(tables: dict[str, pd.DataFrame], source: str = "<tables>"):
    """:func:`load_profile_data` on tables already in memory."""
    usable = set(_usable_runs(tables["runs"])["run_id"])
    tables = {
        name: frame[frame["run_id"].isin(usable)] if name in RUN_TABLE_NAMES else frame
        for name, frame in tables.items()
    }
    runs = launch_labels(tables)
    factors = runs.set_index("run_id")["slowdown_factor"]
    tables = {
        name: frame[frame["run_id"].isin(factors.index)] if name in RUN_TABLE_NAMES else frame
        for name, frame in tables.items()
    }
    records = tables["workloads"].set_index("workload_id")
    workloads: dict[str, Workload] = {}
    rows = []
    for wid, group in runs.groupby("workload_id", sort=False):
        if wid not in records.index:
            continue
        record = records.loc[wid].to_dict()
        workload = Workload.from_record(record, source=f"{source}/workloads.parquet row {wid}")
        if workload.workload_id != wid:
            raise ProfileDataError(
                f"{source}/workloads.parquet: field 'workload_id' (value {wid!r}) does not match "
                f"its spec (hash {workload.workload_id!r})"
            )
        workloads[wid] = workload
        rows.append(
            {
                "workload_id": wid,
                "family": family_key(workload),
                "mode": workload.mode,
                "batch_size": workload.batch_size,
                "seq_len": workload.seq_len,
                "world_size": workload.world_size,
                "iteration_ms": float(group["iteration_ms"].median()),
                "iteration_repeats": len(group),
                "iteration_rel_se": _relative_se(group),
                "iteration_cv": float(group["iteration_cv"].median()),
                "instrumented_ms": float(group["instrumented_ms"].median()),
                "epoch_s": float(group["epoch_s"].median()),
                "steps_per_epoch": int(group["steps_per_epoch"].max())
                if group["steps_per_epoch"].notna().any()
                else workload.steps_per_epoch,
            }
        )
    if not rows:
        raise ProfileDataError(f"{source}: no workload with an ok run and labels")
    label_frame = pd.DataFrame(rows)
    graphs = build_graph_set([workloads[r["workload_id"]] for r in rows])
    graphs.nodes = _attach_measurements(graphs.nodes, tables, factors)
    buckets = _bucket_samples(tables["allreduce_timings"], workloads)
    run_labels = runs[runs["workload_id"].isin(workloads)].reset_index(drop=True)
    operators = tables.get("operator_timings")
    if operators is not None:
        operators = operators[operators["workload_id"].isin(workloads)].reset_index(drop=True)
    return ProfileData(
        workloads, label_frame, graphs, buckets, run_labels, operators,
        label_correction=runs.attrs.get("label_correction"),
    )  # fmt: skip


def _attach_measurements(
    nodes: pd.DataFrame, tables: dict[str, pd.DataFrame], factors: pd.Series
) -> pd.DataFrame:
    """Median layer and optimizer times per node, each launch's divided by its slowdown."""
    layer_rows = tables["layer_timings"].copy()
    scale = layer_rows["run_id"].map(factors).fillna(1.0)
    layer_rows[["forward_ms", "backward_ms"]] = layer_rows[["forward_ms", "backward_ms"]].div(
        scale, axis=0
    )
    layers = (
        layer_rows.groupby(["workload_id", "layer_index"])[["forward_ms", "backward_ms"]]
        .median()
        .reset_index()
    )
    nodes = nodes.merge(
        layers, on=["workload_id", "layer_index"], how="left", validate="many_to_one"
    )
    nodes.loc[nodes["node_kind"] != "layer", ["forward_ms", "backward_ms"]] = np.nan
    iters = tables["iteration_timings"]
    iters = iters[iters["phase"] == "instrumented"]
    optimizer_ms = iters["optimizer_ms"] / iters["run_id"].map(factors).fillna(1.0)
    opt = optimizer_ms.groupby(iters["workload_id"]).median()
    is_opt = nodes["node_kind"] == "optimizer"
    nodes.loc[is_opt, "forward_ms"] = nodes.loc[is_opt, "workload_id"].map(opt).to_numpy()
    nodes.loc[is_opt, "backward_ms"] = 0.0
    return nodes


def _bucket_samples(allreduce: pd.DataFrame, workloads: dict[str, Workload]) -> pd.DataFrame:
    columns = ["workload_id", "allreduce_bytes", "allreduce_ms", "world_size", "num_nodes"]
    if allreduce.empty:
        return pd.DataFrame(columns=columns)
    frame = allreduce[allreduce["workload_id"].isin(workloads)]
    med = (
        frame.groupby(["workload_id", "bucket_index"])
        .agg(allreduce_bytes=("allreduce_bytes", "median"), allreduce_ms=("allreduce_ms", "median"))
        .reset_index()
    )
    med["world_size"] = med["workload_id"].map(lambda w: workloads[w].world_size)
    med["num_nodes"] = med["workload_id"].map(lambda w: workloads[w].num_nodes)
    med = med[(med["allreduce_ms"] > 0) & (med["allreduce_bytes"] > 0)]
    return med[columns].reset_index(drop=True)


def relative_errors(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """``|pred - true| / true`` elementwise."""
    true = np.asarray(true, dtype=float)
    return np.abs(np.asarray(pred, dtype=float) - true) / true
