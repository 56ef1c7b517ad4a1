from pathlib import Path

import numpy as np
import pytest

from scaledl.evaluation.external import NEUSIGHT_METHODS, evaluate_neusight, evaluate_vidur

ROOT = Path(__file__).resolve().parents[2] / "external"


@pytest.mark.skipif(not (ROOT / "neusight" / "label").is_dir(), reason="no NeuSight data")
def test_neusight_finite_mre_for_every_gpu():
    metrics, pred = evaluate_neusight(ROOT / "neusight")
    gpus = sorted(pred["gpu"].unique())
    assert len(gpus) >= 2 and sorted(metrics["per_gpu"]) == gpus
    for gpu in gpus:
        for method in NEUSIGHT_METHODS:
            mre = metrics["per_gpu"][gpu][method]["mre"]
            assert np.isfinite(mre) and mre >= 0
    # Leave-one-model-out: every workload predicted exactly once per method.
    assert len(pred) == len(NEUSIGHT_METHODS) * metrics["n_workloads"]
    assert (pred["pred_ms"] > 0).all()


@pytest.mark.skipif(not (ROOT / "vidur" / "network").is_dir(), reason="no Vidur data")
def test_vidur_mre_per_system():
    out = evaluate_vidur(ROOT / "vidur" / "network")
    assert out["per_system"]
    for variants in out["per_system"].values():
        assert all(np.isfinite(v["mre"]) for v in variants.values())
