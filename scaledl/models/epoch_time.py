"""The fitted epoch-time model, predicting with NumPy only.

``epoch_s = steps x iteration_s + a + b * steps + c * steps * batch``: :class:`EpochTime` holds
the overhead's coefficients that :class:`~scaledl.models.epoch.EpochModel` fits (SciPy's
non-negative least squares). A predictor bundle's ``params.json`` loads into it, so loading and
predicting never import SciPy.
"""

from __future__ import annotations

import numpy as np
from pydantic import NonNegativeFloat

from scaledl.io.schema import Artefact, parse_artefact
from scaledl.models.fitted import check_fitted


class EpochTime:
    """Per-epoch overhead model, fitted state only.

    Attributes:
        coef_: ``[a_s, b_s_per_step, c_s_per_sample]``, set by
            :meth:`~scaledl.models.epoch.EpochModel.fit` (or :meth:`from_dict`).
    """

    @staticmethod
    def _design(steps: np.ndarray, batch: np.ndarray) -> np.ndarray:
        steps = np.asarray(steps, dtype=float)
        return np.column_stack([np.ones_like(steps), steps, steps * np.asarray(batch, float)])

    def predict(self, iteration_s, steps, batch) -> np.ndarray:
        """Epoch seconds of shape (n,) from predicted iteration seconds.

        Raises:
            scaledl.models.fitted.NotFittedError: not fitted.
        """
        check_fitted(self, "coef_")
        base = np.asarray(steps, float) * np.asarray(iteration_s, float)
        return base + self._design(steps, batch) @ np.asarray(self.coef_)

    def to_dict(self) -> dict:
        """JSON-safe parameters (:class:`EpochParams`).

        Raises:
            scaledl.models.fitted.NotFittedError: not fitted.
        """
        check_fitted(self, "coef_")
        return EpochParams(coef=tuple(self.coef_)).model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: dict) -> EpochTime:
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
