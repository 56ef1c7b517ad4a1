"""Benchmark of profiling on a drifting host: labels between two separate runs, parts kept, time.

Two independent runs of the quick preset's D-optimal design, in separate processes and at least
``GAP_MINUTES`` apart, are compared:

* **label MRE between the runs** per label candidate (raw launch labels; host-drift corrected
  ones, :mod:`scaledl.profiling.drift`; the median or the fastest launch of each), overall and
  per world size, each candidate paired against the raw label
  (:func:`scaledl.evaluation.reproducibility.cross_run_reproducibility`);
* **parts kept** (not quarantined, not failed, inside the correction's range) per run, and the
  launch-to-launch MRE inside each run (:func:`~scaledl.evaluation.reproducibility.
  label_quality`);
* **profiling time** per run (first part started to last part finished, from the ``runs``
  table) and, with ``--runs``, the ``make run`` time each run recorded
  (``data/reports/make_run.json``, written by the Makefile);
* with ``--runs`` and ``metrics.json`` beside each run, the **headline** ID and
  leave-one-family-out MRE of both runs and their difference;
* with ``--cli-subset N``, **Dagster vs CLI**: ``N`` workloads of run B (a run under Dagster)
  profiled again with ``scaledl profile`` right after it; the mean log ratio of their labels
  (CLI / Dagster) with a 95% bootstrap interval says whether labels under Dagster differ
  systematically.

Modes:

* ``python benchmarks/bench_profiling.py`` (``make bench``): pass A, then the host-drift
  characterisation (:mod:`bench_drift`, ``DRIFT_MINUTES``; it is also the gap), then pass B, all
  in fresh temporary folders. About 35 minutes on 2 cores.
* ``python benchmarks/bench_profiling.py --runs DATA_A DATA_B [--cli-subset 24]``: two data roots
  of separate ``make run``s (fresh clones), e.g. minutes apart; seconds, plus the CLI subset.

Nothing else may run on the machine meanwhile. Writes ``benchmarks/results/profiling.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_drift  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "profiling.json"
GAP_MINUTES = 10.0
DRIFT_MINUTES = 20.0
#: The figures this benchmark is judged against (issue: labels that hold on a noisy host).
TARGETS = {
    "label_mre_between_runs": 0.03,
    "label_mre_between_runs_world_size_1": 0.02,
    "label_mre_between_runs_world_size_2": 0.04,
    "design_share_compared": 0.9,
    "kept_share_min": 0.9,
    "profiling_minutes_max": 8.0,
    "make_run_minutes_max": 15.0,
    "headline_id_difference_points": 2.0,
    "headline_ood_difference_points": 2.0,
}
AT_LEAST = {"design_share_compared", "kept_share_min"}
#: Before this correction: a fresh clone of main 81c61e6 on the reference VM (the issue).
BEFORE = {
    "label_mre_between_runs": 0.097,
    "label_mre_between_runs_world_size_1": 0.084,
    "label_mre_between_runs_world_size_2": 0.147,
    "kept_share_min": 95 / 192,
    "profiling_minutes_max": 20.3,
    "make_run_minutes_max": 31.4,
}


def design_workloads():
    from scaledl.design import generate_design, load_preset
    from scaledl.devices.local import local_backend, local_device_name
    from scaledl.workloads.spec import Workload

    preset = load_preset("quick")
    design = generate_design(
        preset,
        preset["design"]["n_workloads"],
        device_name=local_device_name(),
        backend=local_backend(),
    )
    workloads = [
        Workload.from_record(r, source=f"quick design row {i + 1}")
        for i, r in enumerate(design.table.to_dict("records"))
    ]
    return preset, workloads


def profile_pass(workloads, out: Path, preset) -> dict[str, pd.DataFrame]:
    """One pass of the design into ``out`` (the library's launcher, as the CLI runs it)."""
    from scaledl.profiling.launch import profile_workloads
    from scaledl.profiling.settings import ProfileSettings
    from scaledl.profiling.store import consolidate

    settings = ProfileSettings.from_preset(preset["profiling"])
    profile_workloads(workloads, out, settings, progress=False)
    return consolidate(out)


def run_figures(tables: dict[str, pd.DataFrame]) -> dict:
    """Kept share, launch MREs and profiling span of one run."""
    from scaledl.evaluation.reproducibility import label_quality

    quality = label_quality(tables)
    runs = tables["runs"]
    start = pd.to_datetime(runs["started_at"], format="ISO8601").min()
    end = pd.to_datetime(runs["finished_at"], format="ISO8601").max()
    quality["profiling_s"] = float((end - start).total_seconds())
    quality["started_at"], quality["finished_at"] = start.isoformat(), end.isoformat()
    quality["remeasured_parts"] = int((runs.get("attempts", pd.Series(1)) > 1).sum())
    return quality


def headline(metrics_path: Path) -> dict | None:
    """ScaleDL's ID and leave-one-family-out iteration MRE of one ``metrics.json``."""
    if not metrics_path.exists():
        return None
    splits = json.loads(metrics_path.read_text())["splits"]
    return {
        "id_mre": splits["id"]["methods"]["scaledl"]["iteration"]["mre"],
        "ood_mre": splits["ood"]["mean"]["scaledl"]["iteration"]["mre"],
    }


def make_run_minutes(data_root: Path) -> float | None:
    """Minutes the ``make run`` of a data root took (its ``reports/make_run.json``)."""
    path = data_root / "reports" / "make_run.json"
    if not path.exists():
        return None
    times = json.loads(path.read_text())
    return (times["finished_unix"] - times["started_unix"]) / 60.0


def dagster_vs_cli(tables_dagster: dict[str, pd.DataFrame], n: int, preset: str) -> dict:
    """``n`` workloads of a Dagster run profiled again with ``scaledl profile``; label ratios."""
    from scipy.stats import bootstrap

    from scaledl.evaluation.reproducibility import workload_label_candidates

    dagster = workload_label_candidates(tables_dagster)
    per_world_size = min(n // 2, int(dagster.groupby("world_size").size().min()))
    chosen = dagster.groupby("world_size").sample(n=per_world_size, random_state=0)
    from scaledl.workloads.spec import Workload

    records = tables_dagster["workloads"].set_index("workload_id").loc[chosen["workload_id"]]
    records = records[[c for c in records.columns if c in Workload.model_fields]]
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "workloads.parquet"
        records.reset_index(drop=True).to_parquet(spec)
        out = Path(tmp) / "profiles"
        cmd = [sys.executable, "-m", "scaledl.cli", "profile", "--workloads", str(spec),
               "--out", str(out), "--preset", preset]  # fmt: skip
        started = time.time()
        subprocess.run(cmd, check=True)
        from scaledl.profiling.store import consolidate

        cli = workload_label_candidates(consolidate(out))
    both = chosen.merge(cli, on=["workload_id", "world_size"], suffixes=("_dagster", "_cli"))
    out = {"n_workloads": len(both), "cli_wall_s": round(time.time() - started, 1)}
    for name in ("raw", "corrected"):
        log_ratio = np.log(both[f"{name}_cli"] / both[f"{name}_dagster"]).to_numpy()
        ci = bootstrap((log_ratio,), np.mean, method="percentile", random_state=0)
        out[name] = {
            "mean_ratio_cli_over_dagster": float(np.exp(log_ratio.mean())),
            "ci95": [
                float(np.exp(ci.confidence_interval.low)),
                float(np.exp(ci.confidence_interval.high)),
            ],  # fmt: skip
            "systematic": bool(ci.confidence_interval.low > 0 or ci.confidence_interval.high < 0),
        }
    return out


def measured_figures(cross: dict, runs: dict, chosen: str, heads: list, makes: list) -> dict:
    """The figures :data:`TARGETS` names, for the label candidate ``chosen``."""
    c = cross["candidates"][chosen]
    both_heads = all(h is not None for h in heads) and len(heads) == 2
    return {
        "label_mre_between_runs": c["mre"],
        "label_mre_between_runs_world_size_1": c["per_world_size"].get("1", {}).get("mre"),
        "label_mre_between_runs_world_size_2": c["per_world_size"].get("2", {}).get("mre"),
        "design_share_compared": cross["coverage"],
        "kept_share_min": min(r["kept_share"] for r in runs.values()),
        "profiling_minutes_max": max(r["profiling_s"] for r in runs.values()) / 60.0,
        "make_run_minutes_max": max(makes) if makes and None not in makes else None,
        "headline_id_difference_points": (
            100 * abs(heads[0]["id_mre"] - heads[1]["id_mre"]) if both_heads else None
        ),
        "headline_ood_difference_points": (
            100 * abs(heads[0]["ood_mre"] - heads[1]["ood_mre"]) if both_heads else None
        ),
    }


def main() -> None:
    from scaledl.evaluation.reproducibility import cross_run_reproducibility
    from scaledl.models.data import read_tables

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs=2, type=Path, metavar=("DATA_A", "DATA_B"))
    parser.add_argument("--cli-subset", type=int, default=0)
    args = parser.parse_args()
    preset, workloads = design_workloads()
    result: dict = {
        "benchmark": "profiling",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "make runs" if args.runs else "passes",
        "workloads": len(workloads),
        "profiling_settings": preset["profiling"],
    }
    heads, makes = [], []
    if args.runs:
        tables = {
            name: read_tables(root / "profiles") for name, root in zip("AB", args.runs, strict=True)
        }
        heads = [headline(root / "reports" / "metrics.json") for root in args.runs]
        makes = [make_run_minutes(root) for root in args.runs]
    else:
        with tempfile.TemporaryDirectory() as tmp:
            tables = {"A": profile_pass(workloads, Path(tmp) / "A", preset)}
            result["drift"] = bench_drift.characterise(DRIFT_MINUTES)["workloads"]
            tables["B"] = profile_pass(workloads, Path(tmp) / "B", preset)
    runs = {name: run_figures(t) for name, t in tables.items()}
    gap = pd.Timestamp(runs["B"]["started_at"]) - pd.Timestamp(runs["A"]["finished_at"])
    cross = cross_run_reproducibility(tables["A"], tables["B"], n_design=len(workloads))
    measured = measured_figures(cross, runs, "corrected", heads, makes)
    result.update(
        {
            "gap_minutes": gap.total_seconds() / 60.0,
            "label_candidate": "corrected",
            "measured": measured,
            "targets": TARGETS,
            "reached": {
                k: None
                if measured[k] is None
                else (measured[k] >= v if k in AT_LEAST else measured[k] <= v)
                for k, v in TARGETS.items()
            },
            "before": BEFORE,
            "cross_run": cross,
            "runs": runs,
            "headlines": heads,
            "make_run_minutes": makes,
        }
    )
    if args.runs and args.cli_subset:
        result["dagster_vs_cli"] = dagster_vs_cli(tables["B"], args.cli_subset, "quick")
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps({"measured": measured, "reached": result["reached"]}, indent=2))


if __name__ == "__main__":
    main()
