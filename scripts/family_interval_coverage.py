"""Per-family coverage of the unseen-family intervals, re-scored on an evaluation's predictions.

Reads a ``predictions.parquet`` written by ``scaledl evaluate`` (``make run``) and scores the
leave-one-family-out intervals with the evaluation's own code
(:func:`scaledl.evaluation.coverage.interval_coverage` on the first seed's rows, as the
evaluation's interval stage does, and :func:`scaledl.evaluation.coverage.family_coverage` on the
seed-mean predictions, as the reference evaluation does), so a change of the calibration rule
(:func:`scaledl.models.intervals.family_half_width`) can be judged without refitting a model::

    .venv/bin/python scripts/family_interval_coverage.py data/reports/predictions.parquet \
        [--method scaledl] [--coverage 0.9] [--json out.json]

Prints one row per left-out family and target: how its interval was calibrated, from how many
families, its coverage with the exact 95% Clopper-Pearson interval and its median relative
width; then the interval a family never seen gets from all the families, on the seed-mean
predictions (a registered bundle's own calibration gives a somewhat different interval).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from scaledl.evaluation.coverage import family_coverage, interval_coverage
from scaledl.models.intervals import CalibrationError

#: Columns the scoring reads (besides the predicted and measured times it checks itself).
REQUIRED_COLUMNS = ("split", "method", "seed")


def rows_of(per_family: dict, method: str, view: str) -> list[dict]:
    """Flat rows ``view, family, target, calibration, families, coverage, ci, width``."""
    out = []
    for family, by in per_family.items():
        for target, s in by.get(method, {}).items():
            if s is None:
                continue
            out.append(
                {
                    "view": view,
                    "family": family,
                    "target": target,
                    "calibration": s["family_calibration"],
                    "families": s["calibration_families"],
                    "coverage": s["coverage"],
                    "ci_low": s["coverage_ci_low"],
                    "ci_high": s["coverage_ci_high"],
                    "median_relative_width": s["median_relative_width"],
                    "n": s["n"],
                    "n_unbounded": s["n_unbounded"],
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    """Score the parquet named on the command line; 2 on bad input (one-line message)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictions", type=Path)
    parser.add_argument("--method", default="scaledl")
    parser.add_argument("--coverage", type=float, default=0.9)
    parser.add_argument("--json", type=Path, default=None, help="Also write the rows as JSON")
    args = parser.parse_args(argv)
    try:
        if not args.predictions.is_file():
            raise ValueError("not a file (a predictions.parquet of `scaledl evaluate`)")
        frame = pd.read_parquet(args.predictions)
        missing = sorted(set(REQUIRED_COLUMNS) - set(frame.columns))
        if missing:
            raise ValueError(
                f"columns {missing} missing (a predictions.parquet of `scaledl evaluate`)"
            )
        ood = frame[frame["split"].astype(str).str.startswith("ood/")]
        if ood.empty or args.method not in set(ood["method"]):
            raise ValueError(f"no leave-one-family-out prediction of {args.method!r}")
        first_seed = ood[ood["seed"] == ood["seed"].min()]
        section, _ = interval_coverage(first_seed, args.coverage)
        seed_mean = family_coverage(ood, args.coverage)
    except (OSError, ValueError, KeyError, CalibrationError) as exc:
        print(f"{args.predictions}: {exc}", file=sys.stderr)
        return 2
    rows = rows_of(section["ood"]["per_family"], args.method, "first seed (make run)")
    rows += rows_of(seed_mean["per_family"], args.method, "seed mean (reference)")
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    new = seed_mean["new_family"][args.method]
    width = "unbounded" if new["relative_width"] is None else f"{new['relative_width']:.1%}"
    print(
        f"new family, seed-mean view ({new['families']} families, {new['family_calibration']}): "
        f"[{new['low_factor']:.3f}, {new['high_factor'] or float('inf'):.3f}] x prediction, "
        f"relative width {width} (a registered bundle calibrates on its own "
        "fit's residuals: its interval differs)"
    )
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": rows, "new_family": new}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
