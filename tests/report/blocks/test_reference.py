"""The reference block's renderer on the committed ``docs/results/reference.json``."""

import json
from pathlib import Path

from scaledl.report.blocks.reference import _family_interval_rows, reference_markdown

ROOT = Path(__file__).resolve().parents[3]


def test_every_target_of_the_result_is_in_the_block():
    result = json.loads((ROOT / "docs" / "results" / "reference.json").read_text())
    block = reference_markdown(result)
    texts = [t["text"] for t in result["targets"]]
    assert texts == [
        line.split(" | ")[0].removeprefix("| ")
        for line in block.splitlines()
        if line.startswith("| ") and any(line.startswith(f"| {text}") for text in texts)
    ]


def _summary(coverage: float, n: int, width: float | None) -> dict:
    return {"coverage": coverage, "coverage_ci_low": 0.5, "coverage_ci_high": 1.0,
            "median_relative_width": width, "n": n}  # fmt: skip


def test_family_interval_rows_give_coverage_interval_and_the_new_family_width():
    ood = {
        "per_family": {"bert": {"scaledl": {"mre": 0.12}}},
        "mean_mre": {"scaledl": 0.08},
        "intervals": {
            "coverage": 0.9,
            "per_family": {"bert": {"scaledl": {"iteration": _summary(0.85, 20, 0.61)}}},
            "pooled": {"scaledl": {"iteration": _summary(0.95, 40, None)}},
            "new_family": {
                "scaledl": {
                    "families": 14,
                    "low_factor": 0.74,
                    "high_factor": 1.35,
                    "relative_width": 0.61,
                }
            },  # fmt: skip
        },
    }
    lines = _family_interval_rows(ood)
    assert "| bert | 20 | 12.0% | 85.0% [50%, 100%] | 61.0% |" in lines
    assert "| every family, pooled | 40 | 8.0% (mean) | 95.0% [50%, 100%] | unbounded |" in lines
    assert lines[-1] == (
        "A family never seen, calibrated on all 14 families (as the registered predictor is): "
        "90% interval [0.74, 1.35] x the prediction, 61.0% of it wide."
    )
    ood["intervals"]["new_family"]["scaledl"]["family_calibration"] = "normal_prediction_bound"
    assert _family_interval_rows(ood)[-1].endswith(
        "61.0% of it wide (a normal prediction bound over the family scores: too few families "
        "for the conformal quantile)."
    )
    ood["intervals"]["new_family"]["scaledl"]["high_factor"] = None
    assert lines != _family_interval_rows(ood)
    assert _family_interval_rows(ood)[-1].endswith(
        "the 90% interval is unbounded (too few families)."
    )
    del ood["intervals"]
    assert _family_interval_rows(ood)[0].startswith("Unseen-family interval coverage: not in")
