"""Training stage: layer-wise models + runtime GNN, and the versioned predictor bundle.

Models never travel through Dagster's storage (no pickle): ``trained_models`` saves the fitted
predictor as a checksummed bundle under ``candidates/<name>/<version>`` (NumPy arrays and
``torch.save`` of a state dict, :mod:`scaledl.registry.bundle`) and ``predictor_bundle`` loads
that bundle back through the verifying loader, compares it with the registered version and
copies it into the registry when the policy says so.
"""

import shutil
from pathlib import Path
from typing import Any

import dagster as dg

from pipelines.defs.config import PredictorBundleConfig, ScaledlSettings
from pipelines.defs.metadata import md_table
from pipelines.defs.policy import RegistrationDecision, compare_on_held_out, decide_registration
from pipelines.defs.resources import LocalPredictorStore

GROUP = "training"


def _prune_candidates(keep: Path) -> None:
    """Remove the older candidate versions beside ``keep`` (never registered, never read)."""
    for other in keep.parent.iterdir():
        if other.is_dir() and other != keep:
            shutil.rmtree(other)


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "layerwise_models",
            group_name=GROUP,
            deps=["validated_profiles"],
            description="Per-layer-type forward/backward runtime regressors and the all-reduce "
            "model, fitted on the validated profiles (in the candidate bundle).",
            kinds={"scikit-learn"},
        ),
        dg.AssetSpec(
            "runtime_gnn",
            group_name=GROUP,
            deps=["validated_profiles", "layerwise_models"],
            description="Transformer GNN over the layer graph that corrects the layer-wise sum "
            "into iteration and epoch times (the candidate ScaleDL predictor bundle).",
            kinds={"pytorch"},
        ),
    ],
)
def trained_models(settings: ScaledlSettings, predictor_store: LocalPredictorStore):
    """Fit the ScaleDL predictor (layer-wise models, then the GNN) and save the candidate bundle.

    The registration hold-out (``settings.holdout_fraction``) stays out of training.
    """
    from scaledl.models.data import load_profile_data
    from scaledl.models.train import TrainConfig, train_predictor
    from scaledl.profiles.fingerprint import tables_sha256
    from scaledl.registry import save_bundle
    from scaledl.registry.bundle import LAYER_FILE

    data = load_profile_data(settings.layout.validated_dir)
    method = train_predictor(data, TrainConfig(holdout_fraction=settings.holdout_fraction))
    trained = method.training_workload_ids_
    training_data = {
        "sha256": tables_sha256(settings.layout.validated_dir),
        "workloads": len(trained),
        "held_out": len(data.ids) - len(trained),
        "holdout_fraction": settings.holdout_fraction,
        "families": sorted({data.workloads[i].family for i in trained}),
        "dvc": "the data.dvc commit that contains this bundle",
    }
    path = save_bundle(
        method, settings.layout.candidates_dir, predictor_store.name, training_data=training_data
    )
    _prune_candidates(path)
    types = sorted(method.layerwise_.models_)
    yield dg.MaterializeResult(
        asset_key="layerwise_models",
        metadata={
            "candidate_bundle": dg.MetadataValue.path(str(path)),
            "file": dg.MetadataValue.path(str(path / LAYER_FILE)),
            "layer_types": ", ".join(types),
            "all_reduce_model": method.allreduce_ is not None,
            "training_workloads": len(trained),
            "held_out_workloads": training_data["held_out"],
        },
    )
    history = method.history_
    yield dg.MaterializeResult(
        asset_key="runtime_gnn",
        metadata={
            "candidate_bundle": dg.MetadataValue.path(str(path)),
            "file": dg.MetadataValue.path(str(path / "gnn.pt")),
            "version": path.name,
            "gnn_epochs": int(history["epochs"]),
            "gnn_best_epoch": int(history["best_epoch"]),
            "gnn_best_val_mse": float(history["best_val_mse"]),
            "fit_seconds": round(method.fit_seconds_, 2),
            "training_workloads": len(trained),
            "families": ", ".join(training_data["families"]),
        },
    )


def _decide(
    candidate: Any, current_dir: Path | None, settings: ScaledlSettings, confidence_level: float
) -> tuple[RegistrationDecision, str]:
    """The policy's decision and a note on the held-out comparison."""
    from scaledl.prediction.predictor import load_predictor
    from scaledl.registry import BundleError
    from scaledl.workloads.fields import WorkloadError

    if current_dir is None:
        return decide_registration(has_current=False), "no registered version to compare with"
    try:
        current = load_predictor(current_dir)
        comparison, note = compare_on_held_out(
            candidate, current, settings.layout.validated_dir, confidence_level
        )
    except (BundleError, WorkloadError) as exc:
        return decide_registration(has_current=True, current_unusable=str(exc)), str(exc)
    decision = decide_registration(has_current=True, comparison=comparison, not_compared=note)
    return decision, note


