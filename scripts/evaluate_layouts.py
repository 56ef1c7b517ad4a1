"""Evaluate the layout predictions on a profiled layout dataset; write the result and README block.

Leave-one-layout-out MRE (sharded, tensor-parallel, pipeline held out in turn), the learned
correction paired against the composition, Kendall's tau of the layout ranking
(:mod:`scaledl.parallel.evaluate`). Writes ``docs/results/layouts.json`` and, with ``--readme``,
the README's layouts block (:mod:`scaledl.parallel.results_block`).

Run: ``python scripts/evaluate_layouts.py DATASET_DIR [--out docs/results/layouts.json]
[--readme README.md]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scaledl.io.atomic import write_atomic
from scaledl.models.data import ProfileDataError
from scaledl.parallel.evaluate import evaluate_layouts
from scaledl.parallel.results_block import BOUNDS, layouts_markdown
from scaledl.report.summary import replace_block

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    """Parse the arguments, evaluate, write the result (exit 2 on bad input)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="validated tables of a layout profile")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "layouts.json")
    parser.add_argument("--readme", type=Path, default=None)
    args = parser.parse_args()
    try:
        result = evaluate_layouts(args.dataset)
    except (ProfileDataError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    write_atomic(args.out, json.dumps(result, indent=2) + "\n")
    print(f"result: {args.out}")
    if args.readme is not None:
        text = args.readme.read_text()
        write_atomic(args.readme, replace_block(text, layouts_markdown(result), str(args.readme),
                                                BOUNDS))  # fmt: skip
        print(f"README block: {args.readme}")
    print(layouts_markdown(result))


if __name__ == "__main__":
    main()
