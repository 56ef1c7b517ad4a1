"""Evaluation on measurements published by others: Vidur's NCCL all-reduce times.

**Vidur** (Agrawal et al., MLSys 2024; https://github.com/microsoft/vidur, MIT licence): measured
NCCL all-reduce times (read by :func:`scaledl.external.vidur.load_vidur_allreduce`); the
alpha-beta model's MRE per system comes from :func:`evaluate_allreduce_model`.

Evaluation protocol: within each (system, world size, devices per node) sweep, message sizes
are sorted and alternately assigned to train and test (even ranks train, odd ranks test), i.e.
interpolation across message sizes for topologies that were measured. Each system gets one model
over all its topologies, fitted on its training half.

NeuSight's GPU measurements are no longer evaluated here by a side model: they are imported as
profiles (:mod:`scaledl.external.neusight_tables`) and evaluated through the product's own
models by :mod:`scaledl.evaluation.gpu`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scaledl.external.vidur import load_vidur_allreduce
from scaledl.models.allreduce import (
    AlphaBetaAllReduce,
    mean_relative_error,
    select_size_breakpoints,
)


def split_by_message_size(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Alternate message sizes between train and test within each sweep.

    Args:
        df: output of :func:`~scaledl.external.vidur.load_vidur_allreduce`.

    Returns:
        ``(train, test)``: in each (system, world size, devices per node) sweep sorted by size,
        rows of even rank go to train and odd rank to test.
    """
    keys = ["system", "world_size", "devices_per_node"]
    ordered = df.sort_values([*keys, "allreduce_bytes"], kind="stable")
    rank = ordered.groupby(keys).cumcount()
    return ordered[rank % 2 == 0], ordered[rank % 2 == 1]


def _metrics(model: AlphaBetaAllReduce, test: pd.DataFrame) -> dict[str, float]:
    pred = model.predict_ms(test["allreduce_bytes"], test["world_size"], test["num_nodes"])
    true = test["allreduce_ms"].to_numpy()
    small = test["allreduce_bytes"].to_numpy() < 1 << 20
    return {
        "mre": mean_relative_error(pred, true),
        "mre_below_1MiB": mean_relative_error(pred[small], true[small]) if small.any() else np.nan,
        "mre_from_1MiB": mean_relative_error(pred[~small], true[~small])
        if (~small).any()
        else np.nan,
        "rmse_ms": float(np.sqrt(np.mean((pred - true) ** 2))),
    }


def _fit(train: pd.DataFrame, **kwargs: Any) -> AlphaBetaAllReduce:
    return AlphaBetaAllReduce(**kwargs).fit(
        train["allreduce_bytes"], train["world_size"], train["allreduce_ms"], train["num_nodes"]
    )


#: Model variants compared by :func:`evaluate_allreduce_model` (name -> constructor kwargs).
VARIANTS: dict[str, dict[str, Any]] = {
    "base": {"per_topology": True},
    "per_configuration": {"per_configuration": True},
    "per_configuration_piecewise": {"per_configuration": True},
}


def evaluate_allreduce_model(df: pd.DataFrame) -> pd.DataFrame:
    """Fit and test the alpha-beta model per system (train/test by :func:`split_by_message_size`).

    Variants (all weighted by 1/t, i.e. least squares on the relative error):

    * ``base``: the textbook model, one (alpha, bandwidth) per topology (single node vs several
      nodes, ``per_topology=True``) shared by all world sizes of the system.
    * ``per_configuration``: one (alpha, bandwidth) per measured (world size, nodes): rings of
      different sizes cross different links (4 GPUs with pairwise NVLink ring through PCIe).
    * ``per_configuration_piecewise``: as ``per_configuration`` plus up to two message-size
      breakpoints per system, chosen on the training half only by
      :func:`~scaledl.models.allreduce.select_size_breakpoints` (NCCL changes protocol with size).

    Args:
        df: output of :func:`~scaledl.external.vidur.load_vidur_allreduce` (any subset of systems).

    Returns:
        One row per (system, variant): ``system``, ``variant``, ``n_train``, ``n_test``, ``mre``
        (mean |pred - true| / true on the test half), ``mre_below_1MiB``, ``mre_from_1MiB``,
        ``rmse_ms``, ``alpha_ms`` and ``bandwidth_gbps`` (bus bandwidth ``1/beta`` in GB/s of
        1e9 bytes) of the first fitted group in its largest size regime, all groups as
        ``params`` (JSON of :meth:`AlphaBetaAllReduce.to_dict`), and ``breakpoints_bytes``.

    Raises:
        ValueError: a sweep too small to fit (see :meth:`AlphaBetaAllReduce.fit`).
    """
    train_all, test_all = split_by_message_size(df)
    rows = []
    for system in sorted(df["system"].unique()):
        train = train_all[train_all["system"] == system]
        test = test_all[test_all["system"] == system]
        for variant, kwargs in VARIANTS.items():
            kwargs = dict(kwargs)
            if variant.endswith("piecewise"):
                kwargs["size_breakpoints_bytes"] = select_size_breakpoints(
                    train["allreduce_bytes"],
                    train["world_size"],
                    train["allreduce_ms"],
                    train["num_nodes"],
                    **kwargs,
                )
            model = _fit(train, **kwargs)
            first = min(g for g, _ in model.params_)
            alpha, inv_bw = model.params_[(first, max(r for g, r in model.params_ if g == first))]
            rows.append(
                {
                    "system": system,
                    "variant": variant,
                    "n_train": len(train),
                    "n_test": len(test),
                    **_metrics(model, test),
                    "alpha_ms": alpha,
                    "bandwidth_gbps": 1e-6 / inv_bw if inv_bw > 0 else np.inf,
                    "params": json.dumps(model.to_dict()),
                    "breakpoints_bytes": list(model.size_breakpoints_bytes),
                }
            )
    return pd.DataFrame(rows)


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
