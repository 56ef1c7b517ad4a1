"""Small, complete ``metrics.json`` contents for tests of the readers (report, summary, assets).

``metrics_dict`` returns the JSON mapping (schema 2), ``make_metrics`` the validated
:class:`~scaledl.evaluation.results.Metrics`. Values are chosen by the tests that read them.
"""

from __future__ import annotations

import copy
from typing import Any

from scaledl.evaluation.results import Metrics
from scaledl.evaluation.targets import target

FAMILIES = ("a", "b")


def summary(mre: float, rmse_s: float, n: int = 4) -> dict[str, Any]:
    return {"mre": mre, "rmse_s": rmse_s, "p50_re": mre, "p90_re": 2 * mre, "n": n}


def method(mre: float, rmse_s: float) -> dict[str, Any]:
    both = {"iteration": summary(mre, rmse_s), "epoch": summary(mre, 10 * rmse_s)}
    return {**both, "per_family": {f: copy.deepcopy(both) for f in FAMILIES}}


def mean(mre: float, rmse_s: float) -> dict[str, Any]:
    s = {k: v for k, v in summary(mre, rmse_s).items() if k != "n"}
    return {"iteration": s, "epoch": dict(s), "n_groups": len(FAMILIES)}


def comparison(a: str, b: str, mre_a: float, mre_b: float, half_width: float = 0.01,
               unit: str = "workload", n: int = 4) -> dict[str, Any]:  # fmt: skip
    """A comparison record of A against B with an interval of ``half_width`` around the
    difference and the verdict it implies."""
    d = mre_a - mre_b
    low, high = d - half_width, d + half_width
    verdict = "better" if high < 0 else "worse" if low > 0 else "not distinguishable"
    return {
        "method_a": a, "method_b": b, "mre_a": mre_a, "mre_b": mre_b, "mre_difference": d,
        "ci_low": low, "ci_high": high, "confidence_level": 0.95, "interval_method": "BCa",
        "unit": unit, "n_units": n, "n_repeats_a": 5, "n_repeats_b": 5, "n_resamples": 9999,
        "verdict": verdict, "label_repeats": 2.0,
    }  # fmt: skip


def split_comparisons(pairs: list[tuple[str, str, float, float]]) -> dict[str, Any]:
    """A split's significance block from ``(a, b, mre_a, mre_b)`` tuples."""
    methods = dict.fromkeys(m for a, b, _, _ in pairs for m in (a, b))
    return {
        "n_workloads": 4,
        "seeds": 5,
        "label_repeats": 2.0,
        "mre_per_seed": {m: [0.1] * 5 for m in methods},
        "comparisons": [comparison(*p) for p in pairs],
    }


