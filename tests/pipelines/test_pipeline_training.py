from pipelines.defs.assets.training import comparison_metadata
from scaledl.stats.significance import paired_comparison


def test_comparison_metadata_names_the_workloads_compared():
    c = paired_comparison([0.10, 0.12, 0.11, 0.09], [0.20, 0.22, 0.19, 0.21], "v2", "v1")
    meta = comparison_metadata(c)
    assert meta["held_out_workloads"] == 4 and meta["verdict"] == "better"
    assert meta["mre_difference"].value == c.mre_difference
    assert "difference (95% CI" in meta["comparison"].value
