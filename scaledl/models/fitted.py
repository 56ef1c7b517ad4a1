"""The scikit-learn fitted-state check for ScaleDL's composite models (not ``BaseEstimator``s).

:func:`sklearn.utils.validation.check_is_fitted` needs scikit-learn's estimator tags; the
composite models (:class:`~scaledl.models.layerwise.LayerwiseModel`, the methods of
:mod:`scaledl.models.methods`) follow the same contract (fitted attributes end in ``_`` and are
set by ``fit``) and raise the same :class:`~sklearn.exceptions.NotFittedError` (a ``ValueError``
and an ``AttributeError``) through this function.
"""

from __future__ import annotations

from sklearn.exceptions import NotFittedError


def check_fitted(model: object, *attributes: str) -> None:
    """Raise :class:`~sklearn.exceptions.NotFittedError` unless ``model`` has every attribute.

    Args:
        model: the model.
        *attributes: fitted attributes (names ending in ``_``) that ``fit`` sets.

    Raises:
        sklearn.exceptions.NotFittedError: an attribute is missing (the message, as
            scikit-learn's, says to call ``fit`` first).
    """
    missing = [a for a in attributes if not hasattr(model, a)]
    if missing:
        raise NotFittedError(
            f"This {type(model).__name__} instance is not fitted yet (no {', '.join(missing)}). "
            "Call 'fit' with appropriate arguments before using it."
        )
