"""Layout calibration: the product's layout recipe, fitted once on all of a host's layouts.

The leave-one-layout-out evaluation (:mod:`scaledl.evaluation.profiled_layouts`) fits, per fold, the
product's recipe :data:`~scaledl.parallel.recipe.RECIPE` (``plain_layers_overlap``) on the
training layouts and judges it on the held-out kind. A layout calibration fits that recipe
with no kind held out (:func:`fit_layout_calibration`): its layer-wise models, collective
model, overlap factors and correction (a :class:`~scaledl.parallel.recipe.LayoutRecipe`),
on every profiled workload.

The calibration records the recipe's in-sample MRE per kind and Kendall tau per model:
**in-sample, not an accuracy claim**; the accuracy claim of the recipe is the evaluation's
leave-one-layout-out (``scaledl evaluate-layouts``).
It is saved beside a predictor bundle (:mod:`scaledl.registry.layouts`) and used by
``scaledl predict`` and the planner for layouts of its device.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scaledl.parallel.predict import LayoutPredictions
from scaledl.parallel.ranking import kendall_by_model
from scaledl.parallel.recipe import RECIPE, LayoutRecipe
from scaledl.parallel.training import load_layout_context
from scaledl.profiles.fingerprint import tables_sha256
from scaledl.workloads.spec import Workload


@dataclass(frozen=True)
class LayoutCalibration:
    """A layout recipe fitted on one host's layout profiles (module docstring).

    Attributes:
        recipe: the fitted recipe.
        device_name: the host's device (every profiled workload's ``device_name``).
        training_data: ``sha256`` of the profile tables, ``directory``, ``workloads``,
            ``by_kind`` (workloads per kind), ``workload_ids`` and ``spec_keys``
            (:func:`spec_key` of each).
        in_sample: ``mre_by_kind`` and ``ranking`` (Kendall tau per model) of the recipe on
            its own training workloads: in-sample, not an accuracy claim.
        version: the saved version (``""`` before it is saved).
        predictor_version: the version of the bundle it is saved beside (``""`` before).
    """

    recipe: LayoutRecipe
    device_name: str
    training_data: dict[str, Any]
    in_sample: dict[str, Any]
    version: str = field(default="")
    predictor_version: str = field(default="")

    @property
    def label(self) -> str:
        """``calibrated:<candidate>@<version>``: how predictions name the recipe."""
        return f"calibrated:{self.recipe.name}@{self.version or 'unsaved'}"

    def predict(
        self, workloads: Sequence[Workload], arch_keys: Sequence[str] | None = None
    ) -> tuple[LayoutPredictions, np.ndarray]:
        """:meth:`LayoutRecipe.predict <scaledl.parallel.recipe.LayoutRecipe.predict>`."""
        return self.recipe.predict(workloads, arch_keys)

    def fitted_on(self, workloads: Sequence[Workload]) -> np.ndarray:
        """Which workloads (any dataset size) were profiled and fitted this calibration.

        Their predictions are in-sample: no evidence of accuracy.

        Returns:
            bool array, shape (len(workloads),).
        """
        fitted = set(self.training_data["spec_keys"])
        return np.array([spec_key(w) in fitted for w in workloads], dtype=bool)


def fit_layout_calibration(directory: Path) -> LayoutCalibration:
    """Fit the layout recipe on every profiled workload of a host (module docstring).

    Args:
        directory: validated layout profiles of one host (data-parallel and layout workloads,
            with ``collective_timings``), e.g. ``datasets/layouts-cpu/validated``.

    Returns:
        The :class:`LayoutCalibration` (not saved: :func:`scaledl.registry.layouts.
        save_layout_calibration`).

    Raises:
        scaledl.models.data.ProfileDataError: unreadable tables or no usable workload.
        ValueError: no data-parallel or no layout workload, or workloads of several devices
            (naming the file, field and values).
    """
    directory = Path(directory)
    _one_device(directory / "workloads.parquet")  # before fitting
    ctx = load_layout_context(directory)
    devices = sorted({w.device_name for w in ctx.wlist})
    _one_device(directory / "workloads.parquet", devices)
    everything = np.arange(len(ctx.ids))
    _, corrected, _, recipe = ctx.candidates(
        everything, np.zeros(len(ctx.ids), dtype=bool), None, (RECIPE,)
    )[RECIPE]
    error = np.abs(corrected - ctx.measured) / ctx.measured
    kinds = list(dict.fromkeys(ctx.kind.tolist()))
    return LayoutCalibration(
        recipe=recipe,
        device_name=devices[0],
        training_data={
            "sha256": tables_sha256(directory),
            "directory": str(directory),
            "workloads": len(ctx.ids),
            "by_kind": {k: int((ctx.kind == k).sum()) for k in kinds},
            "workload_ids": list(ctx.ids),
            "spec_keys": [spec_key(w) for w in ctx.wlist],
        },
        in_sample={
            "mre_by_kind": {k: float(error[ctx.kind == k].mean()) for k in kinds},
            "ranking": kendall_by_model(ctx.wlist, ctx.measured, {"calibrated": corrected}),
        },
    )


def spec_key(w: Workload) -> str:
    """A workload's id less its dataset size: the same model, batch, layout and device.

    Returns:
        16 hex digits (SHA-256 of the spec without ``dataset_size``, as sorted JSON).
    """
    spec = w.spec_dict()
    spec.pop("dataset_size", None)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def _one_device(path: Path, devices: list[str] | None = None) -> None:
    """Refuse profiles of several devices (read from ``path`` when not given).

    Raises:
        ValueError: naming the file, the field and the values.
    """
    if devices is None:
        try:
            devices = sorted(pd.read_parquet(path, columns=["device_name"])["device_name"].unique())
        except Exception:  # unreadable: load_layout_context names the table and the cause
            return
    if len(devices) != 1:
        raise ValueError(
            f"{path}: field 'device_name' (values {devices}): a layout calibration is fitted "
            "on one host's profiles; split them by device"
        )
