"""The GPU predictor: kernel-aware ScaleDL trained on the imported GPU profiles, registered.

Trained on every validated imported workload (:func:`scaledl.models.train_gpu.train_gpu_predictor`)
and written straight into the registry as ``<predictors>/<name>-gpu/<version>`` (a kernel
bundle, :mod:`scaledl.registry.kernel_bundle`: manifest, training domain, and the intervals
calibrated on the GPU evaluation's out-of-sample predictions, ``reports/gpu_calibration.json``).
Its manifest records the GPU evaluation's errors. There is no registration policy: the GPU
evaluation measures the recipe on held-out models and GPUs, and the imported data is fixed.
"""

from typing import Any

import dagster as dg

from pipelines.defs.assets.design import external_data_skipped, read_search_space
from pipelines.defs.config import ScaledlSettings
from pipelines.defs.resources import LocalPredictorStore

GROUP = "training"
GPU_SUFFIX = "-gpu"


def gpu_metrics_record(metrics: Any, path: str) -> dict[str, Any]:
    """The GPU evaluation's headline errors for the manifest (``{}`` when it was skipped).

    Args:
        metrics: a :class:`~scaledl.evaluation.results.Metrics`.
        path: the ``metrics.json`` it was read from.

    Returns:
        ``evaluation`` (the file), ``lomo_mean_mre``, ``logo_mean_mre`` (ScaleDL, mean over
        GPUs) and, when the peer was evaluated, ``peer_lomo`` (the paired comparison).
    """
    from scaledl.evaluation.results import Skipped

    gpu = metrics.gpu
    if isinstance(gpu, Skipped):
        return {"evaluation": path, "gpu": f"skipped: {gpu.skipped}"}
    record: dict[str, Any] = {
        "evaluation": path,
        "lomo_mean_mre": gpu.leave_one_model_out.mean_over_gpus["scaledl"],
        "logo_mean_mre": (
            gpu.leave_one_gpu_out.mean_over_gpus["scaledl"] if gpu.leave_one_gpu_out else None
        ),
    }
    if gpu.peer:
        record["peer_lomo"] = gpu.peer["comparisons"]["leave_one_model_out"]["overall"]
    return record


@dg.asset(
    group_name=GROUP,
    kinds={"scikit-learn"},
    deps=["imported_profiles", "evaluation_report"],
)
def gpu_predictor(
    context: dg.AssetExecutionContext,
    settings: ScaledlSettings,
    predictor_store: LocalPredictorStore,
) -> dg.MaterializeResult:
    """The registered GPU predictor (kernel-aware, any GPU of the device table from its specs)."""
    from scaledl.evaluation.gpu_calibration import GPU_CALIBRATION_FILE
    from scaledl.evaluation.results import Metrics
    from scaledl.models.intervals import IntervalCalibration
    from scaledl.models.train_gpu import train_gpu_predictor
    from scaledl.profiles.fingerprint import tables_sha256
    from scaledl.registry import save_bundle

    search_space = read_search_space(settings)
    reason = external_data_skipped(search_space)
    if reason:
        context.log.info(f"GPU predictor not trained: {reason}")
        return dg.MaterializeResult(metadata={"skipped": reason})
    layout = settings.layout
    validated = layout.imported_validated_dir()
    if not validated.is_dir():
        raise dg.Failure(f"{validated}: no imported GPU profiles; materialise 'imported_profiles'")
    method = train_gpu_predictor(validated)
    calibration_file = layout.reports_dir / GPU_CALIBRATION_FILE
    calibration = IntervalCalibration.read(calibration_file) if calibration_file.is_file() else None
    training_data = {
        "sha256": tables_sha256(validated),
        "workloads": len(method.training_workload_ids_),
        "devices": list(method.training_devices_),
        "source": "imported NeuSight profiles (sitar-lab/NeuSight, MIT)",
    }
    metrics = gpu_metrics_record(Metrics.read(layout.metrics_path), str(layout.metrics_path))
    name = predictor_store.name + GPU_SUFFIX
    path = save_bundle(
        method,
        predictor_store.resolve_root(layout.predictors_dir),
        name,
        metrics=metrics,
        training_data=training_data,
        calibration=calibration,
    )
    context.log.info(f"registered GPU predictor {path}")
    return dg.MaterializeResult(
        metadata={
            "bundle_dir": dg.MetadataValue.path(str(path)),
            "version": path.name,
            "training_workloads": len(method.training_workload_ids_),
            "devices": ", ".join(method.training_devices_),
            "correction": method.correction_kind_,
            "interval_calibration": str(calibration_file) if calibration else "none",
            "fit_seconds": round(method.fit_seconds_, 2),
        }
    )
