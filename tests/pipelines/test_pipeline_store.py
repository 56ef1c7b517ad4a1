import json

import pytest

from pipelines.defs.resources import LocalPredictorStore
from scaledl.registry import BundleError


def test_current_bundle_follows_the_latest_pointer(tmp_path):
    store = LocalPredictorStore(root=str(tmp_path / "predictors"))
    assert store.current_bundle(tmp_path) is None
    name_dir = tmp_path / "predictors" / "scaledl"
    for version in ("v1", "v2"):
        (name_dir / version).mkdir(parents=True)
        (name_dir / version / "manifest.json").write_text(json.dumps({"version": version}))
    (name_dir / "latest").write_text("v1\n")
    assert store.current_bundle(tmp_path) == name_dir / "v1"
    (name_dir / "latest").write_text("v3\n")
    with pytest.raises(BundleError, match="names version 'v3', which has no manifest.json"):
        store.current_bundle(tmp_path)


def test_empty_root_defaults_to_the_settings_registry(tmp_path):
    store = LocalPredictorStore()
    assert store.name_dir(tmp_path / "predictors") == tmp_path / "predictors" / "scaledl"
