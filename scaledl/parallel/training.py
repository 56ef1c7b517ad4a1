"""Layer-wise training samples from layout profiles: what each rank ran, on its local shapes.

A layout profile's ``layer_timings`` (issue-26 profiler, :mod:`scaledl.profiling.store`) time
every layer a rank runs on its own shapes: a tensor-parallel rank its ``1/t`` shard of the
attention and feed-forward units, a pipeline rank its stage's layers on one micro-batch of
``batch_size / micro_batches`` samples, a sharded (ZeRO/FSDP) rank the full layers. Each
workload gives one training sample per layer of the model, built like a prediction's
(:mod:`scaledl.parallel.predict`): the layer graph of one micro-batch
(:func:`~scaledl.parallel.shard.base_workload`) split as one rank runs it
(:func:`~scaledl.parallel.shard.shard_tensor_parallel`), so training and prediction read the
same features (the profile's own local features agree with them in FLOPs, bytes and
parameters; its traced operator count of an attention unit differs by one to three operators
from the graph's, for every layout alike), with the measured time beside them: the median over
ranks, steps and micro-batches of the drift-corrected ``forward_ms`` and ``backward_ms``.

The optimizer node gets one sample per pipeline stage: the median instrumented
``optimizer_ms`` of that stage's ranks (the stage from ``pipeline_timings``; ZeRO-1's
partition broadcasts, timed in ``collective_timings``, taken out: the composition adds them
itself) with the parameters the rank updates (its stage's, after the tensor-parallel split,
``1/dp`` of them with any sharding) and, as its operator count, the parameter tensors it steps
(:func:`~scaledl.parallel.optimizer_tensors.stepped_tensors`), as
:meth:`scaledl.parallel.predict._LayerTimes.optimizer_ms` predicts it.

Some of these times are not the compute the composition predicts layer by layer: a
tensor-parallel unit's holds its all-reduce, an FSDP / ZeRO-2 unit's its collectives' waits
(:func:`collectives_inside` flags them; measured on ``datasets/layouts-cpu``: tensor-parallel
attention 2 to 7 times the data-parallel layer of twice its FLOPs, the last layer of an FSDP
block 3 to 10 times in backward), so a caller may leave them out.

:func:`fold_samples` keeps the samples of a fold's training workloads only; the evaluation
(:mod:`scaledl.evaluation.profiled_layouts`) fits the layer-wise models of each leave-one-layout-out
fold on them, so a held-out layout kind's timings never train its own prediction.

:func:`load_layout_context` reads a layout dataset into a :class:`LayoutContext`, what every
layout fit shares (the calibration's and each fold of :mod:`scaledl.evaluation.profiled_layouts`);
:func:`layout_kind` names a workload's layout kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.linear_model import Ridge

from scaledl.graph.features import architecture_graphs, build_graph_set
from scaledl.models.data import launch_labels, profile_data_from_tables, read_tables
from scaledl.models.layerwise import LayerwiseModel
from scaledl.models.layerwise_stage import fit_layerwise_stage
from scaledl.models.samples import measured_nodes
from scaledl.models.threads import single_threaded
from scaledl.parallel.collective_fit import fit_collective_model
from scaledl.parallel.collectives import CollectiveModel
from scaledl.parallel.optimizer_tensors import stepped_tensors
from scaledl.parallel.overlap import fit_overlap
from scaledl.parallel.predict import LayoutComposer, LayoutPredictions
from scaledl.parallel.recipe import (
    CANDIDATES,
    Correction,
    LayerModels,
    LayoutRecipe,
    correction_features,
)
from scaledl.parallel.shard import (
    TENSOR_PARALLEL_TYPES,
    base_workload,
    rank_parameters,
    shard_tensor_parallel,
)
from scaledl.workloads.spec import Workload


def _medians(frame: pd.DataFrame, keys: list[str], columns: list[str], factors: pd.Series):
    """Median of drift-corrected ``columns`` per ``keys`` (runs without a factor: dropped)."""
    frame = frame[frame["run_id"].isin(factors.index)]
    scaled = frame[columns].div(frame["run_id"].map(factors), axis=0)
    return scaled.groupby([frame[k] for k in keys]).median()


def _stage_of_rank(tables: Mapping[str, pd.DataFrame]) -> pd.Series:
    """``(workload_id, rank) -> stage`` from ``pipeline_timings`` (empty without the table)."""
    pipe = tables.get("pipeline_timings")
    if pipe is None or pipe.empty:
        return pd.Series(dtype=np.int64)
    return pipe.groupby(["workload_id", "rank"])["stage"].first()


def _optimizer_ms(tables: Mapping[str, pd.DataFrame], factors: pd.Series) -> pd.Series:
    """Median optimizer step per ``(workload_id, stage)``, ZeRO-1 broadcasts taken out."""
    iters = tables["iteration_timings"]
    iters = iters[iters["phase"] == "instrumented"].copy()
    collectives = tables.get("collective_timings")
    if collectives is not None and not collectives.empty:
        broadcast = collectives[collectives["collective"] == "broadcast"]
        per_step = broadcast.groupby(["run_id", "rank", "step"])["collective_ms"].sum()
        index = pd.MultiIndex.from_frame(iters[["run_id", "rank", "step"]])
        iters["optimizer_ms"] -= per_step.reindex(index).fillna(0.0).to_numpy()
    stage = _stage_of_rank(tables)
    index = pd.MultiIndex.from_frame(iters[["workload_id", "rank"]])
    iters["stage"] = stage.reindex(index).fillna(0).astype(int).to_numpy() if len(stage) else 0
    return _medians(iters, ["workload_id", "stage"], ["optimizer_ms"], factors)["optimizer_ms"]


def layout_layer_samples(
    tables: Mapping[str, pd.DataFrame],
    workloads: Mapping[str, Workload],
    factors: pd.Series,
) -> pd.DataFrame:
    """Measured layer and optimizer samples of every workload, on the rank's local shapes.

    Args:
        tables: validated profile tables (``layer_timings``, ``iteration_timings``; optional
            ``pipeline_timings``, ``collective_timings``).
        workloads: ``{workload_id: Workload}`` (any layout, plain DDP included).
        factors: each launch's host slowdown factor, indexed by ``run_id``
            (:func:`scaledl.models.data.launch_labels`, column ``slowdown_factor``); launches
            without one (left out of the labels) are left out here too.

    Returns:
        Graph nodes (:class:`~scaledl.graph.features.GraphSet` columns) with a positive
        measured ``forward_ms`` and ``backward_ms`` (0 where none), one per layer and
        workload plus one optimizer node per workload and stage; ``workload_id`` is the
        layout workload's; ``collectives_inside`` (:func:`collectives_inside`) flags the
        times that hold the layout's communication.

    Raises:
        ValueError: a workload without any measured layer (naming it).
    """
    ids = list(workloads)
    gs = build_graph_set([base_workload(w, w.batch_size // w.micro_batches)
                          for w in workloads.values()], ids=ids)  # fmt: skip
    nodes = gs.nodes
    layer_ms = _medians(tables["layer_timings"], ["workload_id", "layer_index"],
                        ["forward_ms", "backward_ms"], factors)  # fmt: skip
    optimizer_ms = _optimizer_ms(tables, factors)
    frames = []
    for g, (wid, w) in enumerate(workloads.items()):
        own = nodes[nodes["graph"].to_numpy() == g]
        layers = shard_tensor_parallel(own[(own["node_kind"] == "layer").to_numpy()], w.tp_size)
        index = pd.MultiIndex.from_arrays([[wid] * len(layers), layers["layer_index"]])
        measured = layer_ms.reindex(index)
        if measured["forward_ms"].isna().all():
            raise ValueError(f"layer_timings: no measured layer of workload_id {wid!r}")
        layers = layers.assign(forward_ms=measured["forward_ms"].to_numpy(),
                               backward_ms=measured["backward_ms"].to_numpy())  # fmt: skip
        optimizer = _optimizer_rows(own, w, wid, optimizer_ms)
        frames.append(layers.assign(collectives_inside=collectives_inside(layers, w)))
        frames.append(optimizer.assign(collectives_inside=collectives_inside(optimizer, w)))
    return measured_nodes(pd.concat(frames, ignore_index=True))


def collectives_inside(nodes: pd.DataFrame, w: Workload) -> np.ndarray:
    """Whether each node's measured time holds the layout's own communication or wrappers.

    By how PyTorch runs the layouts (the profiler, :mod:`scaledl.profiling.layout_session`):
    a tensor-parallel unit's time holds its all-reduce (DTensor's redistribution inside the
    row-wise linear, forward and backward) and DTensor dispatch; an FSDP2 / ZeRO-2 unit's
    time holds the wait for its all-gather (pre-forward hook) and its reduce-scatter
    (post-backward hook), and every layer is inside a unit (the root one included); the
    optimizer steps DTensor parameters under both; under DDP and ZeRO-1 with ``dp > 1``
    the first layer's backward holds the reducer's wait for the last gradient buckets
    (:func:`_ends_the_backward`), and ZeRO-1's step (``ZeroRedundancyOptimizer.step``) its
    partition broadcasts (the micro-benchmarked broadcasts taken out, its samples still took
    about 1.5x a pipeline stage's step of the same tensors). The composition adds those
    collectives itself, so these times are not the compute it predicts layer by layer.

    Args:
        nodes: graph nodes of ``w`` (``layer_type``, ``node_kind``).
        w: the workload.

    Returns:
        bool array, shape (n_nodes,).
    """
    optimizer = (nodes["node_kind"] == "optimizer").to_numpy()
    if w.sharding in ("zero2", "fsdp"):
        return np.ones(len(nodes), dtype=bool)
    if w.tp_size > 1:
        return optimizer | nodes["layer_type"].isin(TENSOR_PARALLEL_TYPES).to_numpy()
    if w.mode == "train" and w.dp_size > 1:
        return _ends_the_backward(nodes) | (optimizer if w.sharding == "zero1" else False)
    return np.zeros(len(nodes), dtype=bool)


def _ends_the_backward(nodes: pd.DataFrame) -> np.ndarray:
    """The layer whose measured backward ends with the whole backward pass: the first one run.

    The first layer of a model (token or patch embedding) takes no input gradient, so the
    instrument ends its backward when the backward pass returns
    (:mod:`scaledl.profiling.instrument`); under DDP (and ZeRO-1, which runs DDP) that is
    after the reducer has waited for the last gradient buckets' all-reduces: on a 2-core CPU
    profile it took about ten times the pipeline stages' (``docs/history/2026-12-code-notes.md``),
    so it holds the exposed gradient synchronisation the composition adds itself.
    """
    layers = np.flatnonzero((nodes["node_kind"] == "layer").to_numpy())
    out = np.zeros(len(nodes), dtype=bool)
    if len(layers):
        out[layers[np.argmin(nodes["layer_index"].to_numpy()[layers])]] = True
    return out


def _optimizer_rows(own: pd.DataFrame, w: Workload, wid: str, steps: pd.Series) -> pd.DataFrame:
    """One optimizer node per stage with the rank's parameter count and measured step."""
    template = own[(own["node_kind"] == "optimizer").to_numpy()][:1]
    if template.empty or w.mode != "train":
        return template.iloc[:0]
    per_stage, _ = rank_parameters(architecture_graphs(w)[0].layers, w.tp_size, w.pp_size)
    share = 1.0 / w.dp_size if w.sharding != "none" else 1.0
    rows = template.loc[template.index.repeat(w.pp_size)].reset_index(drop=True)
    rows["params"] = np.rint(np.asarray(per_stage) * share)
    rows["fwd_ops"] = stepped_tensors(w)
    index = pd.MultiIndex.from_arrays([[wid] * w.pp_size, range(w.pp_size)])
    rows["forward_ms"] = steps.reindex(index).to_numpy()
    rows["backward_ms"] = 0.0
    return rows


def fold_samples(
    samples: pd.DataFrame,
    kinds: Mapping[str, str],
    held_out: str | None,
    train_ids: Sequence[str],
) -> pd.DataFrame:
    """The samples of a fold's training workloads.

    Args:
        samples: :func:`layout_layer_samples`.
        kinds: ``{workload_id: layout kind}`` (:func:`layout_kind`).
        held_out: the held-out kind (``None``: none, a fit on every kind).
        train_ids: the fold's training workloads.

    Returns:
        The rows of ``train_ids``.

    Raises:
        ValueError: a training workload of the held-out kind (the protocol forbids it), or no
            sample left.
    """
    leaked = [wid for wid in train_ids if kinds[wid] == held_out]
    if leaked:
        raise ValueError(f"fold {held_out!r}: training workload {leaked[0]!r} is held out")
    out = samples[samples["workload_id"].isin(set(train_ids))]
    if out.empty:
        raise ValueError(f"fold {held_out!r}: no layer sample among the training workloads")
    return out


def layout_kind(w: Workload) -> str:
    """``fsdp`` (any sharding: ZeRO-1/2, FSDP), ``tp``, ``pp`` or ``ddp``."""
    if w.sharding != "none":
        return "fsdp"
    if w.tp_size > 1:
        return "tp"
    return "pp" if w.pp_size > 1 else "ddp"


def lanes_used(w: Workload, cm: CollectiveModel | None = None) -> set[str]:
    """The overlap lanes (:data:`~scaledl.parallel.overlap.LANES`) a workload's composition uses.

    Args:
        w: the workload.
        cm: the collective model it is composed with: one holding FSDP2's probed costs in
            both directions (:mod:`scaledl.profiling.fsdp_probe`) costs a ``zero2`` / ``fsdp``
            unit without the all-gather and reduce-scatter lanes.
    """
    lanes = set()
    probed = cm is not None and all(
        cm.source.get(c, "none") != "none" for c in ("fsdp_forward", "fsdp_backward",
                                                      "zero2_backward")
    )  # fmt: skip
    if w.mode == "train" and w.dp_size > 1 and not probed:
        lanes |= {"all_gather", "reduce_scatter"} if w.sharding in ("zero2", "fsdp") else set()
    if w.mode == "train" and w.dp_size > 1:
        lanes |= {"all_reduce"} if w.sharding in ("none", "zero1") else set()
    if w.pp_size > 1:
        lanes.add("send")
    return lanes


def collective_rows(tables: dict[str, pd.DataFrame], ids: set[str]) -> pd.DataFrame | None:
    """The collective timings of the workloads ``ids``, one row per call: its slowest rank's.

    Returns:
        The rows :func:`~scaledl.parallel.collective_fit.fit_collective_model` takes, or ``None``
        without a ``collective_timings`` table or a row of ``ids``.
    """
    table = tables.get("collective_timings")
    if table is None:
        return None
    rows = table[table["workload_id"].isin(ids)]
    # one value per (run, step, collective call): the slowest rank's
    keys = [c for c in ("run_id", "step", "collective", "group", "group_size", "source",
                        "collective_bytes") if c in rows]  # fmt: skip
    return rows.groupby(keys, as_index=False)["collective_ms"].max() if len(rows) else None


def _spread(pred: LayoutPredictions, measured: np.ndarray, train: np.ndarray) -> float:
    """Standard deviation of ``log(measured / composed)`` over the training workloads."""
    return float(np.std(np.log(measured[train] / np.maximum(pred.iteration_ms[train], 1e-9))))


def _spread_of(composer: LayoutComposer, measured, train, overlap) -> float:
    """:func:`_spread` of ``composer``'s prediction under ``overlap``."""
    return _spread(composer.predict(overlap), measured, train)


def load_layout_context(directory: Path) -> LayoutContext:
    """Read a layout dataset and fit what every fold shares (:class:`LayoutContext`).

    Args:
        directory: a validated profile dataset with data-parallel and layout workloads.

    Returns:
        The context: workloads, median iteration labels (ms), the data-parallel workloads'
        layer-wise stage and every workload's layer samples.

    Raises:
        scaledl.models.data.ProfileDataError: unreadable tables or no usable workload.
        ValueError: no data-parallel workload to fit the layer-wise models on, or no layout.
    """
    tables = read_tables(Path(directory))
    collectives = Path(directory) / "collective_timings.parquet"
    if "collective_timings" not in tables and collectives.exists():  # the layout profiler's
        tables["collective_timings"] = pd.read_parquet(collectives)
    runs = launch_labels(tables)
    labels = runs.groupby("workload_id")["iteration_ms"].median()
    records = tables["workloads"].set_index("workload_id")
    ids = [wid for wid in records.index if wid in labels.index]
    ws = {wid: Workload.from_record(records.loc[wid].to_dict(),
                                    source=f"{directory}/workloads.parquet row {wid}")
          for wid in ids}  # fmt: skip
    kinds = {wid: layout_kind(w) for wid, w in ws.items()}
    ddp = [wid for wid in ids if kinds[wid] == "ddp"]
    if not ddp or len(ddp) == len(ws):
        raise ValueError(f"{directory}: need both data-parallel and layout workloads")
    # The current method's layer-wise models see the data-parallel workloads' tables only.
    ddp_tables = {name: frame[frame["workload_id"].isin(ddp)] if "workload_id" in frame
                  else frame for name, frame in tables.items()}  # fmt: skip
    stage = fit_layerwise_stage(profile_data_from_tables(ddp_tables, source=str(directory)), 1)
    samples = layout_layer_samples(tables, ws, runs.set_index("run_id")["slowdown_factor"])
    measured = labels.loc[ids].to_numpy(dtype=float)
    return LayoutContext(tables, ids, ws, kinds, measured, stage, samples)


class LayoutContext:
    """What every fold reads: tables, workloads (in ``ids`` order), labels, fitted parts.

    Args:
        tables: the validated profile tables.
        ids: the labelled workload ids.
        ws: ``{workload_id: Workload}``.
        kinds: ``{workload_id: layout kind}`` (:func:`layout_kind`).
        measured: median iteration time of each of ``ids``, ms.
        stage: the layer-wise stage fitted on the data-parallel workloads.
        samples: :func:`~scaledl.parallel.training.layout_layer_samples` of every workload.
    """

    def __init__(self, tables, ids, ws, kinds, measured, stage, samples) -> None:
        self.tables, self.ids, self.kinds, self.measured = tables, ids, kinds, measured
        self.wlist = [ws[wid] for wid in ids]
        self.kind = np.array([kinds[wid] for wid in ids])
        self.stage, self.samples = stage, samples

    def candidates(
        self,
        scope: np.ndarray,
        held: np.ndarray,
        kind: str | None,
        names: tuple[str, ...] = tuple(CANDIDATES),
    ) -> dict[str, tuple]:
        """:data:`CANDIDATES` fitted on ``scope[~held]``, predicted on all of ``scope``.

        Args:
            scope: positions (in ``ids``) of the workloads of this level.
            held: the held-out ones among them, bool, shape (len(scope),).
            kind: the held-out kind (``None``: none, every kind trains).
            names: the candidates to fit.

        Returns:
            ``{name: (composed_ms, corrected_ms, info, recipe)}``, arrays of shape
            (len(scope),), ``recipe`` the fitted :class:`~scaledl.parallel.recipe.LayoutRecipe`.
        """
        train_ids = [self.ids[i] for i in scope[~held]]
        ws = [self.wlist[i] for i in scope]
        measured = self.measured[scope]
        allreduce = self.stage.allreduce if "ddp" in self.kind[scope[~held]] else None
        rows = collective_rows(self.tables, set(train_ids))
        cm = fit_collective_model(rows, allreduce, related=True)
        used = set().union(*(lanes_used(self.wlist[i], cm) for i in scope[~held]))
        samples = fold_samples(self.samples, self.kinds, kind, train_ids)
        out = {}
        for rows in dict.fromkeys(CANDIDATES[name][0] for name in names):
            train = samples if rows == "all" else samples[~samples["collectives_inside"]]
            with single_threaded():
                layerwise = LayerwiseModel().fit(train)
            composer = LayoutComposer(LayerModels(layerwise, allreduce), ws, cm)
            by_kind = train.groupby(train["workload_id"].map(self.kinds)).size()
            info = {"collectives": dict(cm.source),
                    "layer_samples_by_kind": {k: int(v) for k, v in by_kind.items()}}  # fmt: skip
            ours = [name for name in names if CANDIDATES[name][0] == rows]
            overlap = None
            if any(CANDIDATES[name][1] for name in ours):
                overlap = fit_overlap(partial(_spread_of, composer, measured, ~held), used)
            for name in ours:
                fitted = overlap if CANDIDATES[name][1] else None
                pred = composer.predict(fitted)
                extra = {"overlap": overlap.to_dict()} if fitted else {}
                correction = fit_correction(pred, ws, measured, ~held)
                recipe = LayoutRecipe(name, layerwise, cm, fitted, correction)
                out[name] = (pred.iteration_ms, correction.apply(pred, ws), {**info, **extra},
                             recipe)  # fmt: skip
        return out


#: Ridge penalty of the correction (fixed a priori, as in the evaluation).
RIDGE_ALPHA = 1.0


def fit_correction(
    pred: LayoutPredictions,
    ws: Sequence[Workload],
    measured_ms: np.ndarray,
    train: np.ndarray,
) -> Correction:
    """Fit the layout correction's ridge on the training workloads.

    Args:
        pred: composed predictions of ``ws``.
        ws: the workloads.
        measured_ms: measured iteration times, shape (len(ws),).
        train: which workloads to fit on, bool, shape (len(ws),).

    Returns:
        The fitted correction.
    """
    x = correction_features(pred, ws)
    y = np.log(measured_ms / np.maximum(pred.iteration_ms, 1e-9))
    ridge = Ridge(alpha=RIDGE_ALPHA).fit(x[train], y[train])
    return Correction(tuple(float(c) for c in ridge.coef_), float(ridge.intercept_))
