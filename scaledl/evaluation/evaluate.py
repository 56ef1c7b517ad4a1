"""Orchestration of the evaluation: splits, fits, metrics, learning curves, external data, report.

:func:`evaluate` reads a directory of validated profile tables, fits every method of the config on
every split (the same training, validation and test ids for all methods), scores iteration and
epoch time (:mod:`scaledl.evaluation.metrics`), runs the learning curves
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
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd

from scaledl.evaluation import figures as figs
from scaledl.evaluation.coverage import evaluate_intervals
from scaledl.evaluation.external import evaluate_vidur
from scaledl.evaluation.gpu import GpuEvaluationConfig, evaluate_gpu
from scaledl.evaluation.learning_curve import SAMPLERS, learning_curves
from scaledl.evaluation.metrics import mean_metrics, prediction_metrics
from scaledl.evaluation.report import write_report
from scaledl.evaluation.reproducibility import label_reproducibility
from scaledl.evaluation.results import SCHEMA_VERSION, Metrics, RuntimeSeconds
from scaledl.evaluation.splits import (
    Split,
    SplitError,
    extrapolation_split,
    leave_one_family_out,
    random_split,
    validation_ids,
)
from scaledl.models.data import ProfileData, load_profile_data
from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.methods import METHOD_NAMES, make_method
from scaledl.registry.bundle import tables_sha256
from scaledl.workloads.spec import Workload

#: The real GPU measurements shipped with the repository (``external/``).
EXTERNAL_ROOT = Path(__file__).resolve().parents[2] / "external"


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
        learning_curve_sizes: training-set sizes of the learning curves (``None``: automatic,
            :func:`~scaledl.evaluation.learning_curve.auto_sizes`).
        learning_curve_seeds: seeds per (sampler, size); 0 skips the learning curves.
        learning_curve_methods: methods fitted for the learning curves.
        learning_curve_samplers: samplers compared.
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
    learning_curve_sizes: tuple[int, ...] | None = None
    learning_curve_seeds: int = 5
    learning_curve_methods: tuple[str, ...] = ("scaledl",)
    learning_curve_samplers: tuple[str, ...] = SAMPLERS
    include_external: bool = True
    gpu_profiles: Path | None = None
    gpu_parallel_labels: Path | None = None
    vidur_root: Path = EXTERNAL_ROOT / "vidur" / "network"
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
        bad = [s for s in self.learning_curve_samplers if s not in SAMPLERS]
        if bad:
            raise ValueError(f"EvaluationConfig: unknown sampler(s) {bad}; see {SAMPLERS}")

    @classmethod
    def from_preset(cls, section: dict | None) -> EvaluationConfig:
        """Config from a preset's ``evaluation:`` mapping (lists become tuples).

        Keys are this class's fields; ``gnn_max_epochs``/``gnn_patience``/``folds`` set the
        ScaleDL and graph-only training of the main splits.

        Raises:
            ValueError: an unknown key (named).
        """
        section = dict(section or {})
        gnn = {
            k: section.pop(f"gnn_{k}") for k in ("max_epochs", "patience") if f"gnn_{k}" in section
        }
        folds = section.pop("folds", None)
        unknown = sorted(set(section) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"preset evaluation: unknown field(s) {unknown}")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in section.items()}
        if gnn or folds:
            params = {"gnn_config": GNNTrainConfig(**gnn)} if gnn else {}
            values["method_params"] = {
                "scaledl": {**params, **({"folds": folds} if folds else {})},
                "graph_only": params,
            }
        return cls(**values)

    def to_dict(self) -> dict:
        """JSON-serialisable view (GNN configs as dicts, paths as strings)."""
        return json.loads(json.dumps(asdict(self), default=str))


class _Runner:
    """Fits methods and records fit counts and seconds per method."""

    def __init__(self, data: ProfileData, params: dict[str, dict]) -> None:
        self.data = data
        self.params = params
        self.fits: dict[str, int] = {}
        self.seconds: dict[str, float] = {}

    def fit(self, method: str, train: ProfileData, val_ids, params: dict | None = None):
        kwargs = self.params.get(method, {}) if params is None else params
        model = make_method(method, **kwargs).fit(train, list(val_ids))
        self.fits[method] = self.fits.get(method, 0) + 1
        self.seconds[method] = self.seconds.get(method, 0.0) + model.fit_seconds_
        return model

    def run_split(self, split: Split, methods) -> pd.DataFrame:
        train = self.data.subset(split.train_ids)
        test = self.data.subset(split.test_ids)
        true = test.labels.set_index("workload_id")
        workloads = [test.workloads[i] for i in test.ids]
        frames = []
        for method in methods:
            pred = self.fit(method, train, split.val_ids).predict(workloads)
            frames.append(
                pd.DataFrame(
                    {
                        "split": split.name,
                        "method": method,
                        "workload_id": pred["workload_id"],
                        "family": true.loc[pred["workload_id"], "family"].to_numpy(),
                        "true_iteration_s": true.loc[pred["workload_id"], "iteration_ms"].to_numpy()
                        / 1000.0,
                        "pred_iteration_s": pred["iteration_s"].to_numpy(),
                        "true_epoch_s": true.loc[pred["workload_id"], "epoch_s"].to_numpy(),
                        "pred_epoch_s": pred["epoch_s"].to_numpy(),
                    }
                )
            )
        return pd.concat(frames, ignore_index=True)


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
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


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
    labels = data.labels
    seed, vf = config.seed, config.val_fraction

    id_split = random_split(labels, config.test_fraction, vf, seed)
    frames = [runner.run_split(id_split, methods)]
    splits: dict = {"id": {"methods": _per_method(frames[-1])}}

    ood_splits = leave_one_family_out(labels, vf, seed)
    if not ood_splits:
        notes.append("OOD skipped: fewer than two families")
        splits["ood"] = {"skipped": "fewer than two families"}
    else:
        per_family: dict = {}
        for split in ood_splits:
            frames.append(runner.run_split(split, methods))
            per_family[split.name.split("/", 1)[1]] = _per_method(frames[-1])
        mean = {m: mean_metrics([per_family[f][m] for f in per_family]) for m in methods}
        splits["ood"] = {"per_family": per_family, "mean": mean}

    try:
        ext_split = extrapolation_split(labels, config.extrapolation_quantile, vf, seed)
    except SplitError as exc:
        notes.append(f"extrapolation skipped: {exc}")
        splits["extrapolation"] = {"skipped": str(exc)}
    else:
        frames.append(runner.run_split(ext_split, methods))
        splits["extrapolation"] = {
            "methods": _per_method(frames[-1]),
            "test_min_tokens_per_step": float(
                labels.set_index("workload_id")
                .loc[list(ext_split.test_ids)]
                .eval("batch_size * seq_len")
                .min()
            ),
        }
    main_s = time.perf_counter() - started - load_s

    t0 = time.perf_counter()
    intervals, predictions, calibration = evaluate_intervals(
        pd.concat(frames, ignore_index=True),
        config.interval_coverage,
        tables_sha256(Path(validated_dir)),
        str(out_dir / "predictions.parquet"),
    )
    intervals_s = time.perf_counter() - t0

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

            def fit_predict(train, val, s, method=method, params=params):
                model = runner.fit(method, train, val, params)
                return model.predict([data.workloads[i] for i in id_split.test_ids])[
                    "iteration_s"
                ].to_numpy()

            lc[method] = learning_curves(
                data,
                id_split.test_ids,
                fit_predict,
                config.learning_curve_sizes,
                config.learning_curve_seeds,
                config.learning_curve_samplers,
                vf,
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
                parallel_labels=config.gpu_parallel_labels, vidur_root=config.vidur_root
            )
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
        "fit_counts": dict(runner.fits),
        "notes": notes,
        "config": config.to_dict(),
    }
    elapsed = {
        "load": load_s,
        "splits": main_s,
        "sweep": sweep_s,
        "learning_curve": lc_s,
        "external": external_s,
        "intervals": intervals_s,
        "fit_seconds": dict(runner.seconds),
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
    return {m: prediction_metrics(g) for m, g in frame.groupby("method", sort=False)}
