"""A fitted layout recipe: layer-wise models, collectives, overlap factors and a correction.

A recipe is what one candidate of :data:`CANDIDATES` (the product's: :data:`RECIPE`) fits
on profiled layouts (:meth:`scaledl.parallel.training.LayoutContext.candidates`), kept as
objects so that it can predict new workloads and be saved (:mod:`scaledl.registry.layouts`):

* the layer-wise models (:class:`~scaledl.models.layerwise.LayerwiseModel`) that predict every
  layer of a rank on its local shapes;
* the :class:`~scaledl.parallel.collectives.CollectiveModel` of the host's collectives;
* the :class:`~scaledl.parallel.overlap.Overlap` factors (``None``: every collective hidden);
* the :class:`Correction`: a ridge regression (``alpha = 1``, fixed a priori) of
  ``log(measured / composed)`` on the composition's parts (:data:`CORRECTION_FEATURES`), so a
  prediction is ``composed * exp(features @ coef + intercept)``.

The composition itself is :class:`~scaledl.parallel.predict.LayoutComposer`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scaledl.parallel.collectives import CollectiveModel
from scaledl.parallel.overlap import Overlap
from scaledl.parallel.predict import LayoutComposer, LayoutPredictions
from scaledl.workloads.parallelism import SHARDINGS
from scaledl.workloads.spec import Workload

if TYPE_CHECKING:  # a recipe predicts with fitted models; fitting them is training's
    from scaledl.models.layerwise import LayerwiseModel

#: The layout candidates a calibration can fit: layer rows used (``all``, or ``plain``: without
#: the times that hold the layout's communication) and whether per-lane overlap factors are
#: fitted (``benchmarks/history/layout_variants.py`` compares them; a saved calibration names
#: one).
CANDIDATES = {
    "fold_layers": ("all", False),
    "fold_layers_overlap": ("all", True),
    "plain_layers": ("plain", False),
    "plain_layers_overlap": ("plain", True),
}
#: The product's layout recipe: the candidate the layout calibration fits.
RECIPE = "plain_layers_overlap"
#: The correction's features, in column order (:func:`correction_features`).
CORRECTION_FEATURES = (
    "log_iteration_ms",
    "bubble_fraction",
    "exposed_sync_share",
    "optimizer_share",
    "log2_tp_size",
    "log2_pp_size",
    "log2_dp_size",
    "log2_micro_batches",
    "sharding_level",
)


class LayerModels:
    """Layer-wise and all-reduce models, shaped as :class:`LayoutComposer` reads them.

    Args:
        layerwise: the fitted layer-wise models.
        allreduce: the fitted all-reduce model (``None``: the composer is given collectives).
    """

    def __init__(self, layerwise, allreduce) -> None:
        self.layerwise_, self.allreduce_ = layerwise, allreduce


def correction_features(pred: LayoutPredictions, ws: Sequence[Workload]) -> np.ndarray:
    """The composition's parts the correction reads (:data:`CORRECTION_FEATURES`).

    Args:
        pred: the composed predictions of ``ws``.
        ws: the workloads.

    Returns:
        Shape (len(ws), len(CORRECTION_FEATURES)).
    """
    it = np.maximum(pred.iteration_ms, 1e-9)
    level = np.array([SHARDINGS.index(w.sharding) for w in ws], dtype=float)
    sizes = np.log2([[w.tp_size, w.pp_size, w.dp_size, w.micro_batches] for w in ws])
    return np.column_stack([np.log(it), pred.bubble_fraction, pred.exposed_sync_ms / it,
                            pred.optimizer_ms / it, sizes, level])  # fmt: skip


@dataclass(frozen=True)
class Correction:
    """The learned correction of composed layout times (module docstring).

    Fitted by :func:`~scaledl.parallel.training.fit_correction` (scikit-learn's ridge).

    Attributes:
        coef: one coefficient per feature of :data:`CORRECTION_FEATURES`.
        intercept: the intercept (log scale).
    """

    coef: tuple[float, ...]
    intercept: float

    def apply(self, pred: LayoutPredictions, ws: Sequence[Workload]) -> np.ndarray:
        """Corrected iteration times, ms, shape (len(ws),)."""
        x = correction_features(pred, ws)
        return pred.iteration_ms * np.exp(x @ np.asarray(self.coef) + self.intercept)


@dataclass(frozen=True)
class LayoutRecipe:
    """One fitted candidate of the layout evaluation (module docstring).

    Attributes:
        name: the candidate (:data:`CANDIDATES`).
        layerwise: the layer-wise models.
        collectives: the collective model.
        overlap: the overlap factors (``None``: every collective hidden).
        correction: the learned correction.
    """

    name: str
    layerwise: LayerwiseModel
    collectives: CollectiveModel
    overlap: Overlap | None
    correction: Correction

    def predict(
        self, workloads: Sequence[Workload], arch_keys: Sequence[str] | None = None
    ) -> tuple[LayoutPredictions, np.ndarray]:
        """Compose and correct the iteration of every workload (any layout, plain DDP too).

        Args:
            workloads: the workloads.
            arch_keys: their architecture keys, when the caller knows them.

        Returns:
            ``(composed, corrected_ms)``: the composition and the corrected iteration times
            (ms, shape (len(workloads),)).
        """
        composer = LayoutComposer(
            LayerModels(self.layerwise, None), workloads, self.collectives, arch_keys
        )
        composed = composer.predict(self.overlap)
        return composed, self.correction.apply(composed, workloads)
