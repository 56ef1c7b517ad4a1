import pandas as pd
import pytest

from scaledl.evaluation.results import GnnDiagnosis, MetricsError, Skipped
from scaledl.evaluation.stages import EvaluationRun, FitLog, StageClock, diagnosis_stage


def test_fit_log_and_clock_fill_runtime():
    fits = FitLog()
    fits.record("additive", 1.5, fits=3)
    fits.record("additive", 0.5)
    assert fits.fits == {"additive": 4} and fits.seconds == {"additive": 2.0}
    clock = StageClock()
    with clock.stage("load"):
        pass
    runtime = clock.runtime(0.25, fits, total=3.0)
    assert runtime.load >= 0 and runtime.sweep == 0.0 and runtime.layerwise_stages == 0.25
    assert runtime.fit_seconds == {"additive": 2.0} and runtime.total == 3.0


def test_diagnosis_stage_returns_its_typed_section():
    run = EvaluationRun(data=None, config=None, source="out/metrics.json")
    assert isinstance(diagnosis_stage(run, pd.DataFrame()), Skipped)
    rows = pd.DataFrame(
        {"split": ["id", "ood/bert", "ood/vit"], "method": "scaledl", "seed": 0,
         "train_rmse_log": [0.1, 0.2, 0.4], "val_rmse_log": 0.3, "prior_test_mre": 0.2,
         "correction_abs": 0.05, "epochs": 10, "best_epoch": 4}
    )  # fmt: skip
    section = diagnosis_stage(run, rows)
    assert isinstance(section, GnnDiagnosis) and set(section.splits) == {"id", "ood"}
    assert section.splits["ood"]["scaledl"].train_rmse_log == pytest.approx(0.3)
    with pytest.raises(MetricsError, match="out/metrics.json: key 'gnn_diagnosis.splits"):
        diagnosis_stage(run, rows.assign(epochs=float("nan")))
