"""Evaluation on real GPU profiles (imported NeuSight data) through the product's own pipeline.

The imported tables (:mod:`scaledl.external.neusight_tables`, validated like every profile) are
loaded with :func:`scaledl.models.data.load_profile_data`: the layer graphs come from the
product's meta-device tracer and the methods are the product's classes. Protocols:

* **leave one model out** (LOMO): for each model (architecture), every method is fitted on the
  other models' workloads (all GPUs, both modes) and predicts the held-out model's on every
  GPU; the MRE is reported per GPU (over that GPU's workloads), as the mean over GPUs and the
  worst GPU. Hyper-parameters are chosen inside each fold by inner leave-one-model-out
  validation on the training models only (:class:`~scaledl.models.operators.OperatorTimeModel`;
  the correction's ``RidgeCV``), never on the held-out model.
* **leave one GPU out** (LOGO): for each GPU, the methods are fitted on the other GPUs' workloads
  (all models) and predict the held-out GPU's from its specs only (:mod:`scaledl.devices`).
* **operators**: in each LOMO fold, the fold's operator model predicts the held-out model's
  measured operators (NeuSight's per-node latencies): MRE per operator class and direction, and
  the time-weighted error ``sum |pred - true| / sum true``.
* **4-GPU layouts** (``parallel_layouts``, with NeuSight's own predictions of those rows): every
  ``-dp4``, ``-tp4`` and ``-pp4_1`` label predicted as Megatron-LM ran it, the same fitted
  method's per-rank layers composed with Vidur-fitted collectives and the optimizer step
  through :mod:`scaledl.parallel`, paired against NeuSight
  (:mod:`scaledl.evaluation.gpu_layouts`, which says what the labels measure).

Methods: ``scaledl`` (:class:`~scaledl.models.kernel.KernelGraphMethod`: operator models,
kernel-aware layer-wise models, GNN correction or, with fewer than ``min_gnn_architectures``
training architectures, the ridge fallback: every fold here, the data has four models),
``additive`` (the same layer-wise sum, no correction) and ``analytical`` (FLOPs of one
iteration / (the device's peak FP32 FLOP/s x a utilisation per mode, the median over the
training workloads), the baseline of the issue). MRE = mean(|pred - true| / true).
"""

from __future__ import annotations

import copy
import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from joblib import Parallel, delayed

from scaledl.devices.specs import device_spec
from scaledl.evaluation.gpu_cache import ResultCache, cache_key
from scaledl.evaluation.gpu_layouts import evaluate_layout_rows
from scaledl.evaluation.gpu_peer import (
    PEER_METHOD,
    PEER_SOURCE,
    peer_comparison,
    peer_rows,
    peer_targets,
)
from scaledl.evaluation.progress import EvaluationProgress
from scaledl.evaluation.targets import gpu_targets
from scaledl.external.neusight_peer import load_peer_layout_predictions, load_peer_predictions
from scaledl.external.vidur import load_vidur_allreduce
from scaledl.graph.features import workload_frame
from scaledl.layout import neusight_root
from scaledl.models.data import ProfileData, load_profile_data
from scaledl.models.kernel import DEFAULT_OPERATOR_PARAMS, KernelGraphMethod, operator_rows
from scaledl.models.operators import shared_fits
from scaledl.models.threads import single_threaded
from scaledl.models.train import validation_ids
from scaledl.workloads.identity import architecture_group, family_key
from scaledl.workloads.spec import Workload

GPU_METHODS = ("scaledl", "additive", "analytical")


