import json

import dagster as dg

from pipelines.defs.assets.imported import imported_profiles
from pipelines.defs.config import ScaledlSettings


def test_a_preset_without_external_data_skips_the_import(tmp_path):
    settings = ScaledlSettings(preset="smoke", data_dir=str(tmp_path))
    space = {"name": "smoke", "evaluation": {"include_external": False}}
    settings.layout.search_space_path.parent.mkdir(parents=True)
    settings.layout.search_space_path.write_text(json.dumps(space))
    out = imported_profiles(context=dg.build_asset_context(), settings=settings)
    assert "include_external: false" in out.metadata["skipped"]
    assert not (tmp_path / "imported").exists()
