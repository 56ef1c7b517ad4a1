"""Predictor registry: versioned, checksummed bundles and the consumer-facing Predictor."""

from scaledl.registry.bundle import (
    BundleError,
    IncompatibleBundleError,
    latest_bundle,
    list_predictors,
    read_manifest,
    register_bundle,
    resolve_bundle,
    save_bundle,
    tables_sha256,
)
from scaledl.registry.predictor import Predictor, load_predictor

__all__ = [
    "BundleError",
    "IncompatibleBundleError",
    "Predictor",
    "latest_bundle",
    "list_predictors",
    "load_predictor",
    "read_manifest",
    "register_bundle",
    "resolve_bundle",
    "save_bundle",
    "tables_sha256",
]
