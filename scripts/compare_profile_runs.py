r"""Compare two profiling runs of one design (issue 53: the sharded and the single-step path).

Reads each run's ``runs.parquet`` and ``workloads.parquet`` (a profiles directory) and writes a
JSON report: the workload ids and (workload, repeat) parts of each, the parts the interference
guard left disturbed, the label agreement on the parts clean in both (median ratio and MRE of
``label_ms``), and the probes' slowdown against each run's baselines (how quiet the host was).
Wall times are passed in (they are the orchestrator's, not the tables').

Usage::

    python scripts/compare_profile_runs.py A_DIR B_DIR --names sharded single \\
        --wall-s 804 665 --out benchmarks/results/profile_runs_compared.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

KEY = ["workload_id", "repeat"]


def _run(folder: Path) -> tuple[pd.DataFrame, set[str]]:
    runs = pd.read_parquet(folder / "runs.parquet")
    missing = [c for c in (*KEY, "label_ms", "interference") if c not in runs.columns]
    if missing:
        raise SystemExit(f"{folder / 'runs.parquet'}: columns {missing} missing")
    workloads = pd.read_parquet(folder / "workloads.parquet")
    return runs.set_index(KEY), set(workloads["workload_id"])


def _quietness(runs: pd.DataFrame) -> dict:
    gemm = runs["probe_before_gemm_ms"] / runs["baseline_gemm_ms"]
    memory = runs["probe_before_memory_ms"] / runs["baseline_memory_ms"]
    return {
        "gemm_probe_over_baseline_median": round(float(np.nanmedian(gemm)), 3),
        "memory_probe_over_baseline_median": round(float(np.nanmedian(memory)), 3),
        "foreign_load_cores_mean": round(float(runs["foreign_load_cores"].mean()), 3),
        "baselines": int(runs["baseline_gemm_ms"].nunique()),
    }


def compare(a_dir: Path, b_dir: Path, names: list[str], wall_s: list[float] | None) -> dict:
    """The comparison of two runs as a JSON-ready dict (module docstring)."""
    (a, ids_a), (b, ids_b) = _run(a_dir), _run(b_dir)
    both = pd.merge(
        a[["label_ms", "interference"]], b[["label_ms", "interference"]],
        left_index=True, right_index=True, suffixes=("_a", "_b"),
    )  # fmt: skip
    clean = both[~both["interference_a"].astype(bool) & ~both["interference_b"].astype(bool)]
    ratio = clean["label_ms_b"] / clean["label_ms_a"]
    report = {
        "runs": {
            name: {
                "dir": str(folder),
                "workloads": len(ids),
                "parts": len(runs),
                "parts_disturbed": int(runs["interference"].astype(bool).sum()),
                **_quietness(runs),
            }
            for name, folder, runs, ids in (
                (names[0], a_dir, a, ids_a),
                (names[1], b_dir, b, ids_b),
            )
        },
        "same_workload_ids": ids_a == ids_b,
        "same_parts": set(a.index) == set(b.index),
        "parts_clean_in_both": len(clean),
        "label_ratio_median": round(float(np.median(ratio)), 4),
        "label_mre": round(float(np.mean(np.abs(ratio - 1))), 4),
    }
    if wall_s:
        report["wall_s"] = dict(zip(names, wall_s, strict=True))
        report["wall_ratio"] = round(wall_s[0] / wall_s[1], 3)
    return report


def main() -> None:
    """Command line: two profiles directories in, the JSON report out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--names", nargs=2, default=["a", "b"])
    parser.add_argument("--wall-s", nargs=2, type=float)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    report = compare(args.a, args.b, args.names, args.wall_s)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
