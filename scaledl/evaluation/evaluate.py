"""Orchestration of the evaluation: splits, fits, metrics, learning curves, external data, report.

:func:`evaluate` reads a directory of validated profile tables, fits every method and ablation of
the config on every split (the same training, validation and test ids for all methods; the GNN
methods once per model seed; :mod:`scaledl.evaluation.split_fits` shares the layer-wise stage
and runs independent fits in parallel), scores iteration and epoch time
(:mod:`scaledl.evaluation.metrics`; a seeded method's errors are the mean over its seeds),
compares the methods paired (:mod:`scaledl.evaluation.comparisons`), runs the learning curves
(:mod:`scaledl.evaluation.learning_curve`) and the external evaluations on real GPU data
(:mod:`scaledl.evaluation.gpu`: imported NeuSight GPU profiles through the product's models;
:mod:`scaledl.evaluation.external`: Vidur all-reduce), scores the calibrated prediction
intervals on the splits' out-of-sample predictions (:mod:`scaledl.evaluation.coverage`, no
extra fit), then writes ``metrics.json``, ``predictions.parquet`` (with interval bounds),
``calibration.json`` (the ScaleDL interval calibration a predictor bundle stores),
``figures/*.png`` and ``report.html`` under the output folder (each file written to a
temporary name first and renamed into place).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd

from scaledl.evaluation import figures as figs
from scaledl.evaluation.comparisons import compare_split
from scaledl.evaluation.coverage import evaluate_intervals
from scaledl.evaluation.external import evaluate_vidur
from scaledl.evaluation.gpu import GpuEvaluationConfig, evaluate_gpu
from scaledl.evaluation.gpu_calibration import GPU_CALIBRATION_FILE, write_gpu_calibration
from scaledl.evaluation.learning_curve import SAMPLERS, learning_curves
from scaledl.evaluation.metrics import mean_metrics, mean_over_seeds, prediction_metrics
from scaledl.evaluation.report import write_report
from scaledl.evaluation.reproducibility import label_reproducibility, repeat_relative_errors
from scaledl.evaluation.results import SCHEMA_VERSION, Metrics, RuntimeSeconds
from scaledl.evaluation.split_fits import fit_predict_many, run_splits
from scaledl.evaluation.splits import (
    SplitError,
    extrapolation_split,
    leave_one_family_out,
    random_split,
    validation_ids,
)
from scaledl.io.atomic import atomic_file
from scaledl.layout import neusight_peer_root, vidur_network_root
from scaledl.models.data import ProfileData, load_profile_data
from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.methods import ABLATION_NAMES, ABLATION_TEXT, METHOD_NAMES, make_method
from scaledl.registry.bundle import tables_sha256
from scaledl.workloads.spec import Workload


def _cheap_learning_curve_params() -> dict[str, dict]:
    return {
        "scaledl": {"folds": 2, "gnn_config": GNNTrainConfig(max_epochs=60, patience=10)},
        "graph_only": {"gnn_config": GNNTrainConfig(max_epochs=60, patience=10)},
    }


@dataclass
class EvaluationConfig:
    """Settings of :func:`evaluate`.

    Attributes:
        seed: seed of the splits, validation subsets and learning-curve seeds' offset.
        test_fraction: share of each family held out in the ID split.
        val_fraction: share of every training set passed as ``val_ids``.
        methods: methods of :data:`~scaledl.models.methods.METHOD_NAMES` to evaluate.
        ablations: ScaleDL's ablations (:data:`~scaledl.models.methods.ABLATION_NAMES`)
            evaluated beside them (same splits and seeds).
        seeds: model seeds of the GNN methods on every split (0 .. seeds - 1); the errors of a
            seeded method are the mean over its seeds and the comparisons pool them.
        n_jobs: parallel processes of the fits (``joblib``: -1 every core, 1 in-process).
        learning_curve_sizes: training-set sizes of the learning curves (``None``: automatic,
            :func:`~scaledl.evaluation.learning_curve.auto_sizes`).
        learning_curve_seeds: seeds per (sampler, size), paired across samplers; 0 skips the
            learning curves.
        learning_curve_methods: methods fitted for the learning curves.
        learning_curve_samplers: samplers compared.
        learning_curve_order: model order of the learning curves' D-optimal sampler
            (:data:`~scaledl.design.features.ORDERS`).
        include_external: evaluate on real GPU data: the imported GPU profiles
            (``gpu_profiles``, :mod:`scaledl.evaluation.gpu`) and Vidur's all-reduce times.
        gpu_profiles: validated imported GPU profile tables (``scaledl import neusight`` then
            ``scaledl validate``; the ``imported_profiles`` asset); ``None`` skips the GPU
            evaluation with a note.
        gpu_parallel_labels: the import's ``parallel_labels.parquet`` (multi-GPU labels).
        vidur_root: Vidur ``network`` folder.
        figures: draw the PNG figures (and embed them in the report).
        extrapolation_quantile: tokens-per-step quantile from which workloads are tested in
            the extrapolation split.
        method_params: keyword arguments of :func:`~scaledl.models.methods.make_method` per
            method for the main splits (default: the methods' defaults).
        learning_curve_method_params: the same for the learning-curve fits (default: cheaper
            GNN training, 2 out-of-fold folds, to bound the number of expensive fits).
        sweep_family: family of the epoch-time-vs-batch/sequence figure.
        interval_coverage: nominal coverage of the calibrated prediction intervals evaluated
            (:mod:`scaledl.evaluation.coverage`).
    """

    seed: int = 0
    test_fraction: float = 0.2
    val_fraction: float = 0.15
    methods: tuple[str, ...] = METHOD_NAMES
    ablations: tuple[str, ...] = ABLATION_NAMES
    seeds: int = 5
    n_jobs: int = -1
    learning_curve_sizes: tuple[int, ...] | None = None
    learning_curve_seeds: int = 10
    learning_curve_methods: tuple[str, ...] = ("scaledl",)
    learning_curve_samplers: tuple[str, ...] = SAMPLERS
    learning_curve_order: str = "main"
    include_external: bool = True
    gpu_profiles: Path | None = None
    gpu_parallel_labels: Path | None = None
    vidur_root: Path = field(default_factory=vidur_network_root)
    figures: bool = True
    extrapolation_quantile: float = 0.8
    method_params: dict[str, dict] = field(default_factory=dict)
    learning_curve_method_params: dict[str, dict] = field(
        default_factory=_cheap_learning_curve_params
    )
    sweep_family: str = "bert"
    interval_coverage: float = 0.9

    def __post_init__(self) -> None:
        unknown = [
            m for m in (*self.methods, *self.learning_curve_methods) if m not in METHOD_NAMES
        ]
        if unknown:
            raise ValueError(f"EvaluationConfig: unknown method(s) {unknown}; see {METHOD_NAMES}")
        if not self.methods:
            raise ValueError("EvaluationConfig: field 'methods' is empty")
        bad = [a for a in self.ablations if a not in ABLATION_NAMES]
        if bad:
            raise ValueError(f"EvaluationConfig: unknown ablation(s) {bad}; see {ABLATION_NAMES}")
        if self.seeds < 1:
            raise ValueError(f"EvaluationConfig: field 'seeds' must be >= 1, got {self.seeds}")
        bad = [s for s in self.learning_curve_samplers if s not in SAMPLERS]
        if bad:
            raise ValueError(f"EvaluationConfig: unknown sampler(s) {bad}; see {SAMPLERS}")

    @classmethod
    def from_preset(cls, section: dict | None) -> EvaluationConfig:
        """Config from a preset's ``evaluation:`` mapping (lists become tuples).

        Keys are this class's fields; ``gnn_<field>`` (a field of
        :class:`~scaledl.models.gnn_training.GNNTrainConfig`, e.g. ``gnn_max_epochs``) and
        ``folds`` set the training of the GNN methods (ScaleDL, its ablations, graph-only) on
        the main splits.

        Raises:
            ValueError: an unknown key (named).
        """
        section = dict(section or {})
        gnn_fields = {f.name for f in fields(GNNTrainConfig)} - {"seed"}
        gnn = {
            k[4:]: section.pop(k)
            for k in list(section)
            if k.startswith("gnn_") and k[4:] in gnn_fields
        }
        folds = section.pop("folds", None)
        unknown = sorted(set(section) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"preset evaluation: unknown field(s) {unknown}")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in section.items()}
        if gnn or folds:
            params = {"gnn_config": GNNTrainConfig(**gnn)} if gnn else {}
            layerwise = {**params, **({"folds": folds} if folds else {})}
            values["method_params"] = {
                **{m: dict(layerwise) for m in ("scaledl", *ABLATION_NAMES)},
                "graph_only": params,
            }
        return cls(**values)

    def to_dict(self) -> dict:
        """JSON-serialisable view (GNN configs as dicts, paths as strings)."""
        return json.loads(json.dumps(asdict(self), default=str))


class _Runner:
    """Fits methods (the sweep) and records fit counts and seconds per method."""

    def __init__(self, data: ProfileData, params: dict[str, dict]) -> None:
        self.data = data
        self.params = params
        self.fits: dict[str, int] = {}
        self.seconds: dict[str, float] = {}

    def record(self, method: str, fit_seconds: float, fits: int = 1) -> None:
        """Count ``fits`` fits of ``method`` taking ``fit_seconds`` in all."""
        self.fits[method] = self.fits.get(method, 0) + fits
        self.seconds[method] = self.seconds.get(method, 0.0) + fit_seconds

    def fit(self, method: str, train: ProfileData, val_ids, params: dict | None = None):
        kwargs = self.params.get(method, {}) if params is None else params
        model = make_method(method, **kwargs).fit(train, list(val_ids))
        self.record(method, model.fit_seconds_)
        return model


def _split_params(config: EvaluationConfig) -> dict[str, dict]:
    """Method parameters of the main splits: an ablation takes ScaleDL's unless it has its own."""
    params = dict(config.method_params)
    for ablation in config.ablations:
        params.setdefault(ablation, dict(params.get("scaledl", {})))
    return params


