import numpy as np
import pandas as pd
from metrics_factory import intervals, make_metrics, metrics_dict

from scaledl.evaluation.results import Metrics
from scaledl.report.evaluation_report import render_report
from scaledl.report.headline import error_rows, headline_figure, summary_html, verdict


def test_verdict_states_the_numbers_and_a_conclusion():
    text = verdict(make_metrics())
    # ID MRE 2.5% vs noise floor 2.0% vs additive 20%; OOD 5% vs additive 50%.
    assert "MRE of 2.5%, 1.2x the label noise floor of 2.0%" in text
    assert "the best baseline, additive, has 20.0%" in text
    assert "On families it never saw, the MRE is 5.0% (best baseline analytical 20.0%)" in text
    assert "90% intervals held the measured time for 90.0% of 20 ID workloads" in text
    assert "85.0% of left-out a" in text
    assert text.endswith(
        "Verdict: better than every baseline on held-out workloads; within 1.5x the noise "
        "floor; its intervals are calibrated (85%-95% ID, 80%-100% each left-out family) on "
        "every split measured."
    )


def test_verdict_says_when_intervals_miss_the_band():
    data = metrics_dict()
    data["intervals"] = intervals(id_coverage=0.7)
    text = verdict(Metrics.from_dict(data))
    assert "miss the coverage band on some split" in text


def test_verdict_names_the_normal_bound_of_few_families():
    data = metrics_dict()
    for by in data["intervals"]["ood"]["per_family"].values():
        for summary in by["scaledl"].values():
            summary.update(calibration_families=1, family_calibration="normal_prediction_bound")
    text = verdict(Metrics.from_dict(data))
    n = len(data["intervals"]["ood"]["per_family"])
    assert (
        f"({n} of {n} left-out families calibrated by a normal prediction bound over the other "
        "1: too few for the conformal quantile)"
    ) in text
    assert "normal prediction bound" not in verdict(make_metrics())


def test_error_rows_put_errors_next_to_the_noise_floor():
    rows = error_rows(make_metrics())
    assert rows[0] == [
        "ID (held-out workloads)",
        "2.5%",
        "additive 20.0%",
        "2.0%",
        "1.2x",
        "90.0% of 20",
        "30.0%",
    ]
    assert rows[1][0] == "left-out families (mean)" and rows[1][5] == "85.0% of 10"
    assert rows[2][5] == "n/a"  # extrapolation intervals skipped


def test_headline_figure_and_summary_open_the_report(tmp_path):
    rng = np.random.default_rng(0)
    true = np.exp(rng.uniform(-4, 0, 12))
    pred = true * np.exp(rng.normal(0, 0.1, 12))
    frame = pd.DataFrame(
        {
            "split": ["id"] * 6 + ["ood/a"] * 6,
            "method": "scaledl",
            "true_iteration_s": true,
            "pred_iteration_s": pred,
            "pred_iteration_s_low": pred * 0.8,
            "pred_iteration_s_high": np.r_[pred[:11] * 1.2, np.inf],
        }
    )
    path = headline_figure(frame, tmp_path / "headline.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    metrics = make_metrics()
    html = summary_html(metrics, {"headline": path})
    assert html.startswith("<h2 id='summary'>Summary</h2>")
    assert "alt='headline'" in html and "noise floor" in html
    report = render_report(metrics, {"headline": path})
    assert report.index("id='summary'") < report.index("id='targets'")
    assert report.count("alt='headline'") == 1  # not repeated among the figures
