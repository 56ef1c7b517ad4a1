"""Versioning stage: the data folder tracked and pushed with DVC."""

import dagster as dg

from pipelines.defs.config import ScaledlSettings
from pipelines.defs.resources import DvcResource, LocalPredictorStore

GROUP = "versioning"


@dg.asset(
    group_name=GROUP, kinds={"dvc"}, deps=["evaluation_report", "predictor_bundle", "gpu_predictor"]
)
def data_version(
    context: dg.AssetExecutionContext,
    settings: ScaledlSettings,
    dvc: DvcResource,
    predictor_store: LocalPredictorStore,
) -> dg.MaterializeResult:
    """The DVC version of the data folder (``dvc add`` + ``dvc push``; md5 of ``data.dvc``)."""
    result = dvc.version(settings.root)
    context.log.info(f"data folder {result['target']} at md5 {result['md5']}")
    current = predictor_store.current_bundle(settings.layout.predictors_dir)
    return dg.MaterializeResult(
        metadata={
            "md5": result["md5"],
            "dvc_file": dg.MetadataValue.path(result["dvc_file"]),
            "files": result["nfiles"] if result["nfiles"] is not None else "n/a",
            "size_bytes": result["size"] if result["size"] is not None else "n/a",
            "pushed": result["pushed"],
            "remote": dvc.remote or "(default)",
            "predictor_version": current.name if current is not None else "none registered",
        }
    )
