"""History: profiling with and without ``gc.freeze`` in the worker's ``release_memory``.

Since 2026-12-05 (commit c517f05) :func:`scaledl.profiling.worker.release_memory` freezes the
objects that survive its collection, so Python's own full collections during the next
workload's timed steps no longer scan torch's and transformers' ~250,000 objects. This script
is the paired check behind ``benchmarks/results/gc_freeze.json``: one shard of a quick-preset
design profiled by two checkouts (``--base``, before the change; ``--new``), alternated
``--pairs`` times, then the wall time per run and the labels per (workload, repeat), new / base.

Run on an otherwise idle host (about 15 minutes for two pairs of a 48-part shard)::

    git worktree add /tmp/base 56f7408
    PYTHONPATH=. python benchmarks/history/gc_freeze.py --base /tmp/base --new . \\
        --design data/design/design.parquet --out benchmarks/results/gc_freeze.json

Imports ``scaledl``; nothing in ``scaledl`` imports it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.stats as st

from scaledl.profiling.store import consolidate


def profile(checkout: Path, design: Path, out: Path, shard: str) -> float:
    """Profile one shard with ``checkout``'s code; wall seconds."""
    started = time.perf_counter()
    command = [sys.executable, "-m", "scaledl.cli", "profile", "--design", str(design),
               "--out", str(out), "--shard", shard, "--preset", "quick"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    subprocess.run(command, cwd=checkout, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def compare(runs: dict[tuple[str, int], Path]) -> dict:
    """Label and part-span ratios new / base, paired by (workload, repeat, pair)."""
    frames = []
    for (mode, pair), folder in runs.items():
        table = consolidate(folder)["runs"].reset_index()
        frames.append(table.assign(mode=mode, pair=pair))
    t = pd.concat(frames)
    t["span_s"] = (pd.to_datetime(t.finished_at) - pd.to_datetime(t.started_at)).dt.total_seconds()
    out = {}
    for col in ("label_ms", "span_s"):
        piv = t.pivot_table(index=["workload_id", "repeat", "pair"], columns="mode", values=col)
        dl = np.log(piv["new"] / piv["base"]).dropna()
        se = dl.std(ddof=1) / np.sqrt(len(dl))
        lo, hi = st.t.interval(0.95, len(dl) - 1, loc=dl.mean(), scale=se)
        out[col] = {"new_over_base": round(float(np.exp(dl.mean())), 4),
                    "ci95": [round(float(np.exp(lo)), 4), round(float(np.exp(hi)), 4)],
                    "per_pair": np.exp(dl.groupby(level="pair").mean()).round(4).tolist(),
                    "n": int(len(dl))}  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--new", type=Path, required=True)
    parser.add_argument("--design", type=Path, required=True)
    parser.add_argument("--shard", default="2-of-4")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="gc_freeze_"))
    runs, wall = {}, {"base": [], "new": []}
    for pair in range(1, args.pairs + 1):
        for mode in ("base", "new"):
            folder = scratch / f"{mode}_{pair}"
            checkout = args.base if mode == "base" else args.new
            wall[mode].append(round(profile(checkout.resolve(), args.design.resolve(), folder,
                                            args.shard), 1))  # fmt: skip
            runs[(mode, pair)] = folder
    result = {"check": "gc.freeze in release_memory", "shard": args.shard, "wall_s": wall,
              **compare(runs)}  # fmt: skip
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
