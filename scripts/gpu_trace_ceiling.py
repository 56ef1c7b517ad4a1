"""Ceiling of a trace-based GPU predictor: label from the *measured* trace sum and a learned bias.

If the operator and layer models were perfect (predicting the traced kernel sum exactly), the
remaining error is how well log(label / trace) is predicted for a held-out model (LOMO) or GPU
(LOGO). Bias models (RidgeCV on log ratio): none; mode + device one-hot + log trace (ScaleDL's
'instrumented' correction); the same + kernel mix (the trace's matmul share, and per-mode);
device from specs (log peak, log bandwidth) for LOGO.

Run: ``python scripts/gpu_trace_ceiling.py --profiles data/imported/validated/neusight``.
"""

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.linear_model import RidgeCV

from scaledl.devices import device_spec

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--profiles", type=Path, default=Path("data/imported/validated/neusight"))
parser.add_argument("--out", type=Path, default=Path("data/reports/gpu_trace_ceiling.json"))
args = parser.parse_args()
d = f"{args.profiles}/"
w = pd.read_parquet(d + "workloads.parquet")
it = pd.read_parquet(d + "iteration_timings.parquet")
ops = pd.read_parquet(d + "operator_timings.parquet")
lab = it[it.phase == "label"].set_index("workload_id")["iteration_ms"]
tr = it[it.phase == "instrumented"].set_index("workload_id")["iteration_ms"]
ops["t"] = ops["forward_ms"].fillna(0) + ops["backward_ms"].fillna(0)
mm = (
    ops[ops.op_class == "matmul"].groupby("workload_id")["t"].sum()
    / ops.groupby("workload_id")["t"].sum()
)
w = w.set_index("workload_id")
w["model"] = w["config_path"].str.extract(r"configs/([^-]+)-")[0]
w["label"], w["trace"], w["mm"] = lab, tr, mm
w["y"] = np.log(w.label / w.trace)
w["train"] = (w["mode"] == "train").astype(float)
devs = sorted(w.device_name.unique())
spec = {dn: device_spec(dn) for dn in devs}
w["lpeak"] = [np.log(spec[x].peak_flops_per_s("fp32")) for x in w.device_name]
w["lbw"] = [np.log(spec[x].mem_bandwidth_gbps) for x in w.device_name]


def feats(f, kind):
    """Features of the bias model ``kind`` for the rows ``f``, shape (len(f), n_features)."""
    cols = [f.train, np.log(f.trace)]
    if kind in ("device", "device_mix"):
        cols += [(f.device_name == dv).astype(float) for dv in devs]
    if kind in ("device_mix", "specs_mix"):
        cols += [f.mm, f.mm * f.train]
    if kind in ("specs", "specs_mix"):
        cols += [f.lpeak, f.lbw]
    return np.column_stack(cols)


out = {}
for proto, key in (("leave_one_model_out", "model"), ("leave_one_gpu_out", "device_name")):
    out[proto] = {}
    for kind in ("none", "device", "device_mix", "specs", "specs_mix"):
        pred = pd.Series(np.nan, index=w.index)
        for g in w[key].unique():
            te, trn = w[w[key] == g], w[w[key] != g]
            if kind == "none":
                pred[te.index] = te.trace
                continue
            r = RidgeCV(alphas=(0.1, 1.0, 10.0)).fit(feats(trn, kind), trn.y)
            pred[te.index] = te.trace * np.exp(r.predict(feats(te, kind)))
        re = (pred - w.label).abs() / w.label
        out[proto][kind] = {
            "mre": float(re.mean()),
            "per_mode": {m: float(re[w["mode"] == m].mean()) for m in ("train", "infer")},
            "worst_gpu": float(re.groupby(w.device_name).mean().max()),
        }
args.out.parent.mkdir(parents=True, exist_ok=True)
args.out.write_text(json.dumps(out, indent=1))
for p, v in out.items():
    for k, r in v.items():
        print(
            p[:20],
            k,
            round(r["mre"], 4),
            {m: round(x, 4) for m, x in r["per_mode"].items()},
            round(r["worst_gpu"], 4),
        )
