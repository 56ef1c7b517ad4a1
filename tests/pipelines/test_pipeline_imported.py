import dagster as dg

from pipelines.defs.assets.imported import imported_profiles
from pipelines.defs.config import ScaledlSettings


def test_a_preset_without_external_data_skips_the_import(tmp_path):
    context = dg.build_asset_context()
    settings = ScaledlSettings(preset="smoke", data_dir=str(tmp_path))
    space = {"name": "smoke", "evaluation": {"include_external": False}}
    out = imported_profiles(context=context, settings=settings, search_space=space)
    assert "include_external: false" in out["skipped"]
    assert not (tmp_path / "imported").exists()
