from pathlib import Path

import numpy as np
import pytest

from scaledl.evaluation.vidur import evaluate_allreduce_model, evaluate_vidur
from scaledl.external.vidur import load_vidur_allreduce

ROOT = Path(__file__).resolve().parents[2] / "external"


@pytest.mark.skipif(not (ROOT / "vidur" / "network").is_dir(), reason="no Vidur data")
def test_vidur_mre_per_system():
    out = evaluate_vidur(ROOT / "vidur" / "network")
    assert out["per_system"]
    for variants in out["per_system"].values():
        assert all(np.isfinite(v["mre"]) for v in variants.values())


SYSTEMS = {"a100_dgx", "a100_pairwise_nvlink", "h100_dgx", "h100_pairwise_nvlink"}


@pytest.fixture(scope="module")
def df():
    return load_vidur_allreduce(ROOT / "vidur" / "network")


def test_evaluation_reports_mre_and_improvement(df):
    res = evaluate_allreduce_model(df).set_index(["system", "variant"])
    assert set(res.index.get_level_values(0)) == SYSTEMS
    for system in SYSTEMS:
        base = res.loc[(system, "base"), "mre"]
        best = res.loc[(system, "per_configuration_piecewise"), "mre"]
        assert best <= base + 1e-12
        assert best < 0.10  # measured 0.026-0.064
        assert res.loc[(system, "base"), "bandwidth_gbps"] > 1
    # H100 NVLink (NVSwitch) bus bandwidth is in the hundreds of GB/s
    assert 200 < res.loc[("h100_dgx", "base"), "bandwidth_gbps"] < 600
