import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from metrics_factory import make_metrics  # noqa: E402

from scaledl.report.formatting import (  # noqa: E402
    interval_text,
    loglog_identity,
    ms,
    pct,
    png_data_uri,
    ratio,
    reached_text,
)


def test_numbers_are_written_one_way():
    assert pct(0.03125) == "3.1%" and pct(0.03125, 2) == "3.12%" and pct(None) == "n/a"
    assert pct(None, missing="not measured") == "not measured"
    assert ratio(6.0) == "6.00x" and ratio(None) == "n/a" and ms(0.0123) == "12.3 ms"
    assert [reached_text(r) for r in (True, False, None)] == ["yes", "NO", "n/a"]
    assert reached_text(False, markdown=True) == "no"
    c = make_metrics().significance.splits["id"].comparisons[0]
    assert interval_text(c) == "-17.5 points [-18.5, -16.5]"


def test_png_uri_and_loglog_axes(tmp_path):
    fig, ax = plt.subplots()
    loglog_identity(ax, 0.01, 1.0, title="t")
    assert ax.get_xscale() == ax.get_yscale() == "log" and ax.get_xlim() == (0.01, 1.0)
    assert ax.get_title() == "t" and len(ax.lines) == 1
    fig.savefig(tmp_path / "f.png")
    plt.close(fig)
    assert png_data_uri(tmp_path / "f.png").startswith("data:image/png;base64,iVBOR")
