"""Design stage: the preset's search space and the D-optimal workload design.

Both assets write their files under the data root (``design/search_space.json``,
``design/design.parquet``) and return :class:`dagster.MaterializeResult` with metadata;
downstream assets read the files, nothing goes through Dagster's storage.
"""

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd

from pipelines.defs.config import ScaledlSettings, WorkloadDesignConfig
from pipelines.defs.metadata import md_table

GROUP = "design"


def preset_fingerprint(preset: dict[str, Any]) -> str:
    """SHA-256 (16 hex digits) of a preset without its ``source`` path."""
    body = {k: v for k, v in preset.items() if k != "source"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_search_space(settings: ScaledlSettings) -> dict[str, Any]:
    """The preset written by ``search_space``.

    Raises:
        dagster.Failure: ``search_space`` has not been materialised for this data root.
    """
    path = settings.layout.search_space_path
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise dg.Failure(f"{path}: unreadable ({exc}); materialise 'search_space' first") from exc


def external_data_skipped(search_space: dict[str, Any]) -> str | None:
    """Why the preset leaves out the imported GPU data, or ``None`` when it uses it.

    Args:
        search_space: the preset (:func:`read_search_space`).

    Returns:
        The reason (``evaluation.include_external`` is false), or ``None``.
    """
    if search_space.get("evaluation", {}).get("include_external", True):
        return None
    return f"preset {search_space['name']!r} sets evaluation.include_external: false"


def read_design_table(settings: ScaledlSettings) -> pd.DataFrame:
    """The design written by ``workload_design``.

    Raises:
        dagster.Failure: ``workload_design`` has not been materialised for this data root.
    """
    from scaledl.design import read_design

    path = settings.layout.design_path
    if not path.is_file():
        raise dg.Failure(f"{path}: no design; materialise 'workload_design' first")
    return read_design(path)


def _write_json(path: Path, data: Any) -> None:
    from scaledl.io.atomic import write_atomic

    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str))


def _device() -> tuple[str, str]:
    from scaledl.devices.local import local_backend, local_device_name

    return local_device_name(), local_backend()


@dg.asset(group_name=GROUP, kinds={"python", "yaml"})
def search_space(settings: ScaledlSettings) -> dg.MaterializeResult:
    """The preset's search space: model families, their factor levels and feasible candidates."""
    from scaledl.design import candidate_workloads, load_preset

    preset = load_preset(settings.preset)
    device_name, backend = _device()
    candidates = candidate_workloads(preset, device_name, backend)
    per_family = pd.Series([w.family for w in candidates]).value_counts().sort_index()
    levels = pd.DataFrame(
        [
            {"family": fam, "factor": key, "levels": str(value)}
            for fam, spec in preset["families"].items()
            for key, value in spec.items()
        ]
    )
    _write_json(settings.layout.search_space_path, preset)
    return dg.MaterializeResult(
        metadata={
            "search_space_file": dg.MetadataValue.path(str(settings.layout.search_space_path)),
            "preset": preset["name"],
            "source": dg.MetadataValue.path(str(preset["source"])),
            "fingerprint": preset_fingerprint(preset),
            "device_name": device_name,
            "backend": backend,
            "n_candidates": len(candidates),
            "candidates_per_family": md_table(
                per_family.rename_axis("family").reset_index(name="candidates")
            ),
            "factor_levels": md_table(levels, max_rows=200),
            "design_settings": dg.MetadataValue.json(preset["design"]),
        }
    )


class UnboundedUncertainty(ValueError):
    """The registered predictor's intervals cannot weight the sequential design."""


#: Coverage of the interval whose relative width is the sequential design's uncertainty.
UNCERTAINTY_COVERAGE = 0.9


