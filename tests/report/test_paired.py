from metrics_factory import make_metrics

from scaledl.report.paired import paired_context, significance_markdown, split_label


def test_split_labels():
    assert split_label("ood/bert") == "leave out bert" and split_label("id") == "in-distribution"


def test_context_holds_the_tables_of_the_template():
    ctx = paired_context(make_metrics())
    assert ctx["level"] == "95%" and ctx["seeds"] == 5
    first = ctx["splits"][0]
    assert first["label"] == "in-distribution" and first["label_repeats"] == "2.0"
    assert first["rows"][0][:2] == ["scaledl vs additive", "2.5%"]
    assert ctx["diagnosis_skipped"] == "no GNN on a prior was evaluated"
    curves = ctx["learning_curves"]
    assert curves and curves[0]["rows"][-1][0] == "doptimal@20 vs random@40"


def test_markdown_states_verdicts():
    lines = significance_markdown(make_metrics())
    assert lines[2].startswith("| split | scaledl vs additive |")
    assert "| in-distribution | -17.5 points [-18.5, -16.5] better |" in "\n".join(lines)
