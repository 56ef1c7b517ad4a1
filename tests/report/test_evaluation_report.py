import base64

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from metrics_factory import make_metrics  # noqa: E402

from scaledl.report.evaluation_report import render_report  # noqa: E402
from scaledl.report.targets import target_rows  # noqa: E402


def test_target_rows_values():
    rows = {r.text: r for r in target_rows(make_metrics())}
    assert rows["ID MRE <= 3% (ScaleDL, iteration)"].met is True
    assert rows["ID MRE <= max(3%, 1.5 x label reproducibility MRE)"].met is True
    assert rows["OOD MRE <= 8% (ScaleDL, mean over families)"].met is True
    assert rows["OOD MRE of ScaleDL >= 6x lower than additive"].met is True
    assert rows["OOD MRE of ScaleDL >= 6x lower than analytical"].met is False
    assert rows["OOD RMSE of ScaleDL >= 5x lower than analytical"].measured == "2.00x"
    # The halving comparison (paired by seed): D-optimal at 20 has 10.0% against random's 12.0%
    # at 40, an interval of -2 +- 1 points: better.
    d = rows["D-optimal reaches random's final MRE with at most half the workloads"]
    assert d.met is True and "doptimal@20 vs random@40" in d.measured
    assert "-2.0 points [-3.0, -1.0]" in d.measured and d.measured.endswith("better")
    # The paired targets: better on ID and OOD against additive; not compared elsewhere.
    beat = rows["ScaleDL beats additive on in-distribution (paired 95% interval < 0)"]
    assert beat.met is True and beat.measured == "-17.5 points [-18.5, -16.5]: better"
    cp = rows["ScaleDL beats critical_path on extrapolation (paired 95% interval < 0)"]
    assert cp.met is None and cp.measured == "not compared"
    gpu = [r for r in rows.values() if r.text.startswith("GPU leave-one-model-out")][0]
    assert gpu.met is None and gpu.measured.startswith("not evaluated")
    worse = {r.text: r for r in target_rows(make_metrics(scaledl_ood=0.1))}
    assert worse["OOD MRE <= 8% (ScaleDL, mean over families)"].met is False


def test_report_embeds_images_and_targets(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2])
    png = tmp_path / "f.png"
    fig.savefig(png)
    plt.close(fig)
    metrics = make_metrics()
    html = render_report(metrics, {"pred_vs_measured": png})
    assert "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode() in html
    assert "<table class='targets'>" in html and "ID MRE &lt;= 3%" in html
    assert html.count("<tr>") > len(target_rows(metrics))
    assert "NO" in html  # a target not reached is shown as such
    assert "mean over families" in html
    assert "Paired comparisons" in html and "scaledl vs additive" in html
    assert "doptimal@20 vs random@40" in html  # the learning curves' halving comparison
    assert "2.00% over 8 workloads (world size 1: 1.00%, world size 2: 3.00%)" in html
    assert "; 4.00% before the host-drift correction (12 launches corrected)" in html


def test_a_split_without_comparisons_says_why():
    from metrics_factory import metrics_dict

    from scaledl.evaluation.results import Metrics

    data = metrics_dict()
    data["significance"]["splits"]["ood/t5"] = {
        "n_workloads": 1, "seeds": 5, "label_repeats": 2.0,
        "mre_per_seed": {"scaledl": [0.1] * 5}, "comparisons": [],
    }  # fmt: skip
    html = render_report(Metrics.from_dict(data, source="<test>"), {})
    assert "leave out t5 (1 workloads" in html
    assert "Not compared: a paired interval needs at least 2 test workloads." in html
