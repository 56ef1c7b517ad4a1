"""Epoch time from iteration time: ``epoch_s = steps x iteration_s + overhead_s``.

The per-epoch overhead (data loading and collation, sampler set-up, the last partial batch) is
learned on the training workloads as a non-negative linear function of the work an epoch does
outside the timed iterations::

    overhead_s = a + b * steps_per_epoch + c * steps_per_epoch * batch_size

fitted to ``epoch_s - steps_per_epoch * iteration_s`` (measured) by non-negative least squares
(``scipy.optimize.nnls``).
"""

from __future__ import annotations

import numpy as np
from pydantic import NonNegativeFloat
from scipy.optimize import nnls

from scaledl.io.schema import Artefact, parse_artefact
from scaledl.models.fitted import check_fitted


class EpochModel:
    """Per-epoch overhead model.

    Attributes:
        coef_: ``[a_s, b_s_per_step, c_s_per_sample]``, set by :meth:`fit` (or
            :meth:`from_dict`).
    """

    @staticmethod
    def _design(steps: np.ndarray, batch: np.ndarray) -> np.ndarray:
        steps = np.asarray(steps, dtype=float)
        return np.column_stack([np.ones_like(steps), steps, steps * np.asarray(batch, float)])

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

    def predict(self, iteration_s, steps, batch) -> np.ndarray:
        """Epoch seconds of shape (n,) from predicted iteration seconds.

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
        """
        check_fitted(self, "coef_")
        base = np.asarray(steps, float) * np.asarray(iteration_s, float)
        return base + self._design(steps, batch) @ np.asarray(self.coef_)

    def to_dict(self) -> dict:
        """JSON-safe parameters (:class:`EpochParams`).

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
        """
        check_fitted(self, "coef_")
        return EpochParams(coef=tuple(self.coef_)).model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: dict) -> EpochModel:
        """Inverse of :meth:`to_dict`: a fitted model.

        Raises:
            ValueError: not an :class:`EpochParams` mapping (``coef`` not three finite,
                non-negative numbers: the fit's non-negative least squares gives no other; a
                negative overhead would predict a negative epoch), naming the field and value.
        """
        params = parse_artefact(EpochParams, data, "epoch model")
        model = cls()
        model.coef_ = [float(c) for c in params.coef]
        return model


class EpochParams(Artefact):
    """The epoch model in ``params.json`` (key ``epoch``).

    Attributes:
        coef: ``[a_s, b_s_per_step, c_s_per_sample]`` of the overhead, each >= 0.
    """

    coef: tuple[NonNegativeFloat, NonNegativeFloat, NonNegativeFloat]
