from metrics_factory import make_metrics, metrics_dict

from scaledl.evaluation.results import Metrics
from scaledl.report.summary import gpu_block, results_markdown


def test_markdown_holds_every_split_and_target():
    text = results_markdown(make_metrics(scaledl_ood=0.07), "x.json")
    assert text.startswith("Generated from `x.json`: 10 validated workloads")
    assert "| in-distribution (iteration MRE / RMSE) | 2.5% / 10.0 ms | 20.0% / 100.0 ms |" in text
    assert "| **leave-one-family-out mean** | 7.0% / 10.0 ms | 50.0% / 100.0 ms |" in text
    assert "| extrapolation (largest tokens/step) | 10.0% / 50.0 ms | n/a |" in text
    assert "| doptimal | 20.0% ± 1.0% |" in text
    assert "| doptimal: prior | 25.0% |" in text
    assert (
        "Halving (paired by seed): doptimal@20 vs random@40 -2.0 points [-3.0, -1.0]: better."
        in text
    )
    assert "| in-distribution | -17.5 points [-18.5, -16.5] better | n/a | n/a | n/a |" in text
    assert "Real GPU data (imported profiles): skipped (no imported GPU profiles" in text
    assert "Vidur all-reduce: skipped (include_external is false)." in text
    assert "| OOD MRE <= 8% (ScaleDL, mean over families) | 7.00% | yes |" in text


def test_interval_line_says_how_left_out_families_were_calibrated():
    pooled = results_markdown(make_metrics(), "x.json")
    assert "one score per family" not in pooled  # a metrics file of the pooled calibration
    data = metrics_dict()
    for by in data["intervals"]["ood"]["per_family"].values():
        by["scaledl"]["iteration"]["calibration_families"] = 4
    text = results_markdown(Metrics.from_dict(data), "x.json")
    assert "each left-out family calibrated on the other families, one score per family" in text


def test_gpu_block_of_a_skipped_gpu_evaluation_says_why():
    assert gpu_block(make_metrics()) == (
        "The GPU evaluation was skipped: no imported GPU profiles (gpu_profiles)."
    )
