"""Benchmark of the D-optimal exchange: 20,000 candidates, ~40 model terms, choose 100.

Candidates are a seeded random 20,000-row subset of a full factorial of workload factors (five
families x hidden 5 x layers 4 x FFN ratio 3 x head dim 3 x seq 5 x batch 4 x world 4 x mode 2),
coded by :class:`scaledl.design.features.FeatureModel` (full second-order model: 41 terms). The
D-optimal design is compared with the median of random 100-row subsets and with a Latin
hypercube sample. The quick preset's design is timed as well: first the tracing of its
candidates' architectures and their information matrices (``candidate_information``, a cold
process), then ``generate_design`` (``doptimal``: the criterion matched to the predictor,
:mod:`scaledl.design.matched`, best of the preset's starts), with that criterion of the chosen
design against the random and Latin-hypercube designs of the same size (the response-surface
log determinants are kept for comparison with older results).

Run: ``python benchmarks/bench_design.py``; writes ``benchmarks/results/design.json``.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from scaledl.design import (
    candidate_workloads,
    d_efficiency,
    d_optimal_indices,
    generate_design,
    load_preset,
)
from scaledl.design.doptimal import log_det_information
from scaledl.design.features import FeatureModel
from scaledl.design.matched import candidate_information
from scaledl.design.samplers import lhs_indices, random_indices
from scaledl.io.atomic import write_atomic

N_CANDIDATES = 20_000
N_CHOOSE = 100
N_STARTS = 10
N_RANDOM = 200
TARGET_S = 10.0
RESULT = Path(__file__).resolve().parent / "results" / "design.json"


def candidate_factors(seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    levels = {
        "hidden_size": [256, 512, 1024, 2048, 4096],
        "num_layers": [4, 8, 16, 32],
        "ffn_ratio": [2, 2.6875, 4],
        "head_dim": [32, 64, 128],
        "seq_len": [128, 256, 512, 1024, 2048],
        "batch_size": [1, 4, 16, 64],
        "world_size": [1, 4, 16, 64],
    }
    families = ["bert", "vit", "t5", "llama", "deit"]
    modes = ["train", "infer"]
    grid = np.array(
        list(itertools.product(range(5), range(2), *[range(len(v)) for v in levels.values()]))
    )
    rows = np.random.default_rng(seed).choice(len(grid), N_CANDIDATES, replace=False)
    grid = grid[np.sort(rows)]
    numeric = {
        name: np.asarray(v, dtype=float)[grid[:, 2 + k]]
        for k, (name, v) in enumerate(levels.items())
    }
    categorical = {"family": np.array(families)[grid[:, 0]], "mode": np.array(modes)[grid[:, 1]]}
    return numeric, categorical


def main() -> dict:
    numeric, categorical = candidate_factors()
    model = FeatureModel.fit(numeric, categorical, "full")
    X = model.transform(numeric, categorical)
    n_cand, p = X.shape

    t0 = time.perf_counter()
    idx, log_det = d_optimal_indices(X, N_CHOOSE, seed=0, n_starts=N_STARTS)
    seconds = time.perf_counter() - t0

    random_lds = [
        log_det_information(X[random_indices(n_cand, N_CHOOSE, seed=s)]) for s in range(N_RANDOM)
    ]
    lhs_ld = log_det_information(
        X[lhs_indices(model.unit_coordinates(numeric, categorical), N_CHOOSE, seed=0)]
    )
    random_median = float(np.median(random_lds))

    preset = load_preset("quick")
    candidates = candidate_workloads(preset, "cpu")  # generate_design's default device
    t1 = time.perf_counter()
    info = candidate_information(candidates)  # traces every architecture (cold process)
    trace_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    quick = generate_design(preset, preset["design"]["n_workloads"], seed=0)
    quick_s = time.perf_counter() - t2
    quick_random = generate_design(preset, preset["design"]["n_workloads"], sampler="random")
    quick_lhs = generate_design(preset, preset["design"]["n_workloads"], sampler="lhs")
    position = {w.workload_id: i for i, w in enumerate(candidates)}

    def matched(design) -> float:
        return round(info.criterion([position[i] for i in design.table["workload_id"]]), 4)

    result = {
        "benchmark": "d_optimal_exchange",
        "n_candidates": n_cand,
        "n_terms": p,
        "n_choose": N_CHOOSE,
        "n_starts": N_STARTS,
        "seconds": round(seconds, 3),
        "target_seconds": TARGET_S,
        "within_target": seconds <= TARGET_S,
        "log_det": round(log_det, 4),
        "d_efficiency": round(d_efficiency(log_det, N_CHOOSE, p), 4),
        "random_subsets": N_RANDOM,
        "random_median_log_det": round(random_median, 4),
        "random_median_d_efficiency": round(d_efficiency(random_median, N_CHOOSE, p), 4),
        "random_max_log_det": round(float(np.max(random_lds)), 4),
        "lhs_log_det": round(lhs_ld, 4),
        "log_det_gain_over_random_median": round(log_det - random_median, 4),
        "quick_preset": {
            "n_candidates": quick.n_candidates,
            "n_terms": quick.n_terms,
            "n_workloads": len(quick.table),
            "n_starts": preset["design"]["n_starts"],
            "trace_seconds": round(trace_s, 3),
            "seconds": round(quick_s, 3),
            "doptimal_matched_criterion": matched(quick),
            "random_matched_criterion": matched(quick_random),
            "lhs_matched_criterion": matched(quick_lhs),
            "doptimal_log_det": round(quick.log_det, 4),
            "doptimal_d_efficiency": round(quick.d_efficiency, 4),
            "random_log_det": round(quick_random.log_det, 4),
            "lhs_log_det": round(quick_lhs.log_det, 4),
            "chosen_per_family_world_size": {
                f"{fam}/ws{ws}": int(count)
                for (fam, ws), count in quick.table.groupby(["family", "world_size"]).size().items()
            },
        },
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
    }
    write_atomic(RESULT, json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
