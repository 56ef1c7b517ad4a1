"""Interval calibration of the GPU predictor from the GPU evaluation's out-of-sample predictions.

The registered GPU predictor (:mod:`scaledl.registry.kernel_bundle`) carries conformal
intervals (:mod:`scaledl.models.intervals`) calibrated on ScaleDL's predictions of the GPU
evaluation (:func:`scaledl.evaluation.gpu.evaluate_gpu`), each row in the stratum the domain
guard would give such a prediction:

* leave-one-GPU-out rows: ``unseen_device`` (a GPU predicted from its specs only);
* leave-one-model-out rows: ``unseen_family`` when no other model of the fold has the held-out
  model's family (:func:`~scaledl.workloads.identity.family_key`: BERT is the only ``bert`` of the
  NeuSight data), else ``in_domain`` (a new model of a family and GPU trained on; for the
  training models themselves these residuals are conservative).

Imports carry no epoch times, so the GPU predictor's epoch is its iterations
(``steps_per_epoch x iteration``): the epoch's log residuals are the iteration's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from scaledl.models.intervals import CalibrationError, IntervalCalibration, log_residuals
from scaledl.profiles.fingerprint import tables_sha256


def gpu_strata(predictions: pd.DataFrame) -> np.ndarray:
    """The stratum of each prediction row (module docstring).

    Args:
        predictions: GPU evaluation rows with ``protocol``, ``held_out``, ``model`` and
            ``family``.

    Returns:
        Array of stratum names, shape (len(predictions),).
    """
    strata = np.full(len(predictions), "unseen_device", dtype=object)
    lomo = (predictions["protocol"] == "leave_one_model_out").to_numpy()
    family_of = predictions.groupby("model")["family"].first()
    for i in np.flatnonzero(lomo):
        held, family = predictions["held_out"].iat[i], predictions["family"].iat[i]
        others = set(family_of[family_of.index != held])
        strata[i] = "in_domain" if family in others else "unseen_family"
    return strata


def gpu_calibration(
    predictions: pd.DataFrame, training_data_sha256: str = "", source: str = ""
) -> IntervalCalibration:
    """The calibration of ScaleDL's GPU predictions, per stratum.

    Args:
        predictions: :func:`~scaledl.evaluation.gpu.evaluate_gpu`'s rows (``method``,
            ``protocol``, ``held_out``, ``model``, ``family``, ``true_ms``, ``pred_ms``).
        training_data_sha256: SHA-256 of the GPU profile tables evaluated
            (:func:`scaledl.registry.bundle.tables_sha256`).
        source: where the predictions came from.

    Returns:
        The :class:`~scaledl.models.intervals.IntervalCalibration` (iteration and epoch).

    Raises:
        CalibrationError: no usable ScaleDL prediction.
    """
    rows = predictions[predictions["method"] == "scaledl"].reset_index(drop=True)
    true, pred = rows["true_ms"].to_numpy(float), rows["pred_ms"].to_numpy(float)
    ok = np.isfinite(true) & np.isfinite(pred) & (true > 0) & (pred > 0)
    if not ok.any():
        raise CalibrationError(f"{source or 'GPU predictions'}: no usable 'scaledl' prediction")
    strata = gpu_strata(rows)[ok]
    residuals = log_residuals(pred[ok], true[ok])
    by_stratum = {s: residuals[strata == s] for s in dict.fromkeys(strata)}
    residuals_by_target = {"iteration": by_stratum, "epoch": dict(by_stratum)}
    return IntervalCalibration(residuals_by_target, "scaledl", training_data_sha256, source)


#: File name of the GPU calibration beside ``gpu_predictions.parquet``.
GPU_CALIBRATION_FILE = "gpu_calibration.json"


def write_gpu_calibration(predictions: pd.DataFrame, profiles_dir, path) -> IntervalCalibration:
    """Write the GPU calibration of an evaluation (:func:`gpu_calibration`) to ``path``.

    Args:
        predictions: the GPU evaluation's rows.
        profiles_dir: the validated GPU profile tables evaluated (their SHA-256 is recorded, so
            a bundle refuses a calibration of other tables).
        path: the JSON file to write.

    Returns:
        The calibration written.

    Raises:
        CalibrationError: no usable ScaleDL prediction.
    """
    calibration = gpu_calibration(
        predictions, tables_sha256(Path(profiles_dir)), f"{Path(path).parent}/gpu_predictions"
    )
    calibration.write(Path(path))
    return calibration