@dg.asset(group_name=GROUP, kinds={"python"}, deps=["runtime_gnn", "evaluation_report"])
def predictor_bundle(
    context: dg.AssetExecutionContext,
    config: PredictorBundleConfig,
    settings: ScaledlSettings,
    predictor_store: LocalPredictorStore,
) -> dg.MaterializeResult:
    """The registered predictor version (``data/predictors/<name>/<version>``, plus ``latest``)."""
    from scaledl.evaluation.results import Metrics, Skipped
    from scaledl.prediction.predictor import load_predictor

    candidate = load_predictor(settings.layout.candidates_dir / predictor_store.name)
    metrics = Metrics.read(settings.layout.metrics_path)
    current_dir = predictor_store.current_bundle(settings.layout.predictors_dir)
    if current_dir is not None and current_dir.name == candidate.version:
        raise dg.Failure(
            f"the candidate {candidate.path} is the registered version already: materialise "
            "'runtime_gnn' (train a new candidate) before 'predictor_bundle'"
        )
    decision, note = _decide(candidate, current_dir, settings, config.confidence_level)
    register = decision.register or config.policy == "always"
    reason = decision.reason if config.policy == "if_not_worse" else "policy 'always': registering"
    comparison = decision.comparison
    record = {
        "preset": settings.preset,
        "evaluation": str(settings.layout.metrics_path),
        "id_mre": metrics.mre("id"),
        "ood_mre": None if isinstance(metrics.splits.ood, Skipped) else metrics.mre("ood"),
        "held_out_comparison": comparison.to_dict() if comparison else None,
    }
    # The evaluation's interval calibration (absent when ScaleDL was not evaluated: the version
    # then predicts without intervals, as the metadata says).
    calibration = settings.layout.reports_dir / "calibration.json"
    calibration = calibration if calibration.is_file() else None
    if register:
        path = predictor_store.register(
            candidate.path, settings.layout.predictors_dir, record, calibration=calibration
        )
        context.log.info(f"registered predictor {path}: {reason}")
    else:
        path = current_dir
        context.log.warning(f"kept current predictor {path}: {reason}")
    meta: dict[str, Any] = {
        "registered": register,
        "decision": reason,
        "policy": config.policy,
        "policy_verdict": decision.reason,
        "held_out": note,
        "bundle_dir": dg.MetadataValue.path(str(path)),
        "version": path.name,
        "candidate_version": candidate.version,
        "id_mre": dg.MetadataValue.float(record["id_mre"]),
        "interval_calibration": (
            "the registered version's"
            if not register
            else str(calibration)
            if calibration
            else "none: no intervals"
        ),  # fmt: skip
    }
    if comparison is not None:
        meta.update(comparison_metadata(comparison))
    return dg.MaterializeResult(metadata=meta)


def comparison_metadata(comparison: Any) -> dict[str, Any]:
    """The run metadata of the candidate-vs-current comparison on held-out workloads.

    Args:
        comparison: a :class:`~scaledl.stats.significance.Comparison` (candidate is A).

    Returns:
        Both MREs, the difference with its interval, the verdict, the workloads compared and a
        markdown table.
    """
    return {
        "candidate_held_out_mre": dg.MetadataValue.float(comparison.mre_a),
        "current_held_out_mre": dg.MetadataValue.float(comparison.mre_b),
        "mre_difference": dg.MetadataValue.float(comparison.mre_difference),
        "mre_difference_ci_low": dg.MetadataValue.float(comparison.ci_low),
        "mre_difference_ci_high": dg.MetadataValue.float(comparison.ci_high),
        "verdict": comparison.verdict,
        "held_out_workloads": comparison.n_units,
        "comparison": md_table(_comparison_frame(comparison)),
    }


def _comparison_frame(comparison: Any):
    import pandas as pd

    level = f"{100 * comparison.confidence_level:g}% CI"
    return pd.DataFrame(
        [
            {"": comparison.method_a, "held-out MRE": comparison.mre_a},
            {"": comparison.method_b, "held-out MRE": comparison.mre_b},
            {
                "": f"difference ({level} {comparison.ci_low:+.4f} to {comparison.ci_high:+.4f})",
                "held-out MRE": comparison.mre_difference,
            },
        ]
    )
