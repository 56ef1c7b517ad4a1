"""Benchmark of the uncached GPU evaluation (``evaluate_gpu``, the report's ``external`` stage).

A fresh clone computes it once (later runs read it from the content cache,
:mod:`scaledl.evaluation.gpu_cache`), so it is part of ``make run``'s time on a fresh clone.
Each run is a fresh interpreter calling
:func:`scaledl.evaluation.gpu.evaluate_gpu` with ``cache_dir=None`` on what ``make run``
imported, as the ``evaluation_report`` stage calls it: the validated NeuSight tables, the 4-GPU
labels, Vidur's all-reduce data and NeuSight's own predictions, ``n_jobs`` processes.

``--sources`` times other checkouts of the package too (e.g. ``git archive <commit> scaledl``
unpacked into a folder), runs alternating between them, and checks that every run's metrics
(less the wall-time fields ``runtime_s`` and ``fit_predict_s``) and predictions equal the
first run's exactly. The 1-minute load average before each run is recorded (a shared host
distorts the times).

Run: ``python benchmarks/bench_gpu_eval.py [--run-dir CHECKOUT] [--sources DIR ...]``; writes
``benchmarks/results/gpu_eval.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
from common import ROOT, write_result

_CHILD = """
import json, os, sys, time
sys.path.insert(0, {source!r})
from pathlib import Path
started = time.perf_counter()
import scaledl.evaluation.gpu as gpu
from scaledl.layout import neusight_peer_root, vidur_network_root
imported_s = time.perf_counter() - started
data = Path({data!r})
config = gpu.GpuEvaluationConfig(
    parallel_labels=data / "imported" / "neusight" / "parallel_labels.parquet",
    vidur_root=vidur_network_root(), peer_root=neusight_peer_root(), n_jobs={n_jobs})
started = time.perf_counter()
metrics, predictions = gpu.evaluate_gpu(data / "imported" / "validated" / "neusight", config)
seconds = time.perf_counter() - started
out = Path({out!r})
predictions.to_pickle(out / "predictions.pkl")
(out / "metrics.json").write_text(json.dumps(metrics, sort_keys=True, default=str))
print(json.dumps({{"seconds": seconds, "import_s": imported_s, "module": gpu.__file__}}))
"""


def _comparable(metrics: dict) -> dict:
    """The metrics less their wall times (``runtime_s``, each fold's ``fit_predict_s``)."""
    metrics = json.loads(json.dumps(metrics))
    metrics.pop("runtime_s", None)
    for protocol in ("leave_one_model_out", "leave_one_gpu_out"):
        for fold in (metrics.get(protocol) or {}).get("folds", {}).values():
            for value in fold.values():
                if isinstance(value, dict):
                    value.pop("fit_predict_s", None)
    return metrics


def _run(source: Path, run_dir: Path, n_jobs: int, out: Path) -> dict:
    """One evaluation in a fresh interpreter (cwd: ``run_dir``, where config paths resolve)."""
    code = _CHILD.format(source=str(source), data=str(run_dir / "data"), n_jobs=n_jobs,
                         out=str(out))  # fmt: skip
    env = {**os.environ, "SCALEDL_EXTERNAL_DIR": str(run_dir / "external")}
    env.pop("SCALEDL_DATA_DIR", None)
    load_1m = os.getloadavg()[0]
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=run_dir, env=env)  # fmt: skip
    if run.returncode:
        raise SystemExit(f"evaluation failed ({source}):\n{run.stderr[-3000:]}")
    result = json.loads(run.stdout.strip().splitlines()[-1])
    return {"source": str(source), "load_1m_before": load_1m, **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--run-dir", type=Path, default=ROOT, help="where `make run` ran (data/, external/)"
    )
    parser.add_argument(
        "--sources", type=Path, nargs="+", default=[ROOT], help="folders holding scaledl/"
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs of each source")
    parser.add_argument("--n-jobs", type=int, default=2, help="n_jobs of the evaluation")
    args = parser.parse_args()
    run_dir = args.run_dir.resolve()
    tables = run_dir / "data" / "imported" / "validated" / "neusight"
    if not tables.is_dir():
        raise SystemExit(f"{tables} missing: run `make run` in {run_dir} first")
    sources = [s.resolve() for s in args.sources]
    for source in sources:
        if not (source / "scaledl" / "evaluation" / "gpu.py").is_file():
            raise SystemExit(f"{source}: no scaledl package (scaledl/evaluation/gpu.py)")
    runs, reference = [], None
    scratch = Path(tempfile.mkdtemp(prefix="bench_gpu_eval_"))
    try:
        for repeat in range(args.repeats):
            for source in sources:
                out = scratch / f"{len(runs)}"
                out.mkdir()
                run = _run(source, run_dir, args.n_jobs, out)
                metrics = _comparable(json.loads((out / "metrics.json").read_text()))
                predictions = pd.read_pickle(out / "predictions.pkl")
                if reference is None:
                    reference = (metrics, predictions)
                same = metrics == reference[0]
                try:
                    pd.testing.assert_frame_equal(predictions, reference[1], check_exact=True)
                except AssertionError:
                    same = False
                runs.append({"repeat": repeat, **run, "identical_to_first": same})
                print(json.dumps(runs[-1]), flush=True)
    finally:
        shutil.rmtree(scratch)
    write_result(
        "gpu_eval",
        {
            "n_jobs": args.n_jobs,
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "run_dir": str(run_dir),
            "runs": runs,
            "all_identical": all(r["identical_to_first"] for r in runs),
        },
    )


if __name__ == "__main__":
    main()
