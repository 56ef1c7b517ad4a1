"""NeuSight's 4-GPU rows (``-dp4``, ``-tp4``, ``-pp4_1``): ScaleDL composed, against NeuSight.

**What a label measures.** NeuSight (sitar-lab/NeuSight 6945927d) times these rows with
``scripts/asplos/run_label_distributed.py``: ``accelerate launch --use_megatron_lm`` of
``collect_label_distributed.py`` on 4 GPUs of one node, FP32, one kind of parallelism of degree
4 at a time, one micro-batch, no sequence parallelism, no activation recompute, no distributed
optimizer, gradient clipping 1.0, ``DDP_impl`` torch. From that code:

* the batch in the name is the **global batch**: ``per_device_batch_size = global_batch_size //
  dp_degree // num_micro_batches``, so a ``-dp4`` rank runs a quarter of it, a ``-tp4`` group
  and a ``-pp4_1`` pipeline all of it (``pp4_1``: 4 stages, 1 micro-batch);
* the model is Megatron-LM's GPT built by accelerate's Megatron-LM integration from the Hugging
  Face config (not the Hugging Face module the single-GPU labels time);
* ``e2e_latency`` is rank 0's CUDA-event time of ``model(**batch)`` plus
  ``accelerator.backward(loss)`` (the mean of the 10 fastest of 50 iterations). With the
  Megatron-LM integration the forward call runs accelerate's ``MegatronEngine.train_step``:
  forward and backward of every micro-batch through the pipeline, ``reduce_model_grads`` and
  ``optimizer.step`` (gradient clipping and Adam); ``accelerator.backward`` returns at once. So,
  unlike the single-GPU labels, it **includes the optimizer step**. Rank 0 is pipeline stage 0,
  whose backward ends last with one micro-batch.

**What ScaleDL composes**: :mod:`scaledl.parallel.megatron` (Megatron-LM's split of one rank's
layers, predicted by the GPU predictor fitted on the single-GPU labels only; collectives from
Vidur's NCCL all-reduces of the GPU's DGX system; Megatron's FP32 Adam step; the composition of
:mod:`scaledl.parallel.compose`), every choice fixed before these rows were looked at. The same
composition answers ``scaledl predict`` and ``scaledl plan --layouts`` for a GPU predictor.

NeuSight's own predictions of the same rows
(:func:`~scaledl.external.neusight_peer.load_peer_layout_predictions`) are compared paired on
the rows both predicted (:func:`~scaledl.stats.significance.paired_comparison`, BCa
bootstrap over rows); with 11 rows (3 or 4 per kind) every interval is wide.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scaledl.evaluation.targets import TargetResult, target
from scaledl.external.neusight import _NAME_RE
from scaledl.models.kernel import KernelGraphMethod
from scaledl.parallel.measured_collectives import MeasuredCollectives, fit_system_allreduce
from scaledl.parallel.megatron import VIDUR_SYSTEM, predict_layout_row
from scaledl.stats.significance import MIN_WORKLOADS, paired_comparison
from scaledl.workloads.spec import Workload

PEER_SOURCE = (
    "NeuSight's own predictions of its 4-GPU rows (sitar-lab/NeuSight 6945927d, MIT licence; "
    "external/neusight_peer/prediction)"
)
LABEL_SOURCE = (
    "NeuSight's 4-GPU Megatron-LM labels (external/neusight/label, -dp4/-tp4/-pp4_1; "
    "global batch in the name; forward, backward, gradient sync and optimizer step)"
)


def layout_workload(label: Any) -> Workload:
    """The workload spec of one ``parallel_labels`` row (the importer's ``workload`` JSON).

    Args:
        label: a row with ``file`` and ``workload``.

    Returns:
        The workload (its layout fields say the strategy and degree).

    Raises:
        ValueError: a null or unreadable ``workload`` (naming the label file and the field).
    """
    text = getattr(label, "workload", None)
    if not isinstance(text, str):
        raise ValueError(
            f"{label.file}: field 'workload' is {text!r}; re-import NeuSight (scaledl import "
            "neusight) so every 4-GPU label carries its layout's workload"
        )
    try:
        return Workload.from_record(json.loads(text), source=str(label.file))
    except ValueError as exc:  # json.JSONDecodeError and WorkloadError are ValueErrors
        raise ValueError(f"{label.file}: field 'workload' is not a workload spec: {exc}") from exc


def _layout_kind(file: str) -> str:
    """The label's layout suffix (``dp4``, ``tp4``, ``pp4_1``) from its file name."""
    m = _NAME_RE.match(Path(file).stem)
    if m is None or not m["strategy"]:
        raise ValueError(f"{file}: file name is not <model>-<mode>-<seq>-<batch>-<layout>")
    return str(m["suffix"])


def evaluate_layout_rows(
    method: KernelGraphMethod, labels: pd.DataFrame, vidur: pd.DataFrame, peer: pd.DataFrame
) -> dict[str, Any]:
    """Predict every 4-GPU label, compare with NeuSight's predictions of the same rows.

    Args:
        method: the GPU predictor fitted on the single-GPU labels only.
        labels: the import's ``parallel_labels`` (``file``, ``device_name``, ``model``,
            ``global_batch_size``, ``iteration_ms``, ``workload``).
        vidur: :func:`scaledl.external.vidur.load_vidur_allreduce`.
        peer: :func:`~scaledl.external.neusight_peer.load_peer_layout_predictions`.

    Returns:
        ``{"label_source", "peer_source", "rows", "not_modelled", "unmatched", "collectives",
        "summary", "targets", "ranking"}``: one row per predicted label (parts, both
        predictions, both relative errors), the labels not predicted and why, the rows without
        a NeuSight prediction, each system's collective model, :func:`layout_summary`,
        :func:`layout_targets` and :func:`layout_ranking`.

    Raises:
        ValueError: a label without a readable workload (naming the file and field).
    """
    peer_ms = {(r.gpu, r.stem): r.peer_ms for r in peer.itertuples(index=False)}
    models: dict[str, MeasuredCollectives] = {}
    rows, not_modelled, unmatched = [], [], []
    for label in labels.itertuples(index=False):
        gpu = str(label.device_name).split(":", 1)[-1]
        stem = Path(label.file).stem
        if gpu not in VIDUR_SYSTEM:
            not_modelled.append(f"{gpu} {stem}: no Vidur measurements of its system")
            continue
        workload = layout_workload(label)
        system = VIDUR_SYSTEM[gpu]
        if system not in models:
            models[system] = MeasuredCollectives(fit_system_allreduce(vidur, system), system)
        parts = predict_layout_row(method, workload, models[system])
        true = float(label.iteration_ms)
        theirs = peer_ms.get((gpu, stem))
        if theirs is None:
            unmatched.append(f"{gpu} {stem}")
        rows.append(
            {
                "gpu": gpu, "model": str(label.model), "layout": _layout_kind(label.file),
                "global_batch_size": int(label.global_batch_size),
                "per_rank_batch": workload.batch_size, "true_ms": true, **parts,
                "neusight_ms": theirs,
                "scaledl_re": abs(parts["scaledl_ms"] - true) / true,
                "neusight_re": None if theirs is None else abs(theirs - true) / true,
                "device_seen": workload.device_name in method.training_devices_,
                "vidur_system": system, "file": _label_name(label.file),
            }
        )  # fmt: skip
    summary = layout_summary(rows)
    return {
        "label_source": LABEL_SOURCE,
        "peer_source": PEER_SOURCE,
        "rows": rows,
        "not_modelled": not_modelled,
        "unmatched": unmatched,
        "collectives": {s: m.to_dict() for s, m in sorted(models.items())},
        "summary": summary,
        "targets": [t.to_dict() for t in layout_targets(summary)],
        "ranking": layout_ranking(rows),
    }


def layout_ranking(rows: list[dict]) -> dict[str, Any]:
    """Whether each predictor orders the layouts of one run as measured (a planner's question).

    Rows of the same GPU, model and global batch are one group (the layouts a planner would
    choose between); within each, every pair of layouts is ordered by measured time and by
    each prediction. A pair is *ordered right* when the prediction puts the faster one first.

    Args:
        rows: the ``rows`` of :func:`evaluate_layout_rows`.

    Returns:
        ``{"groups": [...], "pairs", "scaledl_right", "neusight_right"}``: per group its
        ``gpu``, ``model``, ``global_batch_size``, ``layouts`` in measured order and the
        pairs each ordered right; the totals over groups (``neusight_right`` over the pairs
        NeuSight predicted both of).
    """
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["gpu"], r["model"], r["global_batch_size"]), []).append(r)
    out = []
    for (gpu, model, batch), members in groups.items():
        members = sorted(members, key=lambda r: r["true_ms"])
        pairs = [(a, b) for i, a in enumerate(members) for b in members[i + 1 :]]
        if not pairs:
            continue
        peer = [(a, b) for a, b in pairs if a["neusight_ms"] is not None
                and b["neusight_ms"] is not None]  # fmt: skip
        out.append({
            "gpu": gpu, "model": model, "global_batch_size": batch,
            "layouts": [r["layout"] for r in members], "pairs": len(pairs),
            "scaledl_right": sum(a["scaledl_ms"] < b["scaledl_ms"] for a, b in pairs),
            "neusight_pairs": len(peer),
            "neusight_right": sum(a["neusight_ms"] < b["neusight_ms"] for a, b in peer),
        })  # fmt: skip
    return {
        "groups": out,
        "pairs": sum(g["pairs"] for g in out),
        "scaledl_right": sum(g["scaledl_right"] for g in out),
        "neusight_pairs": sum(g["neusight_pairs"] for g in out),
        "neusight_right": sum(g["neusight_right"] for g in out),
    }


