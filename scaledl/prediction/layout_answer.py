"""What composing layout workloads answers, whichever recipe composed them.

:func:`scaledl.prediction.layouts.predict_layout_workloads` returns it, and so does the
Megatron-LM recipe of a GPU predictor it hands GPU workloads to
(:func:`scaledl.prediction.gpu_layouts.predict_gpu_layout_workloads`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scaledl.models.guard import Extrapolation


@dataclass(frozen=True)
class LayoutAnswer:
    """Composed layout workloads, in input order.

    Attributes:
        iteration_ms: shape (n,).
        generic_types: per workload, the layer types the generic layer model predicted.
        recipes: per workload, the recipe that composed it (:mod:`scaledl.prediction.layouts`).
        reasons: per workload, the domain guard's reasons of the composition: ``layout``
            (none for plain DDP; it says when a calibrated prediction is in-sample, the
            workload one of the profiles the calibration was fitted on) and, on a GPU, a
            group size no all-reduce was measured at (``dp_size`` / ``tp_size``).
    """

    iteration_ms: np.ndarray
    generic_types: list[tuple[str, ...]]
    recipes: list[str]
    reasons: list[list[Extrapolation]]
