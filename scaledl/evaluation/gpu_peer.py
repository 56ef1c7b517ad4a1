"""NeuSight's own predictions as a peer of ScaleDL in the GPU evaluation, on the same rows.

Each GPU protocol's predictions (:func:`scaledl.evaluation.gpu.leave_one_out`) get, for every
held-out workload NeuSight predicted (:func:`scaledl.external.neusight_peer.load_peer_predictions`,
matched on GPU, model, mode, sequence length and batch), a row of method ``neusight`` with
NeuSight's ``e2e_latency`` as ``pred_ms``: the peer is then a column of every per-GPU, per-mode
and per-model table like the product's methods. NeuSight's prediction does not depend on the
protocol (it never trains on whole-model times), so both protocols compare with the same
numbers.

ScaleDL and NeuSight are compared *paired* on exactly the rows both predicted, with the
interval the CPU evaluation uses (:func:`scaledl.stats.significance.paired_comparison`:
paired BCa bootstrap of the MRE difference, workloads resampled), overall, per mode and per GPU.
The issue's target "ScaleDL's MRE <= 0.5 x NeuSight's" (the ``neusight_peer_half`` row of
:data:`scaledl.evaluation.targets.TARGETS`, its factor the row's ``scale``) is the paired
comparison of ScaleDL's relative errors with half of NeuSight's: its difference
``MRE_scaledl - 0.5 MRE_neusight`` is <= 0 when the target is met, and its interval says how
sure that is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from scaledl.evaluation.targets import TargetResult, target
from scaledl.stats.significance import MIN_WORKLOADS, paired_comparison

PEER_METHOD = "neusight"
PEER_SOURCE = (
    "NeuSight's own predictions (sitar-lab/NeuSight 6945927d, ASPLOS 2025, MIT licence; "
    "external/neusight_peer)"
)
_KEYS = ["gpu", "model", "mode", "seq_len", "batch_size"]


def peer_rows(predictions: pd.DataFrame, peer: pd.DataFrame, method: str = "scaledl"):
    """Rows of the peer in the predictions' format, one per row of ``method`` it predicted.

    Args:
        predictions: one protocol's or several protocols' rows (``protocol``, ``held_out``,
            ``workload_id``, ``gpu``, ``model``, ``mode``, ``seq_len``, ``batch_size``,
            ``method``, ``true_ms``, ``pred_ms``, ``device_seen``).
        peer: :func:`~scaledl.external.neusight_peer.load_peer_predictions`.
        method: the method whose rows the peer is matched to.

    Returns:
        ``(rows, unmatched)``: the peer's rows (method :data:`PEER_METHOD`, ``device_seen``
        False: NeuSight never saw whole-model times of any GPU) and the sorted
        ``"<gpu> <model> <mode> <seq_len> <batch>"`` of ``method`` rows without a peer
        prediction.

    Raises:
        ValueError: the peer has two predictions for one workload.
    """
    duplicated = peer.duplicated(_KEYS)
    if duplicated.any():
        first = peer[duplicated].iloc[0]
        raise ValueError(
            f"{first['file']}: a second NeuSight prediction for {first[_KEYS].tolist()}"
        )
    ours = predictions[predictions["method"] == method]
    merged = ours.merge(peer[[*_KEYS, "peer_ms"]], on=_KEYS, how="left")
    missing = merged["peer_ms"].isna()
    unmatched = sorted(
        {" ".join(str(v) for v in r) for r in merged.loc[missing, _KEYS].itertuples(index=False)}
    )
    rows = merged[~missing].assign(method=PEER_METHOD, pred_ms=lambda f: f["peer_ms"])
    rows["device_seen"] = False
    return rows.drop(columns=["peer_ms"]).reset_index(drop=True), unmatched


def _paired(frame: pd.DataFrame, method: str, scale: float = 1.0) -> dict[str, Any]:
    """Paired comparison of ``method`` with ``scale`` x the peer on the rows of ``frame``."""
    wide = frame.pivot_table(index="workload_id", columns="method", values="re", aggfunc="first")
    wide = wide.reindex(columns=sorted({*wide.columns, method, PEER_METHOD}))
    wide = wide.dropna(subset=[method, PEER_METHOD])  # a method without rows: no paired row
    if len(wide) < MIN_WORKLOADS:
        return {"skipped": f"{len(wide)} paired row(s); a paired interval needs {MIN_WORKLOADS}"}
    name_b = PEER_METHOD if scale == 1.0 else f"{scale:g} x {PEER_METHOD}"
    result = paired_comparison(
        wide[method].to_numpy(), scale * wide[PEER_METHOD].to_numpy(), method, name_b
    )
    return result.to_dict()


def peer_comparison(predictions: pd.DataFrame, method: str = "scaledl") -> dict[str, Any]:
    """ScaleDL against the peer, paired, per protocol: overall, per mode and per GPU.

    Args:
        predictions: the rows of every protocol, with the peer's (:func:`peer_rows`).
        method: the product's method compared.

    Returns:
        ``{protocol: {"overall", "per_mode": {mode: ...}, "per_gpu": {gpu: ...},
        "half_of_peer": {"overall", "per_mode"}}}``, each a
        :class:`~scaledl.stats.significance.Comparison` as a dict (``method`` minus
        NeuSight; ``half_of_peer``: minus half of NeuSight's errors, the 0.5x target), or
        ``{"skipped": reason}`` with fewer than two paired rows.
    """
    out: dict[str, Any] = {}
    scale = target("neusight_peer_half").scale
    frame = predictions.assign(
        re=np.abs(predictions["pred_ms"] - predictions["true_ms"]) / predictions["true_ms"]
    )
    for protocol, rows in frame.groupby("protocol", sort=True):
        out[str(protocol)] = {
            "overall": _paired(rows, method),
            "per_mode": {str(m): _paired(g, method) for m, g in rows.groupby("mode", sort=True)},
            "per_gpu": {str(g): _paired(x, method) for g, x in rows.groupby("gpu", sort=True)},
            "half_of_peer": {
                "overall": _paired(rows, method, scale),
                "per_mode": {
                    str(m): _paired(g, method, scale) for m, g in rows.groupby("mode", sort=True)
                },
            },
        }
    return out


def peer_targets(peer: dict[str, Any]) -> list[TargetResult]:
    """The issue's targets against the peer: ScaleDL's MRE <= 0.5 x NeuSight's, per mode.

    Args:
        peer: the ``peer`` block of the GPU metrics (``comparisons`` from
            :func:`peer_comparison`).

    Returns:
        Entries, one per protocol and mode: ``value`` the paired difference
        ``MRE_scaledl - 0.5 MRE_neusight`` with its 95% interval, ``extra`` both MREs and
        ``n_rows``; ``measured`` gives both MREs, their ratio and the interval.
    """
    half_target = target("neusight_peer_half")
    scale = half_target.scale
    rows = []
    names = {"leave_one_model_out": "leave-one-model-out", "leave_one_gpu_out": "leave-one-GPU-out"}
    root = {"gpu": {"peer": peer}}
    for protocol, block in peer.get("comparisons", {}).items():
        for mode, half in block["half_of_peer"]["per_mode"].items():
            words = {"protocol": names.get(protocol, protocol), "mode": mode}
            if "skipped" in half:
                rows.append(half_target.result(half["skipped"], None, **words))
                continue
            difference, reached = half_target.judge(root, protocol_key=protocol, mode=mode)
            ours, theirs = half["mre_a"], half["mre_b"] / scale
            rows.append(
                half_target.result(
                    f"{ours:.1%} vs {theirs:.1%} ({ours / theirs:.2f}x, "
                    f"{half['n_units']} rows); MRE - {scale:g}x NeuSight's "
                    f"{100 * difference:+.1f} points, 95% CI "
                    f"{100 * half['ci_low']:+.1f} to {100 * half['ci_high']:+.1f}",
                    reached,
                    value=difference,
                    ci_low=half["ci_low"],
                    ci_high=half["ci_high"],
                    extra={"mre_scaledl": ours, "mre_neusight": theirs, "n_rows": half["n_units"]},
                    **words,
                )
            )
    return rows