@dataclass
class GpuEvaluationConfig:
    """Settings of :func:`evaluate_gpu`.

    Attributes:
        methods: methods of :data:`GPU_METHODS` to evaluate.
        min_gnn_architectures: fewest training architectures for ScaleDL's GNN correction.
        parallel_labels: the import's ``parallel_labels.parquet`` (the 4-GPU labels); ``None``
            skips the 4-GPU evaluation (``parallel_layouts``).
        vidur_root: Vidur ``network`` folder (the collectives of the 4-GPU composition);
            ``None`` skips the 4-GPU evaluation.
        leave_one_gpu_out: run the LOGO protocol.
        operator_params: keyword arguments of the operator models, updating
            :data:`~scaledl.models.kernel.DEFAULT_OPERATOR_PARAMS`.
        peer_root: NeuSight's own predictions (``external/neusight_peer``), the peer column
            (:mod:`scaledl.evaluation.gpu_peer`) and the 4-GPU rows' peer; ``None`` leaves
            both out.
        neusight_root: the NeuSight data folder whose ``device_configs`` name the peer's GPUs
            (default :func:`scaledl.layout.neusight_root`).
        n_jobs: parallel processes of the folds (``joblib``: -1 every core, 1 in-process);
            the results do not depend on it.
        baselines: further kernel-aware methods, ``{name: KernelGraphMethod keyword
            arguments}``, each fitted in every fold like ``scaledl`` and reported as a column
            (default none; ``benchmarks/history/gpu_v1.py`` adds the recipe before issue 25b,
            ``scaledl_v1``); their ``operator_params`` update ``operator_params``.
    """

    methods: tuple[str, ...] = GPU_METHODS
    min_gnn_architectures: int = 8
    parallel_labels: Path | None = None
    vidur_root: Path | None = None
    leave_one_gpu_out: bool = True
    operator_params: dict = field(default_factory=dict)
    peer_root: Path | None = None
    neusight_root: Path | None = None
    n_jobs: int = 1
    baselines: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in GPU_METHODS]
        if unknown:
            raise ValueError(f"GpuEvaluationConfig: unknown method(s) {unknown}; {GPU_METHODS}")
        clash = sorted(set(self.baselines) & {*GPU_METHODS, PEER_METHOD})
        if clash:
            raise ValueError(f"GpuEvaluationConfig: baseline name(s) {clash} are method names")

    @property
    def all_methods(self) -> tuple[str, ...]:
        """The methods and the baselines, in that order."""
        return (*self.methods, *self.baselines)


def model_name(workload: Workload) -> str:
    """Readable model name: the config file's stem before ``-<mode>``, else the group."""
    if workload.config_path:
        return Path(workload.config_path).stem.split("-")[0]
    return architecture_group(workload)


def gpu_name(workload: Workload) -> str:
    """The device name without its ``cuda:`` prefix."""
    return workload.device_name.split(":", 1)[-1]


class AnalyticalRoofline:
    """FLOPs / (device peak FP32 FLOP/s x utilisation per mode), utilisation fitted as a median.

    The FLOPs are those of the workload's layer graph (forward + backward), the peak the
    device table's for the workload's precision.
    """

    def fit(self, data: ProfileData) -> AnalyticalRoofline:
        """Median achieved share of peak per mode over the training workloads.

        Returns:
            self.
        """
        workloads = [data.workloads[i] for i in data.ids]
        ratio = self._ideal_ms(workloads) / data.labels["iteration_ms"].to_numpy()
        modes = np.array([w.mode for w in workloads])
        self.utilisation_ = {m: float(np.median(ratio[modes == m])) for m in set(modes)}
        self.default_ = float(np.median(ratio))
        return self

    @staticmethod
    def _ideal_ms(workloads: list[Workload]) -> np.ndarray:
        frame = workload_frame(workloads)
        flops = np.expm1(frame["log1p_fwd_flops"]) + np.expm1(frame["log1p_bwd_flops"])
        peak = np.array(
            [device_spec(w.device_name).peak_flops_per_s(w.precision) for w in workloads]
        )
        return flops.to_numpy() / peak * 1e3

    def predict_iteration_ms(self, workloads: list[Workload]) -> np.ndarray:
        """Predicted milliseconds, shape (len(workloads),)."""
        util = np.array([self.utilisation_.get(w.mode, self.default_) for w in workloads])
        return self._ideal_ms(workloads) / util


