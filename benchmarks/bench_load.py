"""Benchmark of loading a predictor in a fresh process (target 3 s), and where the time goes.

A user's first ``scaledl predict`` pays the imports and the bundle's load:
``python -c "import scaledl; scaledl.load_predictor(PATH)"`` timed in ``--repeats`` fresh
interpreters one after the other (the median is the figure), then once more under
``python -X importtime`` to split the imports by top-level package (self time summed over each
package's modules). The same again with one prediction after the load
(``first_prediction_seconds_median`` and its import split): work or imports moved from the load
to the first prediction show there.

Needs a registered predictor (``make run``, or ``scaledl train --validated DIR --registry
DIR``). Run: ``python benchmarks/bench_load.py [--predictor DIR]``; writes
``benchmarks/results/load.json``.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

from common import DATA, FIRST_ROW, fresh_load_seconds, require_predictor, write_result

TARGET_S = 3.0
_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)")


def import_seconds_by_package(
    predictor: Path, top: int = 8, predict: bool = False
) -> dict[str, float]:
    """Import self time per top-level package of one fresh load, the ``top`` largest, seconds.

    Args:
        predictor: the bundle or name directory.
        top: packages reported.
        predict: also predict ``FIRST_ROW`` after the load (the first prediction's imports).

    Raises:
        SystemExit: the child failed.
    """
    code = f"import scaledl; p = scaledl.load_predictor({str(predictor)!r})"
    if predict:
        code += f"; p.predict([{FIRST_ROW!r}])"
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
        env=os.environ.copy(),
    )  # fmt: skip
    if run.returncode:
        raise SystemExit(f"benchmark child failed:\n{run.stderr[-3000:]}")
    totals: collections.Counter = collections.Counter()
    for line in run.stderr.splitlines():
        found = _IMPORT_LINE.match(line)
        if found:
            totals[found.group(2).split(".")[0]] += int(found.group(1))
    return {name: round(us / 1e6, 3) for name, us in totals.most_common(top)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--predictor", type=Path, default=DATA / "predictors" / "scaledl")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    require_predictor(args.predictor)
    load = fresh_load_seconds(args.predictor, args.repeats)
    first = fresh_load_seconds(args.predictor, args.repeats, predict=True)
    result = {
        "benchmark": "predictor load in a fresh process",
        "host": platform.node(),
        "cores": os.cpu_count(),
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "predictor": str(args.predictor),
        "repeats": args.repeats,
        "load_seconds_median": round(load["median"], 3),
        "load_seconds_samples": load["samples"],
        "load_target_seconds": TARGET_S,
        "load_within_target": load["median"] <= TARGET_S,
        "import_self_seconds_by_package": import_seconds_by_package(args.predictor),
        "first_prediction_seconds_median": round(first["median"], 3),
        "first_prediction_seconds_samples": first["samples"],
        "first_prediction_import_self_seconds_by_package": import_seconds_by_package(
            args.predictor, predict=True
        ),
    }
    write_result("load", result)


if __name__ == "__main__":
    main()