def _significance(
    predictions: pd.DataFrame, run_labels: pd.DataFrame, ood_splits, config: EvaluationConfig
) -> dict:
    """Paired comparisons per split (:mod:`scaledl.evaluation.comparisons`).

    Keys: ``id``, ``ood`` (the folds' test workloads pooled, each weighted by one over its
    family's count: the mean over families), ``ood/<family>`` and ``extrapolation``.
    """
    by_split = dict(tuple(predictions.groupby("split", sort=False)))
    out = {"id": compare_split(by_split["id"], run_labels, seed=config.seed)}
    if ood_splits:
        pooled = pd.concat([by_split[s.name] for s in ood_splits], ignore_index=True)
        first = pooled.drop_duplicates("workload_id").set_index("workload_id")["family"]
        weights = 1.0 / first.map(first.value_counts())
        out["ood"] = compare_split(pooled, run_labels, weights=weights, seed=config.seed)
        for split in ood_splits:
            out[split.name] = compare_split(by_split[split.name], run_labels, seed=config.seed)
    if "extrapolation" in by_split:
        out["extrapolation"] = compare_split(
            by_split["extrapolation"], run_labels, seed=config.seed
        )
    return {
        "seeds": config.seeds,
        "confidence_level": 0.95,
        "splits": out,
    }


