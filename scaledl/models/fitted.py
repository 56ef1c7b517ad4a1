"""The fitted-state check of ScaleDL's composite models, without importing scikit-learn.

The composite models (:class:`~scaledl.models.layerwise.LayerwiseModel`, the methods of
:mod:`scaledl.models.methods`, the all-reduce and epoch models) follow scikit-learn's contract
(fitted attributes end in ``_`` and are set by ``fit``) and raise :class:`NotFittedError`, a
``ValueError`` and an ``AttributeError`` as :class:`sklearn.exceptions.NotFittedError` is. It is
ScaleDL's own class so that the modules a loaded predictor predicts with do not import
scikit-learn (about 1 s); scikit-learn's own estimators (the layer-time and operator
regressors) still raise scikit-learn's.
"""

from __future__ import annotations


class NotFittedError(ValueError, AttributeError):
    """A composite model was used before ``fit`` (or before its fitted parts were set)."""


def check_fitted(model: object, *attributes: str) -> None:
    """Raise :class:`NotFittedError` unless ``model`` has every attribute.

    Args:
        model: the model.
        *attributes: fitted attributes (names ending in ``_``) that ``fit`` sets.

    Raises:
        NotFittedError: an attribute is missing (the message, as scikit-learn's, says to call
            ``fit`` first).
    """
    missing = [a for a in attributes if not hasattr(model, a)]
    if missing:
        raise NotFittedError(
            f"This {type(model).__name__} instance is not fitted yet (no {', '.join(missing)}). "
            "Call 'fit' with appropriate arguments before using it."
        )
