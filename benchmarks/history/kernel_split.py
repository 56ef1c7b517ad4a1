"""History: the tensor-parallel kernels on the rank's shapes against the unit's divided by ``t``.

Until 2026-12-04 :mod:`scaledl.parallel.megatron` costed a tensor-parallel unit on one rank as
the whole unit's predicted kernel time divided by ``t``; since then a split unit's kernels are
its operators on the rank's own shapes (``sharded_kernel_ms``). This script reproduces the
comparison of the two on NeuSight's 4-GPU rows that ``scaledl evaluate-gpu-layouts`` wrote
until issue 52: the rows' ``scaledl_divide_ms`` / ``scaledl_divide_re`` and the
``kernel_split`` key of ``docs/results/gpu_layouts.json`` (those figures in the committed file
were written by the product before the comparison moved here; the line below the page's block,
``docs/results/gpu-layouts.md``, is :func:`kernel_split_line` of that key).

Run (the same inputs as ``scaledl evaluate-gpu-layouts``; fits the GPU predictor, minutes)::

    PYTHONPATH=. python benchmarks/history/kernel_split.py --out /tmp/kernel_split.json

or, without fitting anything, the page's sentence from a result that holds the key::

    PYTHONPATH=. python benchmarks/history/kernel_split.py --line docs/results/gpu_layouts.json

Imports ``scaledl``; nothing in ``scaledl`` imports it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scaledl.evaluation.envelope import EvaluationResult
from scaledl.evaluation.gpu import fit_scaledl
from scaledl.evaluation.gpu_layouts import evaluate_layout_rows, layout_ranking, layout_workload
from scaledl.external.neusight_peer import load_peer_layout_predictions
from scaledl.external.vidur import load_vidur_allreduce
from scaledl.layout import DataLayout, neusight_peer_root, vidur_network_root
from scaledl.models.data import load_profile_data
from scaledl.models.kernel import KernelGraphMethod
from scaledl.parallel.measured_collectives import MeasuredCollectives, fit_system_allreduce
from scaledl.parallel.megatron import (
    VIDUR_SYSTEM,
    compose_layout_row,
    divided_unit_layers,
    predict_rank_layers,
)
from scaledl.report.formatting import pct
from scaledl.stats.significance import MIN_WORKLOADS, paired_comparison
from scaledl.workloads.spec import Workload


def divided_layout_ms(
    method: KernelGraphMethod, workload: Workload, collectives: MeasuredCollectives
) -> float:
    """One layout's iteration, milliseconds, with a split unit's kernel time divided by ``t``.

    Args:
        method: the fitted GPU predictor.
        workload: the layout workload.
        collectives: the GPU system's collective model.

    Returns:
        The composed iteration (``scaledl_ms`` of the rule before 2026-12-04).
    """
    base, layers = divided_unit_layers(method, workload)
    layers = predict_rank_layers(method, base, layers)
    return compose_layout_row(layers, workload, collectives)["scaledl_ms"]


def with_divided_rows(
    method: KernelGraphMethod, labels: pd.DataFrame, result: dict[str, Any], vidur: pd.DataFrame
) -> list[dict]:
    """The result's rows with ``scaledl_divide_ms`` and ``scaledl_divide_re`` beside.

    Args:
        method: the GPU predictor ``result`` was evaluated with.
        labels: the labels ``result`` was evaluated on.
        result: :func:`~scaledl.evaluation.gpu_layouts.evaluate_layout_rows`.
        vidur: the Vidur all-reduce table ``result`` was evaluated with.

    Returns:
        A copy of ``result["rows"]``, each row with the two columns.

    Raises:
        ValueError: the rows are not those of ``labels`` (naming the counts).
    """
    predicted = [label for label in labels.itertuples(index=False)
                 if str(label.device_name).split(":", 1)[-1] in VIDUR_SYSTEM]  # fmt: skip
    if len(predicted) != len(result["rows"]):
        raise ValueError(f"result: {len(result['rows'])} rows for {len(predicted)} labels")
    models: dict[str, MeasuredCollectives] = {}
    rows = []
    for label, row in zip(predicted, result["rows"], strict=True):
        system = row["vidur_system"]
        if system not in models:
            models[system] = MeasuredCollectives(fit_system_allreduce(vidur, system), system)
        divide = divided_layout_ms(method, layout_workload(label), models[system])
        true = row["true_ms"]
        rows.append({**row, "scaledl_divide_ms": divide,
                     "scaledl_divide_re": abs(divide - true) / true})  # fmt: skip
    return rows


def kernel_split_comparison(rows: list[dict]) -> dict[str, Any]:
    """The tensor-parallel units' kernels on the rank's shapes against divided by ``t``.

    On the same rows, paired: the MRE over every row and over the tensor-parallel rows (the
    only ones that differ), and the pairs of layouts each orders as measured
    (:func:`~scaledl.evaluation.gpu_layouts.layout_ranking`).

    Args:
        rows: :func:`with_divided_rows`.

    Returns:
        ``{"all", "tp_rows", "ranking_operators", "ranking_divide"}``: ``all`` and
        ``tp_rows`` each ``{"n", "mre_operators", "mre_divide", "paired"}`` (``paired``:
        operators minus divide, or ``{"skipped": reason}``).
    """

    def paired(part: list[dict]) -> dict[str, Any]:
        ours = np.array([r["scaledl_re"] for r in part])
        before = np.array([r["scaledl_divide_re"] for r in part])
        out: dict[str, Any] = {"n": len(part), "mre_operators": float(ours.mean()),
                               "mre_divide": float(before.mean())}  # fmt: skip
        if len(part) < MIN_WORKLOADS:
            out["paired"] = {"skipped": f"{len(part)} row(s); an interval needs 2"}
        else:
            out["paired"] = paired_comparison(ours, before, "operators", "divide").to_dict()
        return out

    divided = [{**r, "scaledl_ms": r["scaledl_divide_ms"]} for r in rows]
    ranking = layout_ranking(divided)
    return {
        "all": paired(rows),
        "tp_rows": paired([r for r in rows if r["layout"].startswith("tp")]),
        "ranking_operators": {k: layout_ranking(rows)[k] for k in ("pairs", "scaledl_right")},
        "ranking_divide": {k: ranking[k] for k in ("pairs", "scaledl_right")},
    }


def kernel_split_line(split: dict[str, Any]) -> str:
    """The tensor-parallel kernels on the rank's shapes against divided by ``t``, in words.

    Args:
        split: :func:`kernel_split_comparison`.

    Returns:
        One sentence: both MREs (all rows, tensor-parallel rows) with the paired interval, and
        the pairs of layouts each orders as measured.
    """

    def part(name: str, p: dict[str, Any]) -> str:
        c = p["paired"]
        interval = (c["skipped"] if "skipped" in c else
                    f"{100 * c['mre_difference']:+.1f} points [{100 * c['ci_low']:+.1f}, "
                    f"{100 * c['ci_high']:+.1f}], {c['verdict']}")  # fmt: skip
        return (f"{name} {pct(p['mre_operators'])} against {pct(p['mre_divide'])} "
                f"({p['n']} rows; {interval})")  # fmt: skip

    ops, div = split["ranking_operators"], split["ranking_divide"]
    return (
        "Tensor-parallel units' kernels on the rank's own shapes (`scaledl/parallel/megatron.py`, "
        "the default) against the unit's kernels divided by t (before 2026-12-04), same rows: "
        f"{part('MRE', split['all'])}; {part('tp rows', split['tp_rows'])}; pairs of layouts "
        f"ordered as measured {ops['scaledl_right']} of {ops['pairs']} against "
        f"{div['scaledl_right']} of {div['pairs']}."
    )


def evaluate_kernel_split(
    method: KernelGraphMethod, labels: pd.DataFrame, vidur: pd.DataFrame, peer: pd.DataFrame
) -> dict[str, Any]:
    """The product's evaluation of the 4-GPU rows with the comparison added.

    Args:
        method, labels, vidur, peer: as :func:`~scaledl.evaluation.gpu_layouts.
            evaluate_layout_rows`.

    Returns:
        Its result, the rows with the divided columns and ``kernel_split``
        (:func:`kernel_split_comparison`).
    """
    result = evaluate_layout_rows(method, labels, vidur, peer)
    rows = with_divided_rows(method, labels, result, vidur)
    return {**result, "rows": rows, "kernel_split": kernel_split_comparison(rows)}


def main(argv: list[str] | None = None) -> int:
    """Run the comparison (``--out``) or print the page's sentence of a result (``--line``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--line", type=Path, help="a result JSON holding ``kernel_split``")
    parser.add_argument("--profiles", type=Path, help="validated imported GPU profiles")
    parser.add_argument("--parallel-labels", type=Path, help="the import's parallel_labels")
    parser.add_argument("--out", type=Path, help="where to write the result JSON")
    args = parser.parse_args(argv)
    if args.line is not None:
        result = EvaluationResult.read(args.line, "gpu_layouts").sections
        if "kernel_split" not in result:
            print(f"{args.line}: no 'kernel_split' key", file=sys.stderr)
            return 2
        print(kernel_split_line(result["kernel_split"]))
        return 0
    if args.out is None:
        parser.error("one of --line or --out is required")
    # the product's fit and inputs, as `scaledl evaluate-gpu-layouts` reads them
    data_layout = DataLayout.from_env()
    profiles = args.profiles or data_layout.imported_validated_dir()
    labels_path = args.parallel_labels or data_layout.imported_parallel_labels()
    data = load_profile_data(profiles)
    result = evaluate_kernel_split(
        fit_scaledl(data), pd.read_parquet(labels_path),
        load_vidur_allreduce(vidur_network_root()),
        load_peer_layout_predictions(neusight_peer_root()),
    )  # fmt: skip
    EvaluationResult.of("gpu_layouts", result).write(args.out)
    print(kernel_split_line(result["kernel_split"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