def _paired(rows: list[dict]) -> dict[str, Any]:
    """MREs of both on the rows both predicted, and their paired comparison."""
    both = [r for r in rows if r["neusight_re"] is not None]
    ours = np.array([r["scaledl_re"] for r in both])
    theirs = np.array([r["neusight_re"] for r in both])
    out: dict[str, Any] = {
        "n": len(both),
        "mre_scaledl": float(ours.mean()) if len(both) else None,
        "mre_neusight": float(theirs.mean()) if len(both) else None,
    }
    if len(both) < MIN_WORKLOADS:
        out["paired"] = {"skipped": f"{len(both)} paired row(s); an interval needs 2"}
    else:
        out["paired"] = paired_comparison(ours, theirs, "scaledl", "neusight").to_dict()
    return out


def layout_summary(rows: list[dict]) -> dict[str, Any]:
    """ScaleDL against NeuSight on the paired rows: overall and per layout kind.

    Args:
        rows: the ``rows`` of :func:`evaluate_layout_rows`.

    Returns:
        ``{"overall": ..., "per_layout": {kind: ...}}``, each ``{"n", "mre_scaledl",
        "mre_neusight", "paired"}`` (``paired``: the
        :class:`~scaledl.stats.significance.Comparison` as a dict, ScaleDL minus NeuSight,
        or ``{"skipped": reason}``).
    """
    kinds = sorted({r["layout"] for r in rows})
    return {
        "overall": _paired(rows),
        "per_layout": {k: _paired([r for r in rows if r["layout"] == k]) for k in kinds},
    }


