"""Write the layout dataset's workloads: one BERT and one Llama under eight parallel layouts.

Writes ``datasets/layouts-cpu/workloads.yaml``; the workloads are then profiled and validated
with the product's own commands (the whole profile under the machine's CPU lock)::

    .venv/bin/python scripts/build_layout_dataset.py
    .venv/bin/scaledl profile --workloads datasets/layouts-cpu/workloads.yaml \
        --out datasets/layouts-cpu/profiles --preset quick
    .venv/bin/scaledl validate datasets/layouts-cpu/profiles
    .venv/bin/python -m scaledl.profiling.datasheet datasets/layouts-cpu/DATASHEET.md \
        datasets/layouts-cpu/validated

Decisions (recorded in ``datasets/layouts-cpu/DATASHEET.md``):

* **Architectures.** A BERT and a Llama from the middle of the quick preset's range: hidden
  size 128 (4 heads of 32; Llama with 4 key/value heads, so ``tp_size=2`` splits them), 2
  blocks (``pp_size=2`` puts one in each stage), feed-forward ratio 4, 64 tokens.
* **Layouts** (world size 2): ``dp2`` (DDP), ``dp2-zero1``, ``dp2-zero2``, ``dp2-fsdp``,
  ``tp2``, ``pp2-gpipe-m2``, ``pp2-gpipe-m4``, ``pp2-1f1b-m4``.
* **Batch sizes** 4 and 8 samples per data-parallel replica; 8 steps per epoch
  (``dataset_size = 8 * batch_size * dp_size``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

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
STEPS_PER_EPOCH = 8


def workloads() -> list[dict]:
    """Every (architecture, layout, batch size) workload spec (module docstring)."""
    specs = []
    for arch in ARCHITECTURES.values():
        for layout in LAYOUTS:
            for batch in BATCH:
                dp = layout.get("dp_size", 1)
                spec = {**arch, **SHAPE, **layout, "world_size": 2, "batch_size": batch,
                        "mode": "train", "dataset_size": STEPS_PER_EPOCH * batch * dp}  # fmt: skip
                Workload.parse(spec, source="build_layout_dataset")  # fails loudly if invalid
                specs.append(spec)
    return specs


def main() -> None:
    """Write ``workloads.yaml`` of the layout dataset."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args()
    specs = workloads()
    args.root.mkdir(parents=True, exist_ok=True)
    (args.root / "workloads.yaml").write_text(yaml.safe_dump(specs, sort_keys=False))
    labels = sorted({layout_label(Workload.parse(s)) for s in specs})
    print(json.dumps({"workloads": len(specs), "layouts": labels}))


if __name__ == "__main__":
    main()
