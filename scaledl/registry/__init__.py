"""Predictor registry: versioned, checksummed bundles (read by :mod:`scaledl.prediction`)."""

from scaledl.registry.bundle import (
    BundleError,
    IncompatibleBundleError,
    latest_bundle,
    list_predictors,
    read_manifest,
    register_bundle,
    resolve_bundle,
)
from scaledl.registry.kinds import save_bundle

__all__ = [
    "BundleError",
    "IncompatibleBundleError",
    "latest_bundle",
    "list_predictors",
    "read_manifest",
    "register_bundle",
    "resolve_bundle",
    "save_bundle",
]