def _kernel_params(method: str, config: GpuEvaluationConfig) -> dict:
    """KernelGraphMethod keyword arguments of a kernel-aware method (``additive``: ScaleDL's)."""
    params = dict(config.baselines.get(method, {}))
    # The product's operator settings, updated by the config's (shared), then a baseline's.
    params["operator_params"] = {
        **DEFAULT_OPERATOR_PARAMS,
        **config.operator_params,
        **params.get("operator_params", {}),
    }
    return {"mode": "scaledl", "min_gnn_architectures": config.min_gnn_architectures, **params}


def _fit_key(method: str, config: GpuEvaluationConfig) -> str:
    """The fit a method shares: one per key.

    ``additive`` is ScaleDL's layer sum, and methods differing only in
    ``unseen_device_correction`` fit identically (the fit scores every unseen-device
    candidate; the setting is read when predicting).
    """
    if method == "analytical":
        return method
    params = _kernel_params(method, config)
    params.pop("unseen_device_correction", None)
    return json.dumps(params, sort_keys=True, default=str)


def _fit(method: str, train: ProfileData, config: GpuEvaluationConfig):
    if method == "analytical":
        return AnalyticalRoofline().fit(train)
    params = _kernel_params(method, config)
    params.pop("unseen_device_correction", None)
    # The GNN (when used) stops early on 15% of the training workloads, as in the main splits.
    return KernelGraphMethod(**params).fit(train, list(validation_ids(train.ids, 0.15, 0)))


def fit_scaledl(data: ProfileData, config: GpuEvaluationConfig | None = None) -> KernelGraphMethod:
    """ScaleDL's GPU predictor fitted on all of ``data``, as this evaluation fits it.

    Args:
        data: the single-GPU profile data.
        config: the evaluation settings (defaults when ``None``).

    Returns:
        The fitted :class:`~scaledl.models.kernel.KernelGraphMethod`.
    """
    return _fit("scaledl", data, config or GpuEvaluationConfig())


def _as_method(fitted, method: str, config: GpuEvaluationConfig):
    """The shared fit with ``method``'s prediction-time setting (a shallow copy)."""
    if not isinstance(fitted, KernelGraphMethod):
        return fitted
    default = KernelGraphMethod.unseen_device_correction  # the dataclass field's default
    unseen = _kernel_params(method, config).get("unseen_device_correction", default)
    return copy.copy(fitted).set_params(unseen_device_correction=unseen)


def _predict(method: str, fitted, workloads: list[Workload]) -> np.ndarray:
    """``additive`` is the layer sum of the ScaleDL fit (the same models, no correction)."""
    with single_threaded():
        if method == "additive":
            return fitted.layer_sum_ms(workloads)
        return fitted.predict_iteration_ms(workloads)


def _held_out_rows(protocol: str, held: str, test: ProfileData, method: str, pred: np.ndarray,
                   fitted) -> pd.DataFrame:  # fmt: skip
    specs = [test.workloads[i] for i in test.ids]
    seen = getattr(fitted, "training_devices_", None)
    return pd.DataFrame(
        {
            "protocol": protocol,
            "held_out": held,
            "workload_id": test.ids,
            "gpu": [gpu_name(w) for w in specs],
            "model": [model_name(w) for w in specs],
            "family": [family_key(w) for w in specs],
            "mode": [w.mode for w in specs],
            "seq_len": [w.seq_len for w in specs],
            "batch_size": [w.batch_size for w in specs],
            "method": method,
            "true_ms": test.labels["iteration_ms"].to_numpy(),
            "pred_ms": pred,
            "device_seen": [w.device_name in seen if seen is not None else True for w in specs],
        }
    )


