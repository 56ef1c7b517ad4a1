from metrics_factory import make_metrics

from scaledl.evaluation.targets import TargetResult, gpu_targets
from scaledl.report.targets import target_rows


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


def test_gpu_rows_are_the_gpu_evaluation_entries():
    gpu = {"leave_one_model_out": _block({"A": 0.05, "B": 0.06}, 0.2),
           "leave_one_gpu_out": _block({"A": 0.13, "B": 0.12}, 0.3)}  # fmt: skip
    entries = gpu_targets(gpu)
    assert [e.name for e in entries] == [
        "gpu_lomo_mean",
        "gpu_lomo_worst",
        "gpu_lomo_vs_analytical",
        "gpu_logo_mean",
    ]
    assert entries[2].value == 0.2 / 0.055 and entries[2].extra["mre_analytical"] == 0.2
    assert entries[1].extra == {"gpus_within": 2, "gpus": 2}


def test_target_rows_follow_the_table_order():
    metrics = make_metrics()
    rows = target_rows(metrics)
    assert rows[0] == TargetResult(
        name="id_mre",
        text="ID MRE <= 3% (ScaleDL, iteration)",
        threshold=0.03,
        value=0.025,
        measured="2.50%",
        met=True,
    )
    assert rows[1].measured == "2.50% vs max(3%, 1.5 x 2.00%)"
    assert rows[1].extra == {"label_noise_mre": 0.02}
    names = [r.text for r in rows]
    assert names.index("OOD MRE <= 8% (ScaleDL, mean over families)") < names.index(
        "ScaleDL beats additive on in-distribution (paired 95% interval < 0)"
    )
    recorded = metrics.intervals.targets  # written by the evaluation from the same table
    assert rows[-len(recorded) :] == recorded
