"""Write the layout dataset's workloads: one BERT and one Llama under eight parallel layouts.

Writes ``datasets/layouts-cpu/workloads.yaml``; the workloads are then profiled and validated
with the product's own commands (the whole profile under the machine's CPU lock)::

    .venv/bin/python scripts/build_layout_dataset.py
    .venv/bin/scaledl profile --workloads datasets/layouts-cpu/workloads.yaml \
        --out datasets/layouts-cpu/profiles --preset datasets/layouts-cpu/preset.yaml
    .venv/bin/scaledl validate datasets/layouts-cpu/profiles
    .venv/bin/scaledl docs render --block datasheet-layouts-cpu
    .venv/bin/python scripts/build_layout_dataset.py --summarize

``--summarize`` writes ``datasets/layouts-cpu/summary.json`` from the validated tables: per
layout the launches kept, the launch-to-launch label MRE (raw and host-drift corrected,
:func:`scaledl.evaluation.reproducibility.label_quality`'s measure), and for the pipelines the
measured bubble share of the instrumented iteration per stage beside GPipe's and 1F1B's
``(p - 1) / (m + p - 1)``.

Decisions (recorded in ``datasets/layouts-cpu/DATASHEET.md``):

* **Architectures.** A BERT and a Llama from the middle of the quick preset's range: hidden
  size 128 (4 heads of 32; Llama with 4 key/value heads, so ``tp_size=2`` splits them), 2
  blocks (``pp_size=2`` puts one in each stage), feed-forward ratio 4, 64 tokens.
* **Layouts** (world size 2): ``dp2`` (DDP), ``dp2-zero1``, ``dp2-zero2``, ``dp2-fsdp``,
  ``tp2``, ``pp2-gpipe-m2``, ``pp2-gpipe-m4``, ``pp2-1f1b-m4``.
* **Batch sizes** 4 and 8 samples per data-parallel replica; 8 steps per epoch
  (``dataset_size = 8 * batch_size * dp_size``).
* **More tensor-parallel workloads** (2026-12-02): ``tp2`` also at batch 2 and 6
  (:data:`EXTRA`), so the tensor-parallel fold holds 8 workloads, not 4 (at world size 2 there
  is one tensor-parallel layout, against three sharded and three pipelined ones). The batches
  lie inside the range of the micro-batches the other kinds' layers are measured at (1-8), so
  the fold is not also a batch extrapolation; a model with one layout is not ranked (Kendall's
  tau needs three).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import yaml

from scaledl.evaluation.reproducibility import repeat_relative_errors
from scaledl.models.data import launch_labels, read_tables
from scaledl.workloads.parallelism import layout_label
from scaledl.workloads.spec import Workload

ROOT = Path("datasets/layouts-cpu")
ARCHITECTURES = {
    "bert": {"family": "bert", "vocab_size": 2048, "max_positions": 256},
    "llama": {"family": "llama", "num_kv_heads": 4, "vocab_size": 2048, "max_positions": 256},
}
SHAPE = {"hidden_size": 128, "num_layers": 2, "num_heads": 4, "intermediate_size": 512,
         "seq_len": 64}  # fmt: skip
LAYOUTS = (
    {"dp_size": 2},
    {"dp_size": 2, "sharding": "zero1"},
    {"dp_size": 2, "sharding": "zero2"},
    {"dp_size": 2, "sharding": "fsdp"},
    {"tp_size": 2},
    {"pp_size": 2, "micro_batches": 2, "pipeline_schedule": "gpipe"},
    {"pp_size": 2, "micro_batches": 4, "pipeline_schedule": "gpipe"},
    {"pp_size": 2, "micro_batches": 4, "pipeline_schedule": "1f1b"},
)
BATCH = (4, 8)
#: Layouts profiled at further batch sizes (module docstring).
EXTRA = (({"tp_size": 2}, (2, 6)),)
STEPS_PER_EPOCH = 8


def workloads() -> list[dict]:
    """Every (architecture, layout, batch size) workload spec (module docstring)."""
    specs = []
    grid = [(layout, BATCH) for layout in LAYOUTS] + list(EXTRA)
    for arch in ARCHITECTURES.values():
        for layout, batches in grid:
            for batch in batches:
                dp = layout.get("dp_size", 1)
                spec = {**arch, **SHAPE, **layout, "world_size": 2, "batch_size": batch,
                        "mode": "train", "dataset_size": STEPS_PER_EPOCH * batch * dp}  # fmt: skip
                Workload.parse(spec, source="build_layout_dataset")  # fails loudly if invalid
                specs.append(spec)
    return specs


def bubbles(tables: dict[str, pd.DataFrame], layouts: pd.Series) -> pd.DataFrame:
    """Measured pipeline bubble per pipelined workload: idle share of the iteration per stage.

    For each instrumented step and rank, ``1 - busy / iteration`` with ``busy`` the summed
    forward and backward micro-batch times of the stage (``pipeline_timings``) and
    ``iteration`` the slowest rank's instrumented iteration; averaged over steps and ranks.
    """
    pipe = tables["pipeline_timings"]
    busy = (pipe["end_ms"] - pipe["start_ms"]).groupby(
        [pipe["run_id"], pipe["workload_id"], pipe["rank"], pipe["step"]]
    ).sum().rename("busy_ms").reset_index()  # fmt: skip
    iters = tables["iteration_timings"]
    iters = iters[iters["phase"] == "instrumented"]
    slowest = iters.groupby(["run_id", "step"])["iteration_ms"].max().rename("iteration_ms")
    joined = busy.merge(slowest.reset_index(), on=["run_id", "step"])
    joined["bubble"] = 1.0 - joined["busy_ms"] / joined["iteration_ms"]
    out = joined.groupby("workload_id")["bubble"].mean().rename("measured_bubble").to_frame()
    out["layout"] = layouts.reindex(out.index)
    return out


def summarize(root: Path) -> dict:
    """The dataset's figures per layout (module docstring), from ``root/validated``."""
    tables = read_tables(root / "validated")
    records = tables["workloads"].to_dict("records")
    specs = {r["workload_id"]: Workload.from_record(r, source="workloads") for r in records}
    layouts = pd.Series({wid: layout_label(w) for wid, w in specs.items()})
    launches = launch_labels(tables)
    launches["layout"] = launches["workload_id"].map(layouts)
    runs = pd.read_parquet(root / "profiles" / "runs.parquet")
    runs["layout"] = runs["workload_id"].map(
        {w.workload_id: layout_label(w) for w in map(Workload.parse, workloads())}
    )
    bubble = bubbles(tables, layouts)
    result = {}
    for layout, group in launches.groupby("layout"):
        raw = repeat_relative_errors(group, "iteration_ms_raw", "repeat")
        corrected = repeat_relative_errors(group, "iteration_ms", "repeat")
        entry = {
            "workloads": int(group["workload_id"].nunique()),
            "launches_profiled": int((runs["layout"] == layout).sum()),
            "launches_kept": int(len(group)),
            "label_ms_median": float(group["iteration_ms"].median()),
            "launch_mre_raw": float(raw.mean()),
            "launch_mre_corrected": float(corrected.mean()),
        }
        ws = [specs[wid] for wid in group["workload_id"].unique()]
        if ws[0].pp_size > 1:
            p, m = ws[0].pp_size, ws[0].micro_batches
            entry["bubble_theory"] = (p - 1) / (m + p - 1)
            entry["bubble_measured"] = float(
                bubble.loc[bubble["layout"] == layout, "measured_bubble"].mean()
            )
        result[layout] = entry
    return result


def main() -> None:
    """Write ``workloads.yaml`` of the layout dataset (or, ``--summarize``, its figures)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--summarize", action="store_true", help="write summary.json")
    args = parser.parse_args()
    if args.summarize:
        summary = summarize(args.root)
        text = json.dumps(summary, indent=1, sort_keys=True) + "\n"
        (args.root / "summary.json").write_text(text)
        print(text)
        return
    specs = workloads()
    args.root.mkdir(parents=True, exist_ok=True)
    (args.root / "workloads.yaml").write_text(yaml.safe_dump(specs, sort_keys=False))
    labels = sorted({layout_label(Workload.parse(s)) for s in specs})
    print(json.dumps({"workloads": len(specs), "layouts": labels}))


if __name__ == "__main__":
    main()
