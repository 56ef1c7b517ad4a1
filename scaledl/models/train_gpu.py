"""Train the GPU predictor: kernel-aware ScaleDL on imported GPU profiles (all of them).

The recipe is the GPU evaluation's (:func:`scaledl.evaluation.gpu.evaluate_gpu`, which measures
it out of sample): a :class:`~scaledl.models.kernel.KernelGraphMethod` with its defaults
(device-relative operator features, :data:`~scaledl.models.kernel.DEFAULT_OPERATOR_PARAMS`;
the training GPUs' correction on a GPU never trained on), the GNN (when it has enough
architectures) stopping early on a seeded 15% of the workloads
(:func:`scaledl.models.train.validation_ids`), here fitted on every workload.
"""

from __future__ import annotations

from pathlib import Path

from scaledl.models.data import ProfileData, load_profile_data
from scaledl.models.kernel import KernelGraphMethod
from scaledl.models.train import validation_ids

#: Share of the workloads the GNN stops early on (as in the evaluation's folds).
VALIDATION_FRACTION = 0.15


def train_gpu_predictor(data: ProfileData | Path | str) -> KernelGraphMethod:
    """Fit the GPU predictor on every workload of a set of operator-timed GPU profiles.

    Args:
        data: profile data, or a directory of validated tables (``scaledl import neusight``
            then ``scaledl validate``) with ``operator_timings``.

    Returns:
        The fitted :class:`~scaledl.models.kernel.KernelGraphMethod`.

    Raises:
        scaledl.models.data.ProfileDataError: unreadable tables or no usable workload.
        ValueError: the profiles have no ``operator_timings``.
    """
    if not isinstance(data, ProfileData):
        data = load_profile_data(Path(data))
    method = KernelGraphMethod()
    return method.fit(data, list(validation_ids(data.ids, VALIDATION_FRACTION, 0)))