def layout_targets(summary: dict[str, Any]) -> list[TargetResult]:
    """The ``neusight_layouts`` target: on NeuSight's 4-GPU rows, ScaleDL's MRE <= NeuSight's.

    Args:
        summary: :func:`layout_summary`.

    Returns:
        Entries, overall then per layout kind: ``value`` ScaleDL's MRE, ``extra``
        ``mre_neusight``, ``n_rows`` and, when paired, ``difference`` (ScaleDL minus
        NeuSight) with ``difference_ci_low``/``difference_ci_high``.
    """
    spec = target("neusight_layouts")
    root = {"summary": summary}
    parts = [("all", "overall", summary["overall"])]
    parts += [(f"{k} rows", f"per_layout.{k}", s) for k, s in summary["per_layout"].items()]
    rows = []
    for name, part, s in parts:
        if s["mre_scaledl"] is None:
            rows.append(spec.result("no paired row", None, name=name))
            continue
        c = s["paired"]
        extra = {"mre_neusight": s["mre_neusight"], "n_rows": s["n"]}
        if "skipped" in c:
            interval = c["skipped"]
        else:
            interval = (
                f"difference {100 * c['mre_difference']:+.1f} points, 95% CI "
                f"{100 * c['ci_low']:+.1f} to {100 * c['ci_high']:+.1f} ({c['verdict']})"
            )
            extra |= {"difference": c["mre_difference"], "difference_ci_low": c["ci_low"],
                      "difference_ci_high": c["ci_high"]}  # fmt: skip
        rows.append(
            spec.result(
                f"{s['mre_scaledl']:.1%} vs {s['mre_neusight']:.1%} ({s['n']} rows); {interval}",
                spec.judge(root, part=part)[1],
                value=s["mre_scaledl"],
                extra=extra,
                name=name,
            )
        )
    return rows


def _label_name(path) -> str:
    """``<GPU folder>/<label file>``: the label below NeuSight's ``label/`` folder.

    The result file is committed; a path of the machine that wrote it would mean nothing
    elsewhere.
    """
    path = Path(path)
    return f"{path.parent.name}/{path.name}"
