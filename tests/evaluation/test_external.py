from pathlib import Path

import numpy as np
import pytest

from scaledl.evaluation.external import evaluate_vidur

ROOT = Path(__file__).resolve().parents[2] / "external"


@pytest.mark.skipif(not (ROOT / "vidur" / "network").is_dir(), reason="no Vidur data")
def test_vidur_mre_per_system():
    out = evaluate_vidur(ROOT / "vidur" / "network")
    assert out["per_system"]
    for variants in out["per_system"].values():
        assert all(np.isfinite(v["mre"]) for v in variants.values())
