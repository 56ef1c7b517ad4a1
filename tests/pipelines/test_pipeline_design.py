"""The retrain augmentation's uncertainty: the registered predictor's interval widths."""

import pytest

from pipelines.defs.assets.design import registered_uncertainty
from scaledl.registry import BundleError


def test_nothing_registered_means_the_unweighted_augmentation(tmp_path):
    function, why = registered_uncertainty(tmp_path / "predictors" / "scaledl")
    assert function is None
    assert why == "no registered predictor: unweighted augmentation"


def test_a_latest_naming_a_missing_bundle_is_an_error(tmp_path):
    registry = tmp_path / "scaledl"
    registry.mkdir()
    (registry / "latest").write_text("20260101T000000000000Z\n")
    with pytest.raises(BundleError, match="has no manifest.json"):
        registered_uncertainty(registry)
