import numpy as np
import pandas as pd
from metrics_factory import make_metrics

from scaledl.report.figures import draw_all


def test_draw_all_draws_what_the_metrics_allow(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for split in ("id", "ood/a"):
        for method in ("scaledl", "additive"):
            true = np.exp(rng.uniform(-4, 0, 4))
            pred = true * np.exp(rng.normal(0, 0.1, 4))
            rows.append(pd.DataFrame({
                "split": split, "method": method, "seed": 0, "family": "a",
                "true_iteration_s": true, "pred_iteration_s": pred,
                "pred_iteration_s_low": pred * 0.8, "pred_iteration_s_high": pred * 1.2,
            }))  # fmt: skip
    paths = draw_all(make_metrics(), pd.concat(rows, ignore_index=True), tmp_path / "figures")
    assert {"headline", "pred_vs_measured", "ood_mre", "comparisons"} <= set(paths)
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths.values())