def metrics_dict(scaledl_ood: float = 0.05, additive_ood: float = 0.5) -> dict[str, Any]:
    """A valid metrics mapping: ID, OOD over two families, extrapolation, learning curves."""
    ood_methods = {"scaledl": scaledl_ood, "additive": additive_ood, "analytical": 0.2}
    ood_rmse = {"scaledl": 0.01, "additive": 0.1, "analytical": 0.02}
    return {
        "schema_version": 2,
        "n_workloads": 10,
        "families": list(FAMILIES),
        "label_reproducibility": {
            "mre": 0.02,
            "median_re": 0.015,
            "p90_re": 0.05,
            "n_workloads": 8,
            "epoch_mre": 0.03,
            "per_world_size": {
                "1": {"mre": 0.01, "n_workloads": 4},
                "2": {"mre": 0.03, "n_workloads": 4},
            },
            "raw_mre": 0.04,
            "corrected_launches": 12,
            "slowdown_models": {"1": {"gemm_exponent": 0.5, "memory_exponent": 0.2}},
        },
        "splits": {
            "id": {"methods": {"scaledl": method(0.025, 0.01), "additive": method(0.2, 0.1)}},
            "ood": {
                "per_family": {
                    f: {m: method(v, ood_rmse[m]) for m, v in ood_methods.items()} for f in FAMILIES
                },
                "mean": {m: mean(v, ood_rmse[m]) for m, v in ood_methods.items()},
            },
            "extrapolation": {
                "methods": {"scaledl": method(0.1, 0.05)},
                "test_min_tokens_per_step": 512.0,
            },
        },
        "learning_curves": {
            "methods": {
                "scaledl": {
                    "samplers": {
                        "doptimal": {
                            "sizes": [10, 20, 40, 50],
                            "mre_mean": [0.2, 0.1, 0.08, 0.07],
                            "mre_std": [0.01, 0.01, 0.01, 0.0],
                            "mre_per_seed": [[0.2], [0.1], [0.08], [0.07]],
                            "prior_mre_mean": [0.25, 0.15, 0.1, 0.09],
                            "layerwise_d_efficiency": [0.9, 1.0, 1.0, 1.0],
                            "family_world_coverage": [1.0, 1.0, 1.0, 1.0],
                        },
                        "random": {
                            "sizes": [10, 20, 40, 50],
                            "mre_mean": [0.3, 0.2, 0.12, 0.07],
                            "mre_std": [0.02, 0.02, 0.01, 0.0],
                            "mre_per_seed": [[0.3], [0.2], [0.12], [0.07]],
                            "prior_mre_mean": None,
                            "layerwise_d_efficiency": [0.5, 0.8, 0.9, 1.0],
                            "family_world_coverage": [0.5, 1.0, 1.0, 1.0],
                        },
                    },
                    "n_fits": 7,
                    "fit_seconds": 1.5,
                    "pool_size": 50,
                    "design_terms": ["intercept", "log2_hidden_size"],
                    "design_order": "main",
                    "seeds": 1,
                    "comparisons": [
                        comparison("doptimal@20", "random@20", 0.1, 0.2, unit="seed", n=10)
                    ],
                    "halving": comparison(
                        "doptimal@20", "random@40", 0.1, 0.12, unit="seed", n=10
                    ),  # fmt: skip
                }
            }
        },
        "external": {"skipped": "include_external is false"},
        "gpu": {"skipped": "no imported GPU profiles (gpu_profiles)"},
        "sweep": {"skipped": "no 'bert' workloads: sweep figure skipped"},
        "intervals": intervals(),
        "significance": {
            "seeds": 5,
            "confidence_level": 0.95,
            "splits": {
                "id": split_comparisons([("scaledl", "additive", 0.025, 0.2)]),
                "ood": split_comparisons(
                    [
                        ("scaledl", "additive", scaledl_ood, additive_ood),
                        ("scaledl", "analytical", scaledl_ood, 0.2),
                    ]
                ),  # fmt: skip
            },
        },
        "ablations": {},
        "gnn_diagnosis": {"skipped": "no GNN on a prior was evaluated"},
        "split_sizes": {"id": {"train": 6, "val": 1, "test": 3}},
        "fit_counts": {"scaledl": 4, "additive": 4},
        "notes": [],
        "config": {"seed": 0},
        "runtime_s": {
            "load": 0.1,
            "splits": 1.0,
            "layerwise_stages": 0.5,
            "significance": 0.1,
            "sweep": 0.0,
            "learning_curve": 1.5,
            "external": 0.0,
            "intervals": 0.01,
            "figures": 0.2,
            "fit_seconds": {"scaledl": 1.0, "additive": 0.1},
            "total": 2.8,
        },
    }


def coverage(value: float, n: int = 20, width: float | None = 0.3) -> dict[str, Any]:
    """A :class:`~scaledl.evaluation.results.TargetCoverage` mapping (iteration and epoch)."""
    one = {
        "coverage": value,
        "coverage_ci_low": max(0.0, value - 0.15),
        "coverage_ci_high": min(1.0, value + 0.08),
        "median_relative_width": width,
        "n": n,
        "n_covered": round(value * n),
        "n_unbounded": 0,
        "calibration_size": n - 1,
        "calibration_families": None,
        "family_calibration": None,
    }
    return {"iteration": one, "epoch": dict(one)}


def intervals(id_coverage: float = 0.9, family_coverage: float = 0.85) -> dict[str, Any]:
    """An ``intervals`` section: ScaleDL's coverage on ID and on each left-out family."""
    return {
        "coverage": 0.9,
        "score": "abs log ratio",
        "library": "crepes 0.9.1",
        "id": {"methods": {"scaledl": coverage(id_coverage), "additive": coverage(0.95)}},
        "ood": {
            "per_family": {f: {"scaledl": coverage(family_coverage, 5)} for f in FAMILIES},
            "pooled": {"scaledl": coverage(family_coverage, 10)},
        },
        "extrapolation": {"skipped": "no extrapolation split"},
        "calibration": {"iteration": {"in_domain": 20, "unseen_family": 10}},
        "calibration_methods": {
            "iteration": {"in_domain": "conformal", "unseen_family": "conformal"}
        },
        "targets": [
            target("interval_coverage_id")
            .result(
                f"{id_coverage:.1%}",
                0.85 <= id_coverage <= 0.95,
                value=id_coverage,
                coverage="90%",
                name="ID",
                method="scaledl",
            )
            .to_dict()
        ],
    }


def make_metrics(**kwargs: Any) -> Metrics:
    """:func:`metrics_dict` validated into :class:`Metrics`."""
    return Metrics.from_dict(metrics_dict(**kwargs), source="<test metrics>")
