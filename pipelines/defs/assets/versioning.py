"""Versioning stage: the data folder tracked and pushed with DVC."""

from typing import Any

import dagster as dg

from pipelines.defs.config import ScaledlSettings
from pipelines.defs.resources import DvcResource

GROUP = "versioning"


@dg.asset(group_name=GROUP, kinds={"dvc"}, deps=["evaluation_report"])
def data_version(
    context: dg.AssetExecutionContext,
    settings: ScaledlSettings,
    dvc: DvcResource,
    predictor_bundle: dict[str, Any],
) -> dict[str, Any]:
    """The DVC version of the data folder (``dvc add`` + ``dvc push``; md5 of ``data.dvc``)."""
    result = dvc.version(settings.root)
    context.log.info(f"data folder {result['target']} at md5 {result['md5']}")
    context.add_output_metadata(
        {
            "md5": result["md5"],
            "dvc_file": dg.MetadataValue.path(result["dvc_file"]),
            "files": result["nfiles"] if result["nfiles"] is not None else "n/a",
            "size_bytes": result["size"] if result["size"] is not None else "n/a",
            "pushed": result["pushed"],
            "remote": dvc.remote or "(default)",
            "predictor_version": predictor_bundle["version"],
        }
    )
    return {**result, "predictor_version": predictor_bundle["version"]}
