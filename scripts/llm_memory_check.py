"""Check the LLM memory estimate against published runs: every one of them ran, so it fitted.

For each accepted row of the published step times (:mod:`scaledl.external.published_runs`),
the memory per rank of its job (:func:`scaledl.planning.llm_memory.job_memory`, the most loaded
stage) is divided by the GPU's memory (its nominal GiB); a ratio above 1 is a layout that ran
but that the planner would refuse even without a headroom: the estimate is too high for it (or
the row's layout is not what ran). Rows are grouped by source and by whether the source reports its
activation recomputation (a source that does not is imported as ``none``).

Usage: ``python scripts/llm_memory_check.py [--out rows.csv]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from scaledl.devices import device_spec
from scaledl.external.published_runs import DEFAULT_PATHS, read_published_runs
from scaledl.planning.llm_memory import GIB, job_memory

#: Raw ``activation_checkpointing`` values that say nothing about what ran.
UNREPORTED = ("not reported", "nan", "unknown")


def memory_ratios() -> pd.DataFrame:
    """One row per accepted published run: its memory per rank over the GPU's memory."""
    runs = read_published_runs(DEFAULT_PATHS).runs
    raw = {Path(p).stem: pd.read_csv(p) for p in DEFAULT_PATHS}
    rows = []
    for _, run in runs.iterrows():
        job = run["job"]
        memory = job_memory(job)
        recompute = str(raw[run["source"]].iloc[run["row"] - 1]["activation_checkpointing"])
        rows.append({
            "source": run["source"], "row": run["row"], "model": run["model_name"],
            "gpu": job.gpu, "layout": job.label(), "precision": job.precision,
            "recompute_raw": recompute,
            "recompute_reported": bool(recompute.strip())
            and not recompute.strip().lower().startswith(UNREPORTED),
            "memory_gib": memory.total_bytes / GIB, "states_gib": memory.states_bytes / GIB,
            "activations_gib": memory.activations_bytes / GIB,
            "ratio": memory.total_bytes / GIB / device_spec(job.gpu).memory_gb,
        })  # fmt: skip
    return pd.DataFrame(rows)


def main() -> None:
    """Print the ratios by source and the reported-recompute rows over memory."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write every row (csv)")
    args = parser.parse_args()
    t = memory_ratios()
    summary = t.groupby(["source", "recompute_reported"]).agg(
        rows=("ratio", "size"), median_ratio=("ratio", "median"),
        over_memory=("ratio", lambda r: int((r > 1).sum())),
    )  # fmt: skip
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(summary.round(2).to_string())
        over = t[t["recompute_reported"] & (t["ratio"] > 1)].sort_values("ratio", ascending=False)
        print(f"\n{len(t)} rows; over the GPU's memory: {int((t['ratio'] > 1).sum())}; "
              f"of the {int(t['recompute_reported'].sum())} reporting their recompute: "
              f"{len(over)}")  # fmt: skip
        print(over[["source", "row", "model", "gpu", "layout", "recompute_raw", "ratio"]]
              .round(2).to_string(index=False))  # fmt: skip
    if args.out is not None:
        t.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
