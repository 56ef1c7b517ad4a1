"""Per-family interval coverage re-scored on predictions (scripts/family_interval_coverage.py)."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]


def _script():
    path = REPO / "scripts" / "family_interval_coverage.py"
    spec = importlib.util.spec_from_file_location("family_interval_coverage", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _predictions(families: int, n: int = 10) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    parts = []
    for i in range(families):
        for seed in (0, 1):
            pred = np.exp(rng.uniform(-4, 0, n))
            true = pred * np.exp(rng.normal(0, 0.2, n))
            parts.append(pd.DataFrame({
                "split": f"ood/f{i}", "method": "scaledl", "seed": seed, "family": f"f{i}",
                "workload_id": [f"f{i}-{j}" for j in range(n)],
                "true_iteration_s": true, "pred_iteration_s": pred,
                "true_epoch_s": 2 * true, "pred_epoch_s": 2 * pred,
            }))  # fmt: skip
    parts.append(parts[0].assign(split="id"))
    return pd.concat(parts, ignore_index=True)


def test_five_families_are_scored_per_family_with_their_method(tmp_path, capsys):
    path = tmp_path / "predictions.parquet"
    _predictions(5).to_parquet(path)
    out = tmp_path / "rows.json"
    assert _script().main([str(path), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    # 5 families x 2 targets x 2 views (first seed, seed mean).
    assert len(data["rows"]) == 20
    assert {r["calibration"] for r in data["rows"]} == {"normal_prediction_bound"}
    assert {r["families"] for r in data["rows"]} == {4}
    first = [r for r in data["rows"] if r["view"].startswith("first seed")]
    assert all(r["n"] == 10 and r["ci_low"] <= r["coverage"] <= r["ci_high"] for r in first)
    assert data["new_family"]["families"] == 5
    printed = capsys.readouterr().out
    assert "new family, seed-mean view (5 families, normal_prediction_bound)" in printed
    width = data["new_family"]["relative_width"]
    assert f"relative width {width:.1%}" in printed


def test_no_leave_one_family_out_rows_exit_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "predictions.parquet"
    _predictions(3).query("split == 'id'").to_parquet(path)
    assert _script().main([str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"{path}: no leave-one-family-out prediction of 'scaledl'"


def test_missing_columns_and_a_folder_are_named(tmp_path, capsys):
    path = tmp_path / "predictions.parquet"
    _predictions(5).drop(columns="seed").to_parquet(path)
    assert _script().main([str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{path}: columns ['seed'] missing")
    assert _script().main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().startswith(f"{tmp_path}: not a file")