def _diagnosis(rows: pd.DataFrame) -> dict:
    """Why the GNN does (not) beat its prior: its fits' record per split group and method.

    Groups: ``id``, ``ood`` (every leave-one-family-out fold), ``extrapolation``. Per GNN
    method on a prior: mean over seeds (and folds) of the training and early-stopping RMSE of
    log milliseconds, the prior's test MRE, the mean absolute log correction the GNN applies
    on the test set, the epochs trained and the best epoch.
    """
    if rows.empty:
        return {"skipped": "no GNN on a prior was evaluated"}
    rows = rows.assign(group=rows["split"].str.split("/").str[0])
    columns = ["train_rmse_log", "val_rmse_log", "prior_test_mre", "correction_abs", "epochs",
               "best_epoch"]  # fmt: skip
    table = rows.groupby(["group", "method"], sort=False)[columns].mean()
    out: dict = {}
    for (group, method), values in table.iterrows():
        out.setdefault(group, {})[method] = {c: float(values[c]) for c in columns}
    return {"splits": out}


def sweep_workloads(base: Workload, field_name: str, values) -> list[Workload]:
    """Copies of a workload with one field varied.

    Args:
        base: the representative workload.
        field_name: ``"batch_size"`` or ``"seq_len"``.
        values: the values of that field.

    Returns:
        One validated workload per value.
    """
    record = {k: v for k, v in base.to_record().items() if k != "workload_id"}
    return [
        Workload.parse({**record, field_name: int(v)}, source=f"sweep {field_name}={v}")
        for v in values
    ]