def registered_uncertainty(registry: Path) -> tuple[Any, str]:
    """The registered predictor's uncertainty about new candidates, for the sequential design.

    Args:
        registry: the predictor's name directory (``<data>/predictors/scaledl``).

    Returns:
        ``(function, reason)``: ``function(workloads) -> (n,)`` relative widths of the
        predictor's calibrated 90% interval of iteration time, or ``None`` (the unweighted
        matched augmentation) when nothing is registered yet; ``reason`` says which, for the
        step's metadata.

    Raises:
        scaledl.registry.BundleError: ``latest`` names a broken bundle.
    """
    from scaledl.prediction.predictor import load_predictor
    from scaledl.registry.bundle import latest_bundle

    bundle = latest_bundle(registry)
    if bundle is None:
        return None, "no registered predictor: unweighted augmentation"
    predictor = load_predictor(bundle)

    def uncertainty(workloads):
        frame = predictor.predict(workloads, coverage=UNCERTAINTY_COVERAGE)
        width = (frame["iteration_s_high"] - frame["iteration_s_low"]) / frame["iteration_s"]
        width = width.to_numpy(dtype=float)
        if not (width > 0).all() or not pd.Series(width).map(math.isfinite).all():
            raise UnboundedUncertainty(
                f"{bundle}: some 90% intervals are unbounded (too few calibration residuals)"
            )
        return width

    return uncertainty, f"weighted by {registry.name}/{bundle.name}'s 90% interval widths"


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, deps=["search_space"])
def workload_design(
    config: WorkloadDesignConfig, settings: ScaledlSettings
) -> dg.MaterializeResult:
    """The workloads to profile: a D-optimal subset of the candidates (augmented on retrain)."""
    from scaledl.design import augment_design, generate_design, read_design, write_design

    preset = read_search_space(settings)
    fingerprint = preset_fingerprint(preset)
    path, fp_path = settings.layout.design_path, settings.layout.design_fingerprint_path
    same_preset = (
        path.is_file()
        and fp_path.is_file()
        and json.loads(fp_path.read_text()).get("fingerprint") == fingerprint
    )
    device_name, backend = _device()
    design = preset["design"]
    if same_preset and not config.regenerate and config.augment_k > 0:
        existing = read_design(path)
        uncertainty, why = registered_uncertainty(settings.layout.predictor_dir())
        augment = dict(seed=int(design["seed"]) + len(existing), device_name=device_name,
                       backend=backend)  # fmt: skip
        try:
            added = augment_design(
                preset, existing, config.augment_k, uncertainty=uncertainty, **augment
            )
        except UnboundedUncertainty as exc:  # said in the metadata, not hidden
            why = f"{exc}: unweighted augmentation"
            added = augment_design(preset, existing, config.augment_k, **augment)
        combined = pd.concat([existing, added.table], ignore_index=True)
        result = dataclasses.replace(added, table=combined)
        action = f"augmented by {len(added.table)} workloads ({added.sampler}; {why})"
    elif same_preset and not config.regenerate:
        return dg.MaterializeResult(metadata=_design_metadata(read_design(path), "reused", path))
    else:
        result = generate_design(
            preset,
            int(design["n_workloads"]),
            sampler=design["sampler"],
            seed=int(design["seed"]),
            device_name=device_name,
            backend=backend,
        )
        action = "generated"
    write_design(result, path)
    _write_json(fp_path, {"preset": preset["name"], "fingerprint": fingerprint})
    return dg.MaterializeResult(
        metadata={
            **_design_metadata(read_design(path), action, path),
            # The response surface's log det: -inf (shown as text) when the matched design
            # does not estimate the surface (fewer workloads than its terms).
            "log_det": float(result.log_det) if math.isfinite(result.log_det) else "-inf",
            "d_efficiency": float(result.d_efficiency),
            "n_candidates": int(result.n_candidates),
            "n_terms": int(result.n_terms),
            **(
                {"matched_criterion": float(result.metadata["matched_criterion"])}
                if "matched_criterion" in result.metadata
                else {}
            ),
        }
    )


def _design_metadata(table: pd.DataFrame, action: str, path: Any) -> dict[str, Any]:
    summary = table.attrs.get("design", {})
    shown = [
        c
        for c in (
            "workload_id",
            "family",
            "hidden_size",
            "num_layers",
            "seq_len",
            "batch_size",
            "world_size",
            "sampler",
        )
        if c in table.columns
    ]
    meta: dict[str, Any] = {
        "action": action,
        "design_file": dg.MetadataValue.path(str(path)),
        "dagster/row_count": len(table),
        "workloads_per_family": md_table(
            table["family"]
            .value_counts()
            .sort_index()
            .rename_axis("family")
            .reset_index(name="workloads")
        ),
        "workloads": md_table(table[shown], max_rows=100),
    }
    for key in ("log_det", "d_efficiency", "sampler", "matched_criterion"):
        if key in summary:
            value = summary[key]
            finite = not isinstance(value, float) or math.isfinite(value)
            meta[f"design.{key}"] = value if finite else str(value)
    return meta
