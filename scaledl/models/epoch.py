"""Epoch time from iteration time: ``epoch_s = steps x iteration_s + overhead_s``.

The per-epoch overhead (data loading and collation, sampler set-up, the last partial batch) is
learned on the training workloads as a non-negative linear function of the work an epoch does
outside the timed iterations::

    overhead_s = a + b * steps_per_epoch + c * steps_per_epoch * batch_size

fitted to ``epoch_s - steps_per_epoch * iteration_s`` (measured) by non-negative least squares
(``scipy.optimize.nnls``). The fitted state and the prediction are
:class:`~scaledl.models.epoch_time.EpochTime` (NumPy only, what a loaded predictor holds).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls

from scaledl.models.epoch_time import EpochParams, EpochTime

__all__ = ["EpochModel", "EpochParams"]


class EpochModel(EpochTime):
    """Per-epoch overhead model: :class:`~scaledl.models.epoch_time.EpochTime` with its fit."""

    def fit(self, epoch_s, iteration_s, steps, batch) -> EpochModel:
        """Fit the overhead on measured epochs.

        Args:
            epoch_s: measured epoch seconds, shape (n,).
            iteration_s: measured iteration seconds, shape (n,).
            steps: iterations per epoch, shape (n,).
            batch: per-rank batch size, shape (n,).

        Returns:
            self.

        Raises:
            ValueError: no sample.
        """
        epoch_s = np.asarray(epoch_s, dtype=float)
        if epoch_s.size == 0:
            raise ValueError("epoch model: no training sample")
        overhead = epoch_s - np.asarray(steps, float) * np.asarray(iteration_s, float)
        coef, _ = nnls(self._design(steps, batch), np.clip(overhead, 0.0, None))
        self.coef_ = [float(c) for c in coef]
        return self