def _sweep(runner: _Runner, data: ProfileData, methods, family: str, seed: int, val_fraction):
    labels = data.labels[data.labels["family"] == family]
    if labels.empty:
        return None, f"no {family!r} workloads: sweep figure skipped"
    # Representative: the most common (world size, architecture) group, median-size workload.
    table = pd.DataFrame([data.workloads[i].to_record() for i in labels["workload_id"]])
    arch = ["hidden_size", "num_layers", "world_size", "mode"]
    key = table.groupby(arch, dropna=False).size().idxmax()
    group = table[(table[arch] == pd.Series(key, index=arch)).all(axis=1)]
    tokens = group["batch_size"] * group["seq_len"]
    base = data.workloads[
        group.iloc[int(np.argsort(tokens.to_numpy())[len(group) // 2])]["workload_id"]
    ]
    all_ids = data.ids
    models = {m: runner.fit(m, data, validation_ids(all_ids, val_fraction, seed)) for m in methods}
    out = {"family": family, "base_workload": base.workload_id, "sweeps": {}}
    for field_name, other in (("batch_size", "seq_len"), ("seq_len", "batch_size")):
        measured = group[group[other] == getattr(base, other)]
        lo, hi = int(table[field_name].min()), int(table[field_name].max())
        grid = sorted({int(v) for v in 2 ** np.arange(np.floor(np.log2(lo)), np.log2(2 * hi) + 1)})
        ws = sweep_workloads(base, field_name, grid)
        lab = data.labels.set_index("workload_id")
        out["sweeps"][field_name] = {
            "values": grid,
            "pred_epoch_s": {m: models[m].predict(ws)["epoch_s"].tolist() for m in methods},
            "measured_values": measured[field_name].astype(int).tolist(),
            "measured_epoch_s": lab.loc[measured["workload_id"], "epoch_s"].tolist(),
        }
    return out, None


def _atomic_write(path: Path, write) -> None:
    """Write ``path`` with ``write(tmp)`` atomically and durably (:mod:`scaledl.io.atomic`)."""
    with atomic_file(path) as tmp:
        write(tmp)


def evaluate(validated_dir: Path, out_dir: Path, config: EvaluationConfig | None = None) -> Metrics:
    """Evaluate ScaleDL and the baselines on a directory of validated profile tables.

    Args:
        validated_dir: directory of the six profile tables (see
            :func:`scaledl.models.data.load_profile_data`).
        out_dir: output folder (created); receives ``metrics.json``, ``predictions.parquet``,
            ``gpu_predictions.parquet`` (with GPU profiles), ``figures/`` and
            ``report.html``.
        config: settings; ``None`` gives the defaults.

    Returns:
        The :class:`~scaledl.evaluation.results.Metrics` written to ``metrics.json`` (schema in
        :mod:`scaledl.evaluation.results`); its ``label_reproducibility`` is the noise floor:
        the MRE between independent launches of the same workloads, overall and per world size
        (:mod:`scaledl.evaluation.reproducibility`); ``external`` holds Vidur's all-reduce
        results and ``gpu`` the imported GPU profiles'
        (:func:`scaledl.evaluation.gpu.evaluate_gpu`).

    Raises:
        scaledl.models.data.ProfileDataError: a table is missing or unreadable (names the file).
        FileNotFoundError: external data requested but missing.
        scaledl.evaluation.results.MetricsError: a result does not match the metrics schema.
        Exception: any method fit failing is raised, never turned into a metric.
    """
    started = time.perf_counter()
    config = config or EvaluationConfig()
    out_dir = Path(out_dir)
    data = load_profile_data(Path(validated_dir))
    load_s = time.perf_counter() - started
    notes: list[str] = []
    runner = _Runner(data, config.method_params)
    methods = list(config.methods)
    evaluated = [*methods, *(a for a in config.ablations if a not in methods)]
    labels = data.labels
    seed, vf = config.seed, config.val_fraction

    id_split = random_split(labels, config.test_fraction, vf, seed)
    all_splits = [id_split]
    ood_splits = leave_one_family_out(labels, vf, seed)
    if not ood_splits:
        notes.append("OOD skipped: fewer than two families")
    all_splits += ood_splits
    try:
        ext_split = extrapolation_split(labels, config.extrapolation_quantile, vf, seed)
    except SplitError as exc:
        notes.append(f"extrapolation skipped: {exc}")
        ext_split, ext_skipped = None, str(exc)
    else:
        all_splits.append(ext_split)
    fits = run_splits(
        data, all_splits, evaluated, config.seeds, _split_params(config), config.n_jobs
    )
    predictions = fits.predictions
    by_split = dict(tuple(predictions.groupby("split", sort=False)))
    splits: dict = {"id": {"methods": _per_method(by_split["id"])}}
    if ood_splits:
        per_family = {s.name.split("/", 1)[1]: _per_method(by_split[s.name]) for s in ood_splits}
        mean = {m: mean_metrics([per_family[f][m] for f in per_family]) for m in evaluated}
        splits["ood"] = {"per_family": per_family, "mean": mean}
    else:
        splits["ood"] = {"skipped": "fewer than two families"}
    if ext_split is None:
        splits["extrapolation"] = {"skipped": ext_skipped}
    else:
        splits["extrapolation"] = {
            "methods": _per_method(by_split["extrapolation"]),
            "test_min_tokens_per_step": float(
                labels.set_index("workload_id")
                .loc[list(ext_split.test_ids)]
                .eval("batch_size * seq_len")
                .min()
            ),
        }
    main_s = time.perf_counter() - started - load_s

    t0 = time.perf_counter()
    # The intervals calibrate the registered predictor, one model of the first seed: they are
    # scored on that seed's out-of-sample predictions (the other seeds' rows get no bounds).
    first_seed = predictions[predictions["seed"] == 0]
    intervals, bounded, calibration = evaluate_intervals(
        first_seed,
        config.interval_coverage,
        tables_sha256(Path(validated_dir)),
        str(out_dir / "predictions.parquet"),
    )
    keys = ["split", "method", "seed", "workload_id"]
    bounds = [c for c in bounded.columns if c not in predictions.columns]
    predictions = predictions.merge(bounded[keys + bounds], on=keys, how="left")
    intervals_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    significance = _significance(predictions, data.run_labels, ood_splits, config)
    diagnosis = _diagnosis(fits.diagnosis)
    significance_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    sweep, note = _sweep(runner, data, methods, config.sweep_family, seed, vf)
    if note:
        notes.append(note)
    sweep_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    lc: dict = {}
    if config.learning_curve_seeds > 0 and config.learning_curve_methods:
        for method in config.learning_curve_methods:
            params = config.learning_curve_method_params.get(method, {})

            def fit_many(tasks, method=method, params=params):
                results = fit_predict_many(
                    data, method, params, tasks, id_split.test_ids, config.n_jobs
                )
                for r in results:
                    runner.record(method, r["fit_s"])
                return results

            lc[method] = learning_curves(
                data,
                id_split.test_ids,
                fit_many,
                config.learning_curve_sizes,
                config.learning_curve_seeds,
                config.learning_curve_samplers,
                vf,
                config.learning_curve_order,
            )
    else:
        notes.append("learning curves skipped (no seeds or no method)")
    lc_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    external: dict = {"skipped": "include_external is false"}
    gpu: dict = {"skipped": "include_external is false"}
    gpu_pred = None
    if config.include_external:
        external = {"vidur": evaluate_vidur(config.vidur_root)}
        if config.gpu_profiles is not None:
            gpu_config = GpuEvaluationConfig(
                parallel_labels=config.gpu_parallel_labels, vidur_root=config.vidur_root,
                peer_root=neusight_peer_root(),
            )  # fmt: skip
            gpu, gpu_pred = evaluate_gpu(Path(config.gpu_profiles), gpu_config)
            # A protocol the GPU evaluation did not run is written as null, never left out.
            gpu = {"leave_one_gpu_out": None, "data_parallel": None, **gpu}
        else:
            reason = "no imported GPU profiles (gpu_profiles)"
            notes.append(f"GPU evaluation skipped: {reason}")
            gpu = {"skipped": reason}
    external_s = time.perf_counter() - t0

    reproducibility = label_reproducibility(
        data.run_labels, {w: data.workloads[w].world_size for w in data.workloads}
    )
    if not reproducibility["n_workloads"]:
        reproducibility = {"skipped": "no workload was launched twice"}
    elif "iteration_ms_raw" in data.run_labels:
        raw = repeat_relative_errors(data.run_labels, "iteration_ms_raw", "repeat")
        correction = data.label_correction or {}
        reproducibility.update(
            raw_mre=float(raw.mean()),
            corrected_launches=int(correction.get("corrected", 0)),
            slowdown_models=correction.get("models", {}),
        )
    body = {
        "schema_version": SCHEMA_VERSION,
        "n_workloads": len(labels),
        "families": sorted(labels["family"].unique().tolist()),
        "label_reproducibility": reproducibility,
        "splits": splits,
        "learning_curves": (
            {"methods": lc} if lc else {"skipped": "no learning-curve seeds or methods"}
        ),
        "external": external,
        "gpu": gpu,
        "sweep": sweep if sweep is not None else {"skipped": note},
        "intervals": intervals,
        "split_sizes": {
            "id": {
                "train": len(id_split.train_ids),
                "val": len(id_split.val_ids),
                "test": len(id_split.test_ids),
            },
        },
        "fit_counts": {
            m: fits.fit_counts.get(m, 0) + runner.fits.get(m, 0)
            for m in dict.fromkeys([*fits.fit_counts, *runner.fits])
        },
        "significance": significance,
        "ablations": {a: ABLATION_TEXT[a] for a in evaluated if a in ABLATION_TEXT},
        "gnn_diagnosis": diagnosis,
        "notes": notes,
        "config": config.to_dict(),
    }
    elapsed = {
        "load": load_s,
        "splits": main_s,
        "sweep": sweep_s,
        "layerwise_stages": fits.stage_seconds,
        "significance": significance_s,
        "learning_curve": lc_s,
        "external": external_s,
        "intervals": intervals_s,
        "fit_seconds": {
            m: fits.fit_seconds.get(m, 0.0) + runner.seconds.get(m, 0.0)
            for m in dict.fromkeys([*fits.fit_seconds, *runner.seconds])
        },
    }
    # Validated before anything is written: a result that does not match the schema is an error
    # here, not in a later reader. The figures are drawn from it; their time completes runtime_s.
    metrics = Metrics.from_dict(
        {
            **body,
            "runtime_s": {**elapsed, "figures": 0.0, "total": time.perf_counter() - started},
        },
        source=str(out_dir / "metrics.json"),
    )

    out_dir.mkdir(parents=True, exist_ok=True)
    _atomic_write(out_dir / "predictions.parquet", lambda p: predictions.to_parquet(p, index=False))
    if calibration is not None:
        calibration.write(out_dir / "calibration.json")
    else:  # never leave an older run's calibration for the registration to pick up
        (out_dir / "calibration.json").unlink(missing_ok=True)
    if gpu_pred is not None:
        _atomic_write(
            out_dir / "gpu_predictions.parquet", lambda p: gpu_pred.to_parquet(p, index=False)
        )
        write_gpu_calibration(gpu_pred, config.gpu_profiles, out_dir / GPU_CALIBRATION_FILE)
    else:  # as for calibration.json: no stale GPU calibration for the registration
        (out_dir / GPU_CALIBRATION_FILE).unlink(missing_ok=True)
    t0 = time.perf_counter()
    figure_paths = (
        figs.draw_all(metrics, predictions, out_dir / "figures") if config.figures else {}
    )
    runtime = RuntimeSeconds(
        **elapsed, figures=time.perf_counter() - t0, total=time.perf_counter() - started
    )
    metrics = Metrics.from_dict(
        {**body, "runtime_s": runtime.model_dump()}, source=str(out_dir / "metrics.json")
    )
    metrics.write(out_dir / "metrics.json")
    _atomic_write(out_dir / "report.html", lambda p: write_report(metrics, figure_paths, p))
    return metrics


def _per_method(frame: pd.DataFrame) -> dict:
    """Errors per method, each the mean over the method's model seeds."""
    return {
        m: mean_over_seeds([prediction_metrics(s) for _, s in g.groupby("seed")])
        for m, g in frame.groupby("method", sort=False)
    }
