"""Evaluation on measurements published by others: Vidur's NCCL all-reduce times.

**Vidur** (Agrawal et al., MLSys 2024; https://github.com/microsoft/vidur, MIT licence): measured
NCCL all-reduce times; the alpha-beta model's MRE per system comes from
:func:`scaledl.external.vidur.evaluate_allreduce_model` unchanged.

NeuSight's GPU measurements are no longer evaluated here by a side model: they are imported as
profiles (:mod:`scaledl.external.neusight_tables`) and evaluated through the product's own
models by :mod:`scaledl.evaluation.gpu`.
"""

from __future__ import annotations

from pathlib import Path

from scaledl.external.vidur import evaluate_allreduce_model, load_vidur_allreduce


def evaluate_vidur(root: Path | str) -> dict:
    """Alpha-beta all-reduce model MRE per system on Vidur's NCCL measurements.

    Args:
        root: the Vidur ``network`` folder.

    Returns:
        ``{"source", "per_system": {system: {variant: {"mre", "rmse_ms", "n_test"}}},
        "mean": {variant: mre}}``.
    """
    table = evaluate_allreduce_model(load_vidur_allreduce(root))
    per_system: dict = {}
    for row in table.itertuples():
        per_system.setdefault(row.system, {})[row.variant] = {
            "mre": float(row.mre),
            "rmse_ms": float(row.rmse_ms),
            "n_test": int(row.n_test),
        }
    return {
        "source": "Vidur (microsoft/vidur, MLSys 2024, MIT licence)",
        "per_system": per_system,
        "mean": {v: float(g["mre"].mean()) for v, g in table.groupby("variant")},
    }
