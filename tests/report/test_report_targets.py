from metrics_factory import make_metrics

from scaledl.evaluation.targets import gpu_targets
from scaledl.report.targets import TargetRow, gpu_target_rows, target_rows


def _block(scaledl: dict[str, float], analytical: float) -> dict:
    per_gpu = {
        g: {"scaledl": {"mre": v, "n": 4}, "analytical": {"mre": analytical, "n": 4}}
        for g, v in scaledl.items()
    }
    return {
        "per_gpu": per_gpu,
        "mean_over_gpus": {"scaledl": sum(scaledl.values()) / len(scaledl),
                           "analytical": analytical},
        "max_over_gpus": {"scaledl": max(scaledl.values()), "analytical": analytical},
    }  # fmt: skip


def test_gpu_rows_from_the_table_match_the_gpu_evaluation_rows():
    for gpu in (
        {"leave_one_model_out": _block({"A": 0.05, "B": 0.06}, 0.2),
         "leave_one_gpu_out": _block({"A": 0.13, "B": 0.12}, 0.3)},
        {"leave_one_model_out": _block({"A": 0.05, "B": 0.11}, 0.1)},
    ):  # fmt: skip
        assert gpu_target_rows(gpu) == [TargetRow(**r) for r in gpu_targets(gpu)]


def test_target_rows_follow_the_table_order():
    metrics = make_metrics()
    rows = target_rows(metrics)
    assert rows[0] == TargetRow("ID MRE <= 3% (ScaleDL, iteration)", "2.50%", True)
    assert rows[1].measured == "2.50% vs max(3%, 1.5 x 2.00%)"
    names = [r.target for r in rows]
    assert names.index("OOD MRE <= 8% (ScaleDL, mean over families)") < names.index(
        "ScaleDL beats additive on in-distribution (paired 95% interval < 0)"
    )
    recorded = metrics.intervals.targets  # written by the evaluation from the same table
    assert rows[-len(recorded) :] == [TargetRow(**t.model_dump()) for t in recorded]