def _operator_errors(fitted: KernelGraphMethod, test: ProfileData, held: str) -> pd.DataFrame:
    rows = operator_rows(test)
    frames = []
    for direction in ("forward", "backward"):
        true = rows[f"{direction}_ms"].to_numpy(dtype=float)
        mask = np.isfinite(true) & (true > 0)
        if direction == "backward":
            mask &= rows["op_kind"].to_numpy() != "fill"
        part = rows[mask]
        pred = fitted.operator_model_.predict(part, direction)
        frames.append(
            pd.DataFrame(
                {
                    "held_out": held,
                    "op_class": part["op_class"].to_numpy(),
                    "direction": direction,
                    "true_ms": true[mask],
                    "pred_ms": pred,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def leave_one_out(
    data: ProfileData,
    protocol: str,
    key,
    config: GpuEvaluationConfig,
    progress: EvaluationProgress | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Fit every method without one group (model or GPU) and predict that group.

    Args:
        data: the GPU profile data.
        protocol: ``leave_one_model_out`` or ``leave_one_gpu_out`` (a label).
        key: function of a workload giving its group.
        config: the evaluation settings.
        progress: told of every fold as it finishes.

    Returns:
        ``(predictions, operator_errors, folds)``: one row per (held-out workload, method);
        per-operator errors of the folds' operator models (LOMO only, else empty); per fold
        the ScaleDL correction used (with the inner-validation MRE of every candidate; and on
        the held-out GPUs, the unseen-device correction) and the seconds per method
        (``additive`` shares ScaleDL's fit: its layer sum).
    """
    held_out, jobs = _fold_jobs(data, protocol, key, config)
    if progress is not None:
        progress.add_units(len(held_out))
    return _collect_folds(protocol, held_out, _run_jobs(jobs, config), config, progress)


def _fold_jobs(data: ProfileData, protocol: str, key, config: GpuEvaluationConfig):
    """The held-out groups of a protocol (sorted) and one ``joblib`` job per group."""
    groups = np.array([key(data.workloads[i]) for i in data.ids])
    held_out = sorted(set(groups))
    ids = np.array(data.ids)
    jobs = [
        delayed(_shared_fits_call)(
            _fold,
            protocol,
            held,
            data.subset(ids[groups != held]),
            data.subset(ids[groups == held]),
            config,
        )  # fmt: skip
        for held in held_out
    ]
    return held_out, jobs


def _shared_fits_call(function, *args):
    """``function(*args)`` with identical operator regressor fits computed once.

    Within one job (a fold, or the fit on all data) the selection's and the correction's
    refits repeat (:func:`~scaledl.models.operators.shared_fits`); the memo is freed with the
    job, so a process never holds more than one job's regressors.
    """
    with shared_fits():
        return function(*args)


def _run_jobs(jobs: list, config: GpuEvaluationConfig):
    """The jobs' results in order; independent jobs run in parallel processes (``n_jobs``)."""
    return Parallel(n_jobs=config.n_jobs, backend="loky", return_as="generator")(jobs)


def _collect_folds(protocol: str, held_out: list[str], results, config: GpuEvaluationConfig,
                   progress: EvaluationProgress | None):  # fmt: skip
    """:func:`leave_one_out`'s result from its folds' results, ``held_out``'s order."""
    frames, op_frames, folds = [], [], {}
    for held, (rows, ops, fold) in zip(held_out, results, strict=True):
        frames.append(rows)
        if ops is not None:
            op_frames.append(ops)
        folds[held] = fold
        if progress is not None:
            progress.unit_done(f"GPU {protocol}, fold {held}, {len(config.all_methods)} methods")
    ops = pd.concat(op_frames, ignore_index=True) if op_frames else pd.DataFrame()
    return pd.concat(frames, ignore_index=True), ops, folds


def _fold(
    protocol: str, held: str, train: ProfileData, test: ProfileData, config: GpuEvaluationConfig
) -> tuple[pd.DataFrame, pd.DataFrame | None, dict]:
    """One fold of :func:`leave_one_out`: its predictions, operator errors and record."""
    workloads = [test.workloads[i] for i in test.ids]
    frames, fold = [], {}
    fitted_by_key: dict[str, object] = {}
    fitted_by_method: dict[str, object] = {}
    for method in config.all_methods:
        key_ = _fit_key(method, config)
        started = time.perf_counter()
        if key_ not in fitted_by_key:
            fitted_by_key[key_] = _fit(method, train, config)
        fitted = fitted_by_method[method] = _as_method(fitted_by_key[key_], method, config)
        pred = _predict(method, fitted, workloads)
        frames.append(_held_out_rows(protocol, held, test, method, pred, fitted))
        fold[method] = {"fit_predict_s": time.perf_counter() - started}
    kernel = fitted_by_method.get("scaledl")
    ops = None
    if kernel is not None:
        fold.update(_fold_correction(kernel))
        if protocol == "leave_one_model_out":
            ops = _operator_errors(kernel, test, held)
    return pd.concat(frames, ignore_index=True), ops, fold


def _fold_correction(kernel: KernelGraphMethod) -> dict:
    """The fold's ScaleDL correction, its candidates' inner MREs, the unseen-device one."""
    if kernel.uses_gnn_:
        return {"correction": "gnn", "correction_inner_mre": {}}
    return {
        "correction": kernel.correction_kind_,
        "correction_inner_mre": kernel.correction_scores_,
        "unseen_device_correction": kernel.unseen_correction_kind_,
    }


def _per_gpu(pred: pd.DataFrame) -> dict:
    pred = pred.assign(re=np.abs(pred["pred_ms"] - pred["true_ms"]) / pred["true_ms"])
    per_gpu = {
        gpu: {m: {"mre": float(x["re"].mean()), "n": int(len(x))} for m, x in g.groupby("method")}
        for gpu, g in pred.groupby("gpu", sort=True)
    }
    methods = sorted(pred["method"].unique())
    return {
        "per_gpu": per_gpu,
        "mean_over_gpus": {
            m: float(np.mean([v[m]["mre"] for v in per_gpu.values()])) for m in methods
        },
        "max_over_gpus": {
            m: float(np.max([v[m]["mre"] for v in per_gpu.values()])) for m in methods
        },
        "per_model": {
            model: {m: float(x["re"].mean()) for m, x in g.groupby("method")}
            for model, g in pred.groupby("model", sort=True)
        },
        "per_mode": {
            mode: {m: float(x["re"].mean()) for m, x in g.groupby("method")}
            for mode, g in pred.groupby("mode", sort=True)
        },
    }


def operator_metrics(errors: pd.DataFrame) -> dict:
    """Operator-level errors of the LOMO folds' operator models.

    Returns:
        ``{"per_class": {class: {direction: {"mre", "time_weighted", "n"}}}, "overall": {"mre",
        "time_weighted", "n"}, "per_held_out_model": {model: {"mre", "time_weighted"}}}``.
    """

    def summary(frame: pd.DataFrame) -> dict:
        err = np.abs(frame["pred_ms"] - frame["true_ms"])
        return {
            "mre": float((err / frame["true_ms"]).mean()),
            "time_weighted": float(err.sum() / frame["true_ms"].sum()),
            "n": int(len(frame)),
        }

    return {
        "per_class": {
            cls: {d: summary(x) for d, x in g.groupby("direction")}
            for cls, g in errors.groupby("op_class", sort=True)
        },
        "overall": summary(errors),
        "per_held_out_model": {m: summary(g) for m, g in errors.groupby("held_out", sort=True)},
    }


def evaluate_gpu(
    validated_dir: Path,
    config: GpuEvaluationConfig | None = None,
    progress: EvaluationProgress | None = None,
    cache_dir: Path | None = None,
) -> tuple[dict, pd.DataFrame]:
    """Run every GPU protocol on a directory of validated imported profile tables.

    The result is deterministic: with ``cache_dir`` it is computed once per content of the
    inputs (tables, 4-GPU labels, Vidur and NeuSight folders), settings and code version, and
    read back after that (:mod:`scaledl.evaluation.gpu_cache`; the ``cache`` entry of the
    metrics says which, ``runtime_s`` is this call's wall time).

    Args:
        validated_dir: validated tables of an import (with ``operator_timings``).
        config: settings (defaults when ``None``).
        progress: told of every fold (and the 4-GPU rows, or the cache hit) as it finishes.
        cache_dir: the cache folder (``None``: always computed, nothing stored).

    Returns:
        ``(metrics, predictions)``: the ``gpu`` block of ``metrics.json`` (see
        :func:`gpu_targets` for the targets) and one row per (protocol, workload, method).

    Raises:
        scaledl.models.data.ProfileDataError: unreadable tables or no usable workload.
        ValueError: no ``operator_timings`` (the kernel-aware models need them).
    """
    config = config or GpuEvaluationConfig()
    started = time.perf_counter()
    if cache_dir is None:
        metrics, predictions = _evaluate_gpu(Path(validated_dir), config, progress)
    else:
        devices = Path(config.neusight_root or neusight_root()) / "device_configs"
        inputs = [validated_dir, config.parallel_labels, config.vidur_root, config.peer_root,
                  devices, *_config_files(Path(validated_dir))]  # fmt: skip
        key = cache_key(inputs, config)
        (metrics, predictions), hit = ResultCache(Path(cache_dir)).get_or_compute(
            key, lambda: _evaluate_gpu(Path(validated_dir), config, progress)
        )
        metrics = {**metrics, "cache": {"key": key, "hit": hit, "computed_s": metrics["runtime_s"]}}
        if hit and progress is not None:
            progress.add_units(1)
            progress.unit_done(f"GPU evaluation read from the cache {cache_dir} (key {key[:12]})")
    metrics["runtime_s"] = time.perf_counter() - started
    return metrics, predictions


def _config_files(validated_dir: Path) -> list[Path]:
    """The model config files the workloads name (inputs beside the tables), sorted."""
    workloads = validated_dir / "workloads.parquet"
    if not workloads.is_file():  # the evaluation names the missing table
        return []
    paths = pd.read_parquet(workloads, columns=["config_path"])["config_path"].dropna()
    return sorted({Path(p) for p in paths if p})


def _evaluate_gpu(
    validated_dir: Path, config: GpuEvaluationConfig, progress: EvaluationProgress | None
) -> tuple[dict, pd.DataFrame]:
    """:func:`evaluate_gpu` computed (``runtime_s``: its wall time)."""
    started = time.perf_counter()
    data = load_profile_data(validated_dir)
    metrics: dict = {
        "source": "NeuSight (sitar-lab/NeuSight, ASPLOS 2025, MIT licence), imported as profiles",
        "n_workloads": len(data.ids),
        "gpus": sorted({gpu_name(w) for w in data.workloads.values()}),
        "models": sorted({model_name(w) for w in data.workloads.values()}),
        "methods": list(config.all_methods),
        "notes": [],
    }
    protocols = [("leave_one_model_out", model_name)]
    if config.leave_one_gpu_out:
        protocols.append(("leave_one_gpu_out", gpu_name))
    plans = [(protocol, *_fold_jobs(data, protocol, key, config)) for protocol, key in protocols]
    layout_inputs = (config.parallel_labels, config.vidur_root, config.peer_root)
    with_layouts = all(x is not None for x in layout_inputs)
    # One pool for every fold and the 4-GPU rows' fit on all data (the longest job, first), so
    # no process idles between the protocols or while that fit runs.
    full_fit = [delayed(_shared_fits_call)(_fit, "scaledl", data, config)] if with_layouts else []
    if progress is not None:
        progress.add_units(sum(len(held_out) for _, held_out, _ in plans))
    results = _run_jobs([*full_fit, *(job for _, _, jobs in plans for job in jobs)], config)
    fitted_all = next(results) if with_layouts else None
    frames, ops = [], pd.DataFrame()
    for protocol, held_out, jobs in plans:
        fold_results = itertools.islice(results, len(jobs))
        rows, protocol_ops, folds = _collect_folds(
            protocol, held_out, fold_results, config, progress
        )
        frames.append(rows)
        metrics[protocol] = {"folds": folds}
        ops = protocol_ops if len(protocol_ops) else ops
    predictions = pd.concat(frames, ignore_index=True)
    if config.peer_root is not None:
        predictions = _add_peer(metrics, predictions, config)
    for protocol, rows in predictions.groupby("protocol", sort=False):
        metrics[str(protocol)] = {**_per_gpu(rows), **metrics[str(protocol)]}
    metrics["operators"] = operator_metrics(ops) if len(ops) else {}
    metrics["notes"] += _correction_notes(metrics, config)
    if with_layouts:
        labels = pd.read_parquet(config.parallel_labels)
        peer = load_peer_layout_predictions(config.peer_root, config.neusight_root)
        if progress is not None:
            progress.add_units(1)
        metrics["parallel_layouts"] = evaluate_layout_rows(
            fitted_all, labels, load_vidur_allreduce(config.vidur_root), peer
        )
        if progress is not None:
            progress.unit_done(f"GPU 4-GPU layouts, {len(labels)} rows")
    else:
        metrics["notes"].append(
            "4-GPU labels not evaluated (parallel_labels, vidur_root and peer_root needed)"
        )
    metrics["not_modelled"] = {
        "parallelism": "ZeRO / FSDP sharding and several nodes on GPUs (NeuSight's 4-GPU rows "
        "are dp4, tp4 and pp4_1 on one node: composed in parallel_layouts)",
        "optimizer_step": "the single-GPU NeuSight labels exclude it; so do their predictions "
        "(the 4-GPU Megatron-LM labels include it, and parallel_layouts adds it)",
    }
    judged = gpu_targets(metrics) + peer_targets(metrics.get("peer", {}))
    metrics["targets"] = [t.to_dict() for t in judged]
    metrics["targets"] += metrics.get("parallel_layouts", {}).get("targets", [])
    metrics["runtime_s"] = time.perf_counter() - started
    return metrics, predictions


def _add_peer(metrics: dict, predictions: pd.DataFrame, config: GpuEvaluationConfig):
    """Add the peer's rows to ``predictions`` and its paired comparisons to ``metrics``."""
    peer = load_peer_predictions(config.peer_root, config.neusight_root)
    rows, unmatched = peer_rows(predictions, peer)
    predictions = pd.concat([predictions, rows], ignore_index=True)
    metrics["peer"] = {
        "source": PEER_SOURCE,
        "method": PEER_METHOD,
        "paired_rows": {p: int(n) for p, n in rows.groupby("protocol").size().items()},
        "unmatched": unmatched,
        "comparisons": peer_comparison(predictions),
    }
    return predictions


def _correction_notes(metrics: dict, config: GpuEvaluationConfig) -> list[str]:
    """The note saying which fallback correction the folds used, when not the GNN."""
    corrections = {
        f["correction"]
        for key in ("leave_one_model_out", "leave_one_gpu_out")
        for f in metrics.get(key, {}).get("folds", {}).values()
        if "correction" in f
    }
    if not corrections - {"gnn"}:
        return []
    unseen = sorted(
        {
            f["unseen_device_correction"]
            for f in metrics.get("leave_one_gpu_out", {}).get("folds", {}).values()
            if "unseen_device_correction" in f
        }
    )
    return [
        f"ScaleDL's GNN correction needs at least {config.min_gnn_architectures} training "
        "architectures; the folds have fewer (the data has four models), so the documented "
        "fallback is used: a log-space correction chosen per fold by inner "
        f"leave-one-architecture-out validation (chosen: {sorted(corrections - {'gnn'})}); on "
        f"a held-out GPU: {unseen or ['n/a']} (unseen_device_correction: the training GPUs' "
        "correction, none, or 'auto': whichever has the lower inner leave-one-GPU-out error)"
    ]
