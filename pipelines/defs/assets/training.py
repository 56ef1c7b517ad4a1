"""Training stage: layer-wise models + runtime GNN, and the versioned predictor bundle."""

from pathlib import Path
from typing import Any

import dagster as dg

from pipelines.defs.config import PredictorBundleConfig, ScaledlSettings
from pipelines.defs.metadata import scalar_metadata
from pipelines.defs.policy import RegistrationDecision, decide_registration, ood_mre
from pipelines.defs.resources import LocalPredictorStore

GROUP = "training"


def _split_summary(summary: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a training summary into its layer-wise and GNN parts (shared keys go to both)."""
    flat = scalar_metadata(summary)
    gnn = {k: v for k, v in flat.items() if "gnn" in k.lower()}
    layer = {k: v for k, v in flat.items() if "layer" in k.lower() and k not in gnn}
    shared = {k: v for k, v in flat.items() if k not in gnn and k not in layer}
    return {**shared, **layer}, {**shared, **gnn}


@dg.multi_asset(
    group_name=GROUP,
    outs={
        "layerwise_models": dg.AssetOut(
            description="Per-layer-type forward/backward runtime regressors and the all-reduce "
            "model, fitted on the validated profiles.",
            kinds={"scikit-learn"},
        ),
        "runtime_gnn": dg.AssetOut(
            description="Transformer GNN over the layer graph that corrects the layer-wise sum "
            "into iteration and epoch times (the fitted ScaleDL predictor).",
            kinds={"pytorch"},
        ),
    },
    internal_asset_deps={
        "layerwise_models": {dg.AssetKey("validated_profiles")},
        "runtime_gnn": {dg.AssetKey("validated_profiles"), dg.AssetKey("layerwise_models")},
    },
)
def trained_models(validated_profiles: dict[str, Any]):
    """Fit the ScaleDL predictor: layer-wise models first, then the runtime GNN on top."""
    from scaledl.models.train import train_predictor

    predictor = train_predictor(Path(validated_profiles["validated_dir"]))
    summary = dict(predictor.history)
    layer_meta, gnn_meta = _split_summary(summary)
    yield dg.Output(summary, output_name="layerwise_models", metadata=layer_meta)
    yield dg.Output(predictor, output_name="runtime_gnn", metadata=gnn_meta)


@dg.asset(group_name=GROUP, kinds={"python"})
def predictor_bundle(
    context: dg.AssetExecutionContext,
    config: PredictorBundleConfig,
    settings: ScaledlSettings,
    predictor_store: LocalPredictorStore,
    runtime_gnn: Any,
    evaluation_report: dict[str, Any],
) -> dict[str, Any]:
    """The registered predictor version (``data/predictors/<name>/<version>``, plus ``latest``)."""
    candidate = ood_mre(evaluation_report)
    metrics = {
        "ood_mre": candidate,
        "id_mre": _mre(evaluation_report, "id"),
        "preset": settings.preset,
        "evaluation": evaluation_report.get("metrics_path"),
    }
    current = predictor_store.current_manifest(settings.predictors_dir)
    current_metrics = (current or {}).get("metrics")
    if config.policy == "if_not_worse":
        decision = decide_registration(candidate, ood_mre(current_metrics), config.tolerance)
    else:
        decision = RegistrationDecision(
            True, "policy 'always': registering", candidate, ood_mre(current_metrics)
        )
    name_dir = predictor_store.name_dir(settings.predictors_dir)
    if decision.register:
        from scaledl.registry import tables_sha256

        training_data = {
            "sha256": tables_sha256(settings.validated_dir),
            "workloads": len(runtime_gnn.training_workloads),
            "families": sorted({w.family for w in runtime_gnn.training_workloads}),
            "dvc": "the data.dvc commit that contains this bundle",
        }
        path = predictor_store.save(
            runtime_gnn, settings.predictors_dir, metrics, training_data=training_data
        )
        context.log.info(f"registered predictor {path}: {decision.reason}")
    else:
        path = predictor_store.current_bundle(settings.predictors_dir)
        context.log.warning(f"kept current predictor {path}: {decision.reason}")
    context.add_output_metadata(
        {
            "registered": decision.register,
            "decision": decision.reason,
            "policy": config.policy,
            "bundle_dir": dg.MetadataValue.path(str(path)),
            "version": path.name,
            "candidate_ood_mre": _meta_float(decision.candidate_mre),
            "current_ood_mre": _meta_float(decision.current_mre),
        }
    )
    return {
        "path": str(path),
        "latest": str(name_dir),
        "version": path.name,
        "registered": decision.register,
        "reason": decision.reason,
        "metrics": metrics,
    }


def _mre(metrics: dict[str, Any], split: str) -> float | None:
    """ScaleDL's MRE of a split (``ood`` is averaged over families under ``mean``)."""
    body = metrics.get("splits", {}).get(split, {})
    body = body.get("mean", body) if split == "ood" else body
    try:
        return float(body["scaledl"]["mre"])
    except (KeyError, TypeError, ValueError):
        return None


def _meta_float(value: float | None) -> Any:
    return dg.MetadataValue.float(value) if value is not None else "n/a"
