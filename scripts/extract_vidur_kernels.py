"""Extract the kernel and collective measurements ScaleDL's LLM models use from a Vidur checkout.

Reads ``data/profiling/compute/{a100,h100}/<org>/<model>/mlp.csv`` (per-operator times of
vLLM-style decoder layers, fp16) and ``data/profiling/network/<system>/send_recv.csv`` of
``microsoft/vidur`` (the DGX systems) and writes, under ``external/vidur/``:

* ``compute/<gpu>/gemm.csv``: one row per measured GEMM: ``model``, ``op`` (``attn_pre_proj``
  = fused QKV, ``attn_post_proj``, ``mlp_up_proj``, ``mlp_down_proj``), ``m`` (tokens), ``n``,
  ``k`` (``C[m, n] = A[m, k] B[k, n]``, shapes as split by the ``tp`` workers), ``tp``,
  ``time_ms`` (median);
* ``compute/<gpu>/elementwise.csv``: ``model``, ``op`` (``input_layernorm``, ``mlp_act``,
  ``add``), ``tokens``, ``tp``, ``bytes`` (fp16 bytes read + written), ``time_ms`` (median);
* ``network/<system>/send_recv.csv``: the file unchanged.

Token counts kept: powers of two and multiples of 256 from 64 tokens (training GEMMs have
thousands of rows; the decode-sized sweeps are left out to keep the copy small).

Usage::

    python scripts/extract_vidur_kernels.py VIDUR_CHECKOUT [--out external/vidur]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

GPUS = ("a100", "h100")
SYSTEMS = ("a100_dgx", "h100_dgx")
_BYTES = 2  # fp16


def _keep_tokens(tokens: pd.Series) -> pd.Series:
    t = tokens.to_numpy()
    power_of_two = (t & (t - 1)) == 0
    return pd.Series(((t % 256 == 0) | power_of_two) & (t >= 64), index=tokens.index)


def gemm_rows(raw: pd.DataFrame, model: str) -> pd.DataFrame:
    """Long table of the four GEMMs of each ``mlp.csv`` row (module docstring)."""
    e = raw["n_embd"].to_numpy()
    heads = raw["n_head"].to_numpy()
    kv = raw["n_kv_head"].to_numpy()
    ffn = raw["n_expanded_embd"].to_numpy()
    tp = raw["num_tensor_parallel_workers"].to_numpy()
    gated = raw["use_gated_mlp"].astype(str).str.lower().eq("true").to_numpy()
    head_dim = e // heads
    kv_per_rank = np.maximum(kv // tp, 1)
    shapes = {
        "attn_pre_proj": (e, (heads // tp + 2 * kv_per_rank) * head_dim),
        "attn_post_proj": (e // tp, e),
        "mlp_up_proj": (e, np.where(gated, 2, 1) * ffn // tp),
        "mlp_down_proj": (ffn // tp, e),
    }
    frames = []
    for op, (k, n) in shapes.items():
        frames.append(
            pd.DataFrame(
                {
                    "model": model,
                    "op": op,
                    "m": raw["num_tokens"].to_numpy(),
                    "n": n,
                    "k": k,
                    "tp": tp,
                    "time_ms": raw[f"time_stats.{op}.median"].to_numpy(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def elementwise_rows(raw: pd.DataFrame, model: str) -> pd.DataFrame:
    """Long table of the memory-bound operators of each ``mlp.csv`` row (module docstring)."""
    tokens = raw["num_tokens"].to_numpy()
    e = raw["n_embd"].to_numpy()
    ffn_rank = raw["n_expanded_embd"].to_numpy() // raw["num_tensor_parallel_workers"].to_numpy()
    gated = raw["use_gated_mlp"].astype(str).str.lower().eq("true").to_numpy()
    moved = {
        "input_layernorm": 2 * tokens * e,  # read x, write norm(x)
        "mlp_act": np.where(gated, 3, 2) * tokens * ffn_rank,  # read (gate, up), write act
        "add": 3 * tokens * e,  # read two, write one
    }
    frames = [
        pd.DataFrame(
            {
                "model": model,
                "op": op,
                "tokens": tokens,
                "tp": raw["num_tensor_parallel_workers"].to_numpy(),
                "bytes": elements * _BYTES,
                "time_ms": raw[f"time_stats.{op}.median"].to_numpy(),
            }
        )
        for op, elements in moved.items()
    ]
    return pd.concat(frames, ignore_index=True)


def main(argv: list[str] | None = None) -> None:
    """Write the extracted tables (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vidur", type=Path, help="a checkout of microsoft/vidur")
    parser.add_argument("--out", type=Path, default=Path("external/vidur"))
    args = parser.parse_args(argv)
    for gpu in GPUS:
        gemms, elementwise = [], []
        for path in sorted((args.vidur / "data/profiling/compute" / gpu).glob("*/*/mlp.csv")):
            model = f"{path.parent.parent.name}/{path.parent.name}"
            raw = pd.read_csv(path)
            raw = raw[_keep_tokens(raw["num_tokens"])]
            gemms.append(gemm_rows(raw, model))
            elementwise.append(elementwise_rows(raw, model))
        out = args.out / "compute" / gpu
        out.mkdir(parents=True, exist_ok=True)
        keys = ["model", "op", "tp", "m"]
        pd.concat(gemms).sort_values(keys).to_csv(out / "gemm.csv", index=False)
        keys = ["model", "op", "tp", "tokens"]
        pd.concat(elementwise).sort_values(keys).to_csv(out / "elementwise.csv", index=False)
    for system in SYSTEMS:
        src = args.vidur / "data/profiling/network" / system / "send_recv.csv"
        (args.out / "network" / system).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, args.out / "network" / system / "send_recv.csv")


if __name__ == "__main__":
    main()
