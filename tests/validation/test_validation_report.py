from scaledl.validation.report import (
    ExpectationOutcome,
    Flag,
    TableSummary,
    ValidationReport,
    render_html,
)


def test_page_lists_every_section_and_escapes_values():
    report = ValidationReport(
        tables={"runs": TableSummary("runs.parquet", 3, 2, 1, {"status <failed>": 1})},
        expectations=[ExpectationOutcome("runs", "row", "expect_x", "iteration_ms", False, 3, 1,
                                         ["<script>"])],
        flags=[Flag("runs", "r1", "flag_high_cv", "cv", "0.3", "0.2")],
    )  # fmt: skip
    html = render_html(report)
    assert '<span class="fail">FAILED</span> &mdash; 1 row(s) quarantined, 1 flag(s)' in html
    for title in ("Table-level failures", "Tables", "Failed expectations", "All expectations",
                  "Flags (rows kept)", "Paths", "Configuration"):  # fmt: skip
        assert f"<h2>{title}</h2>" in html
    assert "<td>runs</td>" in html and "status &lt;failed&gt;: 1" in html
    assert "&lt;script&gt;" in html and "<script>" not in html
    assert html.count("<p>None.</p>") == 2 and "<p>Defaults.</p>" in html
