"""History: the layout variants the recipe was chosen among, and the GNN correction.

Until issue 52 ``scaledl evaluate-layouts`` evaluated, beside the product's recipe
(:data:`~scaledl.parallel.recipe.RECIPE`), the variants of :data:`VARIANTS` on the same
leave-one-layout-out folds, each composition followed by the ridge correction:

* ``current``: the layer-wise and all-reduce models fitted on the plain data-parallel
  workloads only, every collective hidden behind compute, collectives without training rows
  derived from the all-reduce model (the uncalibrated method); its data-parallel predictions
  are in-sample and uncorrected (ranking only);
* the four candidates of :data:`~scaledl.parallel.recipe.CANDIDATES` (``fold_layers``,
  ``plain_layers``, each with and without per-lane overlap factors), the recipe among them;
* ``selected``: per fold, the candidate with the lowest mean corrected MRE in an *inner*
  leave-one-kind-out over the fold's training workloads (:func:`select`: nested
  cross-validation, so the choice never sees the held-out kind);
* ``gnn`` and ``gnn_no_edges``: the recipe's composition corrected by the runtime GNN over its
  layout graphs (``layout_gnn.py`` beside this script) instead of the ridge, with and without
  message passing, each paired per held-out workload with the other and with the recipe.

Every variant's corrected MRE is paired per workload with ``current``'s. The committed
``docs/results/layouts.json`` holds these figures as the product wrote them then; the product
now writes the recipe's part of it only. This script reproduces the whole file (the product's
part through :func:`scaledl.evaluation.profiled_layouts.evaluate_layouts`, the same code path); with
``--page`` the registry's ``layout-variants`` block (:mod:`scaledl.report.blocks.registry`)
renders the written file into ``docs/history/layout-variants.md`` (``scaledl docs render
--block layout-variants`` renders the committed file).

Run (the committed profiles; several minutes)::

    PYTHONPATH=. python benchmarks/history/layout_variants.py \\
        --repeat datasets/layouts-cpu/repeat/validated \\
        --across datasets/layouts-cpu/history/1151/validated \\
        --out /tmp/layouts.json --check docs/results/layouts.json --page

(the committed file's ``repeats`` and ``across`` datasets; ``--check`` exits 1 naming the
top-level keys that differ).
Imports ``scaledl``; nothing in ``scaledl`` imports it.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np

from scaledl.devices.local import local_cpu_name
from scaledl.evaluation.envelope import EvaluationResult
from scaledl.evaluation.profiled_layouts import (
    HEADLINE,
    KINDS,
    evaluate_headline,
    layout_targets,
    measured_agreement,
    measured_window,
    paired,
)
from scaledl.parallel.collective_fit import fit_collective_model
from scaledl.parallel.predict import LayoutComposer
from scaledl.parallel.ranking import kendall_by_model, model_label
from scaledl.parallel.recipe import CANDIDATES, RECIPE, LayerModels
from scaledl.parallel.training import (
    LayoutContext,
    collective_rows,
    fit_correction,
    load_layout_context,
)
from scaledl.report.blocks.layout_variants import gnn_ablation
from scaledl.report.blocks.registry import BLOCKS, BlockError, write_page
from scaledl.workloads.parallelism import layout_label


def _sibling(name: str):
    """Load ``<name>.py`` beside this file (the history scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


layout_gnn = sys.modules.get("layout_gnn") or _sibling("layout_gnn")

#: The variants compared in one run (module docstring), the first is the baseline.
VARIANTS = {
    "current": "layer-wise models on the data-parallel workloads, collectives hidden",
    "fold_layers": "layer-wise models on every training workload's layer timings",
    "fold_layers_overlap": "fold_layers + per-lane overlap factors fitted on the training folds",
    "plain_layers": "fold_layers without the times that hold the layout's communication",
    "plain_layers_overlap": "plain_layers + per-lane overlap factors",
    "selected": "per fold, the candidate with the lowest inner leave-one-kind-out MRE",
    "gnn": "the recipe's composition corrected by the runtime GNN over its layout graphs",
    "gnn_no_edges": "gnn without edges (no message passing): the ablation",
}
#: The GNN corrections (``layout_gnn.py``): message passing or not.
GNN_VARIANTS = {"gnn": True, "gnn_no_edges": False}
#: Paired comparisons each GNN variant reports besides the one with ``current``.
GNN_PAIRED = {"gnn": ("gnn_no_edges", "plain_layers_overlap"),
              "gnn_no_edges": ("plain_layers_overlap",)}  # fmt: skip
#: The history page's generated block (:mod:`scaledl.report.blocks.registry`).
BLOCK = BLOCKS["layout-variants"]


def select(ctx: LayoutContext, scope: np.ndarray) -> tuple[str, dict[str, float], dict[str, dict]]:
    """The candidate with the lowest inner leave-one-kind-out MRE on ``scope``.

    Each kind of ``scope`` is held out in turn; a candidate's score is the mean over the
    inner folds of its corrected MRE on the inner held-out workloads (every kind weighs
    the same, as the targets do); the first of :data:`CANDIDATES` wins a tie.

    Returns:
        The name, every candidate's score and every candidate's MRE per held-out kind.
    """
    by_kind: dict[str, dict[str, float]] = {name: {} for name in CANDIDATES}
    for kind in dict.fromkeys(ctx.kind[scope].tolist()):
        held = ctx.kind[scope] == kind
        m = ctx.measured[scope][held]
        for name, (_, corrected, _, _) in ctx.candidates(scope, held, kind).items():
            by_kind[name][kind] = float(np.mean(np.abs(corrected[held] - m) / m))
    mean = {name: float(np.mean(list(v.values()))) for name, v in by_kind.items()}
    best = min(mean, key=lambda name: (mean[name], list(CANDIDATES).index(name)))
    return best, mean, by_kind


def evaluate_variants(directory: Path, seed: int = 0) -> dict[str, Any]:
    """Leave-one-layout-out MRE of every variant, paired comparisons and the ranking tau.

    Args:
        directory: a validated profile dataset with data-parallel and layout workloads.
        seed: seed of the bootstrap.

    Returns:
        The result as ``evaluate-layouts`` wrote it until issue 52: the product's keys
        (:func:`scaledl.evaluation.profiled_layouts.evaluate_layouts`), the headline's folds with
        ``corrected_vs_current``, ``variants`` (per variant its folds and ranking) and every
        variant's predictions in ``workloads``.
    """
    ctx = load_layout_context(directory)
    run = _Run(ctx, seed)
    for kind in [k for k in ("ddp", *KINDS) if k in ctx.kinds.values()]:
        run.fold(kind)
    return run.result(directory)


def repeat_summary(result: dict[str, Any], main: dict[str, Any] | None = None) -> dict[str, Any]:
    """A repeated profile's :func:`evaluate_variants` summarised: targets and GNN ablation.

    Returns:
        ``{"dataset", "measured_utc", "n_workloads", "headline", "targets", "gnn_ablation"}``
        (:func:`gnn_ablation`), and ``measured_tau`` with ``main``.
    """
    keys = ("dataset", "measured_utc", "n_workloads", "headline", "targets")
    out = {**{k: result[k] for k in keys}, "gnn_ablation": gnn_ablation(result["variants"])}
    if main is not None:
        out["measured_tau"] = measured_agreement(main, result)
    return out


class _Run:
    """Predictions of every variant, filled fold by fold, and the result built from them."""

    def __init__(self, ctx: LayoutContext, seed: int) -> None:
        self.ctx, self.seed = ctx, seed
        n = len(ctx.ids)
        self.pred = {v: {"composed": np.full(n, np.nan), "corrected": np.full(n, np.nan)}
                     for v in VARIANTS}  # fmt: skip
        self.info: dict[str, dict[str, dict]] = {v: {} for v in VARIANTS}

    def fold(self, kind: str) -> None:
        """Hold ``kind`` out: fit on the other kinds, predict every variant's held-out rows."""
        ctx = self.ctx
        held = ctx.kind == kind
        scope = np.arange(len(ctx.ids))
        if kind != "ddp":
            self._current(kind, held)
        candidates = ctx.candidates(scope, held, kind)
        for name, (composed, corrected, info, _) in candidates.items():
            self._fill(name, kind, held, composed, corrected, info)
        chosen, scores, _ = select(ctx, scope[~held])
        composed, corrected, info, _ = candidates[chosen]
        info = {**info, "selected": chosen, "inner_mre": scores}
        self._fill("selected", kind, held, composed, corrected, info)
        self._gnn(kind, held, candidates[RECIPE])

    def _gnn(self, kind: str, held: np.ndarray, recipe_fit: tuple) -> None:
        """The GNN corrections of the recipe's composition, fitted on the fold's training rows."""
        ctx, (_, _, info, recipe) = self.ctx, recipe_fit
        composer = LayoutComposer(LayerModels(recipe.layerwise, None), ctx.wlist,
                                  recipe.collectives)  # fmt: skip
        pred = composer.predict(recipe.overlap)
        graphs = layout_gnn.layout_graphs(composer, pred, ctx.wlist)
        for name, edges in GNN_VARIANTS.items():
            corrected = layout_gnn.fit_predict_gnn(graphs, ctx.measured, ~held, edges=edges)
            self._fill(name, kind, held, pred.iteration_ms, corrected, info)

    def _current(self, kind: str, held: np.ndarray) -> None:
        """The uncalibrated method: layer-wise models of the data-parallel workloads."""
        ctx = self.ctx
        train_ids = [wid for wid, h in zip(ctx.ids, held, strict=True) if not h]
        cm = fit_collective_model(collective_rows(ctx.tables, set(train_ids)), ctx.stage.allreduce)
        method = LayerModels(ctx.stage.layerwise, ctx.stage.allreduce)
        pred = LayoutComposer(method, ctx.wlist, cm).predict()
        corrected = fit_correction(pred, ctx.wlist, ctx.measured, ~held).apply(pred, ctx.wlist)
        self._fill("current", kind, held, pred.iteration_ms, corrected,
                   {"collectives": dict(cm.source)})  # fmt: skip
        if kind == KINDS[-1]:  # in-sample, uncorrected data-parallel rows (ranking only)
            is_ddp = ctx.kind == "ddp"
            for name in ("composed", "corrected"):
                self.pred["current"][name][is_ddp] = pred.iteration_ms[is_ddp]

    def _fill(self, variant, kind, held, composed, corrected, info) -> None:
        self.pred[variant]["composed"][held] = composed[held]
        self.pred[variant]["corrected"][held] = corrected[held]
        self.info[variant][kind] = {"n_workloads": int(held.sum()), **info}

    def _fold_result(self, variant: str, kind: str) -> dict[str, Any]:
        held = self.ctx.kind == kind
        m = self.ctx.measured[held]
        err = {k: np.abs(v[held] - m) / m for k, v in self.pred[variant].items()}
        out = {**self.info[variant][kind], "mre_composed": float(err["composed"].mean()),
               "mre_corrected": float(err["corrected"].mean())}  # fmt: skip
        if held.sum() >= 2:
            out["corrected_vs_composed"] = paired(err["corrected"], err["composed"], self.seed)
            others = (("current",) if variant != "current" and kind in self.info["current"]
                      else ()) + GNN_PAIRED.get(variant, ())  # fmt: skip
            for other in others:
                base = self.pred[other]["corrected"][held]
                out[f"corrected_vs_{other}"] = paired(err["corrected"], np.abs(base - m) / m,
                                                      self.seed)  # fmt: skip
        return out

    def result(self, directory) -> dict[str, Any]:
        """The JSON-safe result (:func:`evaluate_variants`)."""
        ctx, variants = self.ctx, {}
        for v, description in VARIANTS.items():
            folds = {k: self._fold_result(v, k) for k in self.info[v]}
            ranking = {"models": kendall_by_model(ctx.wlist, ctx.measured, self.pred[v])}
            variants[v] = {"description": description, "folds": folds, "ranking": ranking}
        head = variants[HEADLINE]
        return {
            "dataset": str(directory),
            "measured_utc": measured_window(ctx.tables, str(directory)),
            "n_workloads": len(ctx.ids),
            "n_by_kind": {k: int((ctx.kind == k).sum()) for k in ("ddp", *KINDS)},
            "headline": HEADLINE,
            "folds": head["folds"],
            "ranking": head["ranking"],
            "variants": variants,
            "targets": [t.to_dict() for t in layout_targets(head)],
            "workloads": self._rows(),
        }

    def _rows(self) -> list[dict[str, Any]]:
        ctx, rows = self.ctx, []
        for i, wid in enumerate(ctx.ids):
            row = {"workload_id": wid, "layout": layout_label(ctx.wlist[i]),
                   "model": model_label(ctx.wlist[i]), "kind": str(ctx.kind[i]),
                   "measured_ms": float(ctx.measured[i])}  # fmt: skip
            for v in VARIANTS:
                for name, values in self.pred[v].items():
                    row[f"{v}_{name}_ms"] = None if np.isnan(values[i]) else float(values[i])
            rows.append(row)
        return rows


def evaluate_all(data: Path, repeat: list[Path], across: list[Path]) -> dict[str, Any]:
    """The whole committed result: every variant on ``data`` and ``repeat``, ``across``."""
    result = evaluate_variants(data)
    result["repeats"] = [repeat_summary(evaluate_variants(r), result) for r in repeat]
    result["across"] = [evaluate_headline(a, result) for a in across]
    result["evaluated_on"] = local_cpu_name()
    return result


def main(argv: list[str] | None = None) -> int:
    """Evaluate every variant; write the result, compare it, rewrite the history page."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", type=Path, default=Path("datasets/layouts-cpu/validated"))
    parser.add_argument("--repeat", type=Path, action="append", default=[])
    parser.add_argument("--across", type=Path, action="append", default=[])
    parser.add_argument("--out", type=Path, required=True, help="the result JSON to write")
    parser.add_argument("--check", type=Path, help="a committed result to compare with, exactly")
    parser.add_argument("--page", action="store_true", help=f"rewrite {BLOCK.page}'s block")
    args = parser.parse_args(argv)
    result = EvaluationResult.of("layouts", evaluate_all(args.data, args.repeat, args.across))
    result.write(args.out)
    print(f"{args.out}: written")
    if args.page:
        try:
            write_page(BLOCK.page, [BLOCK], [args.out])  # rendered from the file just written
        except BlockError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"{BLOCK.page}: block rewritten from {args.out}")
    if args.check is not None:
        committed = EvaluationResult.read(args.check, "layouts").to_dict()
        written = result.to_dict()
        differ = sorted(k for k in committed.keys() | written.keys()
                        if committed.get(k) != written.get(k))  # fmt: skip
        if differ:
            print(f"{args.check}: differs from this run in {differ}", file=sys.stderr)
            return 1
        print(f"{args.check}: reproduced exactly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
