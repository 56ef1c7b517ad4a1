r"""Compare two profiling runs of one design (issue 53: the sharded and the single-step path).

Reads each run's ``runs.parquet`` and ``workloads.parquet`` (a profiles directory) and writes a
JSON report: the workload ids and (workload, repeat) parts of each, the parts the interference
guard left disturbed, the label agreement on the parts clean in both (median ratio and MRE of
``label_ms``), the probes' slowdown against each run's baselines (how quiet the host was), and
where each run's time went (:func:`time_split`: inside the parts, between the parts of one
launch, at launch boundaries). Wall times are passed in (they are the orchestrator's, not the
tables').

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


def time_split(runs: pd.DataFrame, shard_boundary_s: float = 13.0) -> dict:
    """Where a run's profiling time went, from its parts' ``started_at`` / ``finished_at``.

    Parts are ordered by start; consecutive parts of the same (repeat, world size) are one
    launch, so the gap between them is the next model's build, and a change of (repeat, world
    size) is a launch boundary (torchrun stopping and starting, imports, baselines). Boundaries
    longer than ``shard_boundary_s`` are counted apart (a sharded run's Dagster run start-ups;
    the single-step run's boundaries were 8-10 s, its shards' 17-18 s).

    Args:
        runs: a ``runs.parquet`` table (``started_at``, ``finished_at``, ``repeat``,
            ``world_size``), one row per part.
        shard_boundary_s: a launch boundary longer than this (seconds) counts as a shard's.

    Returns:
        Seconds inside the parts, between parts of one launch, at launch boundaries (count,
        total, each), and the span from the first start to the last finish.
    """
    frame = runs.reset_index()
    start = pd.to_datetime(frame["started_at"], utc=True, format="ISO8601")
    end = pd.to_datetime(frame["finished_at"], utc=True, format="ISO8601")
    order = np.argsort(start.to_numpy())
    start, end = start.iloc[order].reset_index(drop=True), end.iloc[order].reset_index(drop=True)
    launch = frame[["repeat", "world_size"]].iloc[order].astype(str).agg("/".join, axis=1)
    launch = launch.reset_index(drop=True)
    gaps = (start.iloc[1:].to_numpy() - end.iloc[:-1].to_numpy()) / np.timedelta64(1, "s")
    boundary = launch.iloc[1:].to_numpy() != launch.iloc[:-1].to_numpy()
    at_boundary = gaps[boundary]
    shard = at_boundary > shard_boundary_s
    return {
        "in_parts_s": round(float(((end - start).dt.total_seconds()).sum()), 1),
        "between_parts_of_a_launch_s": round(float(gaps[~boundary].sum()), 1),
        "launch_boundaries": int((~shard).sum()),
        "launch_boundaries_s": [round(float(g), 1) for g in at_boundary[~shard]],
        "shard_boundaries": int(shard.sum()),
        "shard_boundaries_s": [round(float(g), 1) for g in at_boundary[shard]],
        "span_s": round(float((end.max() - start.min()).total_seconds()), 1),
    }


def compare(
    a_dir: Path,
    b_dir: Path,
    names: list[str],
    wall_s: list[float] | None,
    described: list[str] | None = None,
) -> dict:
    """The comparison of two runs as a JSON-ready dict (module docstring).

    ``described``: what each run was (stored in place of its directory's path).
    """
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
                "dir": text or str(folder),
                "workloads": len(ids),
                "parts": len(runs),
                "parts_disturbed": int(runs["interference"].astype(bool).sum()),
                **_quietness(runs),
                "time_split": time_split(runs),
            }
            for name, folder, runs, ids, text in (
                (names[0], a_dir, a, ids_a, (described or [None, None])[0]),
                (names[1], b_dir, b, ids_b, (described or [None, None])[1]),
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
    parser.add_argument("--describe", nargs=2, help="what each run was (stored as its dir)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    report = compare(args.a, args.b, args.names, args.wall_s, args.describe)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
