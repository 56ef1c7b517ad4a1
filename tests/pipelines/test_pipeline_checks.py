from metrics_factory import make_metrics

from pipelines.defs.checks import target_summary


def test_target_check_reads_the_targets_table(tmp_path):
    path = make_metrics().write(tmp_path / "metrics.json")
    passed, meta = target_summary(path)
    # make_metrics misses two OOD ratio targets against analytical (2x and 2x, not 6x / 5x).
    assert passed is False and meta["missed"] >= 2 and meta["reached"] >= 4
    assert "OOD MRE of ScaleDL >= 6x lower than analytical" in meta["targets"].value
    passed, meta = target_summary(tmp_path / "missing.json")
    assert passed is False and "missing.json" in meta["error"]
