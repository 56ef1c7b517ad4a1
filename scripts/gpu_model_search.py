"""Which GPU model wins: kernel-aware ScaleDL variants, in one run, paired, with intervals.

Every variant (:data:`VARIANTS`, :class:`~scaledl.models.kernel.KernelGraphMethod` keyword
arguments) is fitted in every fold of both GPU protocols (leave one model out, leave one GPU out;
:func:`scaledl.evaluation.gpu.leave_one_out`, the evaluation's own folds) and predicts the same
held-out rows. Every hyper-parameter is chosen inside the training folds (the operator models'
grid and the corrections by inner validation); the variants are the design directions measured:

* ``v1``: the recipe before issue 25b (device-absolute operator features; the training
  devices' correction applied to a GPU never trained on);
* ``transfer``: the correction on an unseen GPU chosen by inner leave-one-GPU-out validation;
* ``relative``: operator utilisation from device-relative features only (waves, bytes over L2,
  intensity over machine balance), NeuSight's transferable per-wave formulation;
* ``relative_transfer``: both.

Per protocol and variant: MRE overall, per mode and per GPU; the paired comparison with
NeuSight's own predictions (and with half of them: the issue's 0.5x target) and with ``v1``,
each a paired BCa bootstrap interval (:func:`scaledl.stats.significance.paired_comparison`).

Run (under the CPU lock): ``python scripts/gpu_model_search.py --profiles
data/imported/validated/neusight --out benchmarks/results/gpu_models.json``; the held-out
predictions go next to it (``gpu_models.predictions.csv``).
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from scaledl.evaluation.gpu import GpuEvaluationConfig, gpu_name, leave_one_out, model_name
from scaledl.evaluation.gpu_peer import PEER_METHOD, peer_comparison, peer_rows
from scaledl.external.neusight_peer import load_peer_predictions
from scaledl.layout import neusight_peer_root, neusight_root
from scaledl.models.data import load_profile_data
from scaledl.profiles.fingerprint import tables_sha256
from scaledl.stats.significance import paired_comparison

VARIANTS = {
    "v1": {
        "unseen_device_correction": "training_devices",
        "operator_params": {"device_features": "absolute"},
    },
    "transfer": {
        "unseen_device_correction": "auto",
        "operator_params": {"device_features": "absolute"},
    },
    "relative": {
        "unseen_device_correction": "training_devices",
        "operator_params": {"device_features": "relative"},
    },
    "relative_transfer": {
        "unseen_device_correction": "auto",
        "operator_params": {"device_features": "relative"},
    },
}
PROTOCOLS = {"leave_one_model_out": model_name, "leave_one_gpu_out": gpu_name}


def summary(rows: pd.DataFrame, predictions: pd.DataFrame, variant: str) -> dict:
    """One protocol's figures for one variant (``rows``: that protocol's rows, peer included)."""
    re = rows.assign(re=np.abs(rows["pred_ms"] - rows["true_ms"]) / rows["true_ms"])
    wide = re.pivot_table(index="workload_id", columns="method", values="re", aggfunc="first")
    ours = re[re["method"] == variant]
    per_gpu = ours.groupby("gpu")["re"].mean()
    protocol = str(rows["protocol"].iat[0])
    out = {
        "mre": float(ours["re"].mean()),
        "per_mode": {str(m): float(g["re"].mean()) for m, g in ours.groupby("mode")},
        "per_gpu": {str(g): float(v) for g, v in per_gpu.items()},
        "mean_over_gpus": float(per_gpu.mean()),
        "worst_gpu": [str(per_gpu.idxmax()), float(per_gpu.max())],
        "vs_neusight": peer_comparison(predictions, method=variant)[protocol],
    }
    if variant != "v1":
        out["vs_v1"] = paired_comparison(
            wide[variant].to_numpy(), wide["v1"].to_numpy(), variant, "v1"
        ).to_dict()
        out["vs_v1_per_mode"] = {
            str(mode): paired_comparison(
                wide.loc[ids.to_numpy(), variant].to_numpy(),
                wide.loc[ids.to_numpy(), "v1"].to_numpy(),
                variant,
                "v1",
            ).to_dict()
            for mode, ids in ours.groupby("mode")["workload_id"]
        }
    return out


def main() -> None:
    """Fit every variant in every fold, compare, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=Path, default=Path("data/imported/validated/neusight"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu_models.json"))
    parser.add_argument(
        "--from-predictions",
        action="store_true",
        help="recompute the comparisons from the predictions CSV a previous run wrote",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    saved = args.out.with_suffix(".predictions.csv")
    folds: dict = {}
    if args.from_predictions:
        predictions = pd.read_csv(saved)
        folds = json.loads(args.out.read_text()).get("folds", {}) if args.out.exists() else {}
    else:
        data = load_profile_data(args.profiles)
        config = GpuEvaluationConfig(methods=(), baselines=VARIANTS)
        frames = []
        for protocol, key in PROTOCOLS.items():
            rows, _, folds[protocol] = leave_one_out(data, protocol, key, config)
            frames.append(rows)
        predictions = pd.concat(frames, ignore_index=True)
        saved.parent.mkdir(parents=True, exist_ok=True)
        predictions.to_csv(saved, index=False)
    peer, unmatched = peer_rows(
        predictions, load_peer_predictions(neusight_peer_root(), neusight_root()), method="v1"
    )
    paired = predictions[predictions["workload_id"].isin(peer["workload_id"])]
    predictions = pd.concat([paired, peer], ignore_index=True)
    out = {
        "command": "python scripts/gpu_model_search.py "
        f"--profiles {args.profiles} --out {args.out}",
        "profiles_sha256": tables_sha256(args.profiles),
        "variants": VARIANTS,
        "paired_rows": int(peer["workload_id"].nunique()),
        "unmatched": unmatched,
        "neusight_mre": {
            str(mode): float((np.abs(g["pred_ms"] - g["true_ms"]) / g["true_ms"]).mean())
            for mode, g in peer[peer["protocol"] == "leave_one_model_out"].groupby("mode")
        },
        "protocols": {
            protocol: {v: summary(rows, predictions, v) for v in VARIANTS}
            for protocol, rows in predictions.groupby("protocol", sort=False)
        },
        "folds": folds,
    }
    out["runtime_s"] = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, default=str))
    for protocol, block in out["protocols"].items():
        for v, r in block.items():
            modes = {m: round(x, 4) for m, x in r["per_mode"].items()}
            print(protocol[:20], v, round(r["mre"], 4), modes, r["worst_gpu"])
    print("NeuSight", out["neusight_mre"], PEER_METHOD)


if __name__ == "__main__":
    main()
