"""What the benchmarks share: the data root, the predictor check, fresh interpreters, results.

Each benchmark times its figures in a fresh interpreter (:func:`fresh_json`), so imports and
loading are part of what a new process pays; :func:`timed_twice` is the common case: load a
predictor, run one call twice (``cold``: the GNN built, architectures traced; ``warm``: cached,
as in a long-lived service) and report both times with the child's peak resident memory.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SCALEDL_DATA_DIR") or ROOT / "data")
RESULTS = Path(__file__).resolve().parent / "results"
#: The BERT the planner benchmarks plan (the quick preset's size range).
PLAN_MODEL = {
    "family": "bert",
    "hidden_size": 128,
    "num_layers": 2,
    "num_heads": 4,
    "intermediate_size": 512,
    "vocab_size": 2048,
    "seq_len": 128,
}
_TIMED_TWICE = """
import json, resource, time
import pandas as pd
import scaledl
predictor = scaledl.load_predictor({predictor!r})
{setup}
times = []
for _ in range(2):
    started = time.perf_counter()
    out = {call}
    times.append(time.perf_counter() - started)
{check}
print(json.dumps({{"cold_s": times[0], "warm_s": times[1], **({extra}),
                  "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}}))
"""


_FRESH_LOAD = """
import json, time
started = time.perf_counter()
import scaledl
predictor = scaledl.load_predictor({predictor!r})
{predict}
print(json.dumps({{"seconds": time.perf_counter() - started}}))
"""
#: The one workload of :func:`fresh_load_seconds` with ``predict``: the planned BERT, one rank.
FIRST_ROW = {**PLAN_MODEL, "batch_size": 4, "world_size": 1, "dataset_size": 1024}


def fresh_load_seconds(predictor: Path | str, repeats: int = 5, predict: bool = False) -> dict:
    """Seconds to ``import scaledl; scaledl.load_predictor(predictor)`` in fresh interpreters.

    Args:
        predictor: the bundle or name directory.
        repeats: fresh processes, one after the other (>= 1).
        predict: also predict :data:`FIRST_ROW` (on the predictor's device) in each process:
            the first prediction's seconds, imports it needs included.

    Returns:
        ``median`` (seconds) and ``samples`` (each process's seconds, in order).
    """
    call = f"predictor.predict([{FIRST_ROW!r}])" if predict else ""
    code = _FRESH_LOAD.format(predictor=str(predictor), predict=call)
    samples = [fresh_json(code)["seconds"] for _ in range(repeats)]
    return {"median": statistics.median(samples), "samples": [round(s, 3) for s in samples]}


def require_predictor(path: Path) -> None:
    """Exit with a message when ``path`` is neither a bundle nor a name directory.

    Raises:
        SystemExit: no ``latest`` and no ``manifest.json`` under ``path``.
    """
    if not (path / "latest").exists() and not (path / "manifest.json").exists():
        raise SystemExit(f"{path}: no predictor: run `make run` first")


def fresh_json(code: str, *args: str, env: dict | None = None) -> dict:
    """Run ``code`` in a fresh interpreter and return the JSON of its last output line.

    Raises:
        SystemExit: the child failed (the tails of its output are shown).
    """
    run = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    if run.returncode:
        raise SystemExit(f"benchmark child failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def timed_twice(
    predictor: Path | str, call: str, setup: str = "", check: str = "", extra: str = "{}"
) -> dict:
    """Load ``predictor`` in a fresh interpreter and time ``call`` twice.

    Args:
        predictor: the bundle or name directory.
        call: the expression timed (``predictor`` and ``pd`` are defined); its value is ``out``.
        setup: statements run after loading, before timing.
        check: statements run after timing (asserts on ``out``).
        extra: an expression of a dict merged into the output (figures of ``out``).

    Returns:
        ``cold_s``, ``warm_s`` (seconds), ``peak_kib`` (the child's peak RSS, Linux KiB) and
        the keys of ``extra``.
    """
    code = _TIMED_TWICE.format(
        predictor=str(predictor), setup=setup, call=call, check=check, extra=extra
    )
    return fresh_json(code)


def write_result(name: str, result: dict) -> None:
    """Write ``benchmarks/results/<name>.json`` atomically and print it."""
    from scaledl.io.atomic import write_atomic

    text = json.dumps(result, indent=2)
    write_atomic(RESULTS / f"{name}.json", text + "\n")
    print(text)
