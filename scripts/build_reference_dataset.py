"""Draw the reference dataset's workloads: an unbiased pool over 14 architecture families.

Writes ``datasets/reference-cpu/workloads.yaml`` (the workloads, one mapping each) and
``datasets/reference-cpu/configs/*.json`` (the Hugging Face configs of the nine HF families),
then the workloads are profiled with the product's own command::

    .venv/bin/python scripts/build_reference_dataset.py
    .venv/bin/scaledl profile --workloads datasets/reference-cpu/workloads.yaml \
        --out datasets/reference-cpu/profiles --preset quick

Decisions (recorded in ``datasets/reference-cpu/DATASHEET.md``):

* **Candidate space.** Every family crosses the same levels as the quick preset (hidden size
  64/128/256 with 32-wide heads, 1/2/4 layers, feed-forward ratio 2/4, sequence 32/64/128 or
  image 32/64 with patch 8/16, batch 2/4/8 per rank, world size 1/2, training), filtered by the
  quick preset's constraints (at most 1,024 tokens per rank and step, at most 4.5 GFLOPs per rank
  and step; FLOPs read off the traced layer graph, so HF families are costed exactly).
* **Families.** The five built-in ones (``bert``, ``vit``, ``t5``, ``llama``, ``deit``) and nine
  Hugging Face architectures through ``family: hf``: decoder-only ``gpt2``, ``opt``,
  ``gpt_neox`` and ``mistral`` (grouped-query attention, 2 query heads per key/value head),
  encoder-only ``roberta`` and ``electra``, encoder-decoder ``bart``, vision ``beit`` and
  ``dinov2``. Config paths are relative to the repository root (part of ``workload_id``), so the
  dataset is read from there.
* **Sampling.** Uniform without replacement over the union of all families' feasible
  candidates (``numpy.random.default_rng(seed).choice``), so the whole dataset is the unbiased
  pool the learning curves draw from.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import yaml

from scaledl.graph.layer_graph import build_layer_graph
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.spec import Workload

ROOT = Path("datasets/reference-cpu")
HIDDEN = (64, 128, 256)
LAYERS = (1, 2, 4)
FFN_RATIO = (2, 4)
SEQ = (32, 64, 128)
IMAGE_PATCH = ((32, 8), (64, 8), (64, 16), (32, 16))
BATCH = (2, 4, 8)
WORLD = (1, 2)
HEAD_DIM = 32
VOCAB = 2048
POSITIONS = 256
MAX_TOKENS = 1024
MAX_FLOPS = 4.5e9


def _hf_config(model_type: str, h: int, n: int, f: int, image: int | None, patch: int | None):
    """The HF config dict of one architecture (field names of the model type)."""
    heads = h // HEAD_DIM
    text = {"vocab_size": VOCAB, "max_position_embeddings": POSITIONS}
    configs = {
        "gpt2": {
            "architectures": ["GPT2LMHeadModel"],
            "n_embd": h,
            "n_layer": n,
            "n_head": heads,
            "n_inner": f,
            "vocab_size": VOCAB,
            "n_positions": POSITIONS,
            "bos_token_id": 0,
            "eos_token_id": 0,
        },
        "opt": {
            "architectures": ["OPTForCausalLM"],
            "hidden_size": h,
            "word_embed_proj_dim": h,
            "num_hidden_layers": n,
            "num_attention_heads": heads,
            "ffn_dim": f,
            **text,
            "pad_token_id": 1,
            "bos_token_id": 0,
            "eos_token_id": 0,
        },
        "gpt_neox": {
            "architectures": ["GPTNeoXForCausalLM"],
            "hidden_size": h,
            "num_hidden_layers": n,
            "num_attention_heads": heads,
            "intermediate_size": f,
            **text,
            "bos_token_id": 0,
            "eos_token_id": 0,
        },
        "mistral": {
            "architectures": ["MistralForCausalLM"],
            "hidden_size": h,
            "num_hidden_layers": n,
            "num_attention_heads": heads,
            "num_key_value_heads": max(1, heads // 2),
            "intermediate_size": f,
            **text,
        },
        "roberta": {
            "architectures": ["RobertaForMaskedLM"],
            "hidden_size": h,
            "num_hidden_layers": n,
            "num_attention_heads": heads,
            "intermediate_size": f,
            "vocab_size": VOCAB,
            "max_position_embeddings": POSITIONS + 2,
            "pad_token_id": 1,
        },
        "electra": {
            "architectures": ["ElectraForMaskedLM"],
            "hidden_size": h,
            "embedding_size": h,
            "num_hidden_layers": n,
            "num_attention_heads": heads,
            "intermediate_size": f,
            **text,
        },
        "bart": {
            "architectures": ["BartForConditionalGeneration"],
            "d_model": h,
            "encoder_layers": n,
            "decoder_layers": n,
            "encoder_attention_heads": heads,
            "decoder_attention_heads": heads,
            "encoder_ffn_dim": f,
            "decoder_ffn_dim": f,
            **text,
            "pad_token_id": 1,
            "bos_token_id": 0,
            "eos_token_id": 2,
            "decoder_start_token_id": 2,
            "forced_eos_token_id": 2,
        },
        "beit": {
            "architectures": ["BeitForImageClassification"],
            "hidden_size": h,
            "num_hidden_layers": n,
            "num_attention_heads": heads,
            "intermediate_size": f,
            "image_size": image,
            "patch_size": patch,
            "num_labels": 100,
        },
        "dinov2": {
            "architectures": ["Dinov2ForImageClassification"],
            "hidden_size": h,
            "num_hidden_layers": n,
            "num_attention_heads": heads,
            "mlp_ratio": f // h,
            "image_size": image,
            "patch_size": patch,
            "num_labels": 100,
        },
    }
    return {"model_type": model_type, **configs[model_type]}


HF_FAMILIES = ("gpt2", "opt", "gpt_neox", "mistral", "roberta", "electra", "bart", "beit", "dinov2")
VISION = {"vit", "deit", "beit", "dinov2"}


def _write_config(config: dict, root: Path) -> str:
    text = json.dumps(config, indent=1, sort_keys=True) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    path = root / "configs" / f"{config['model_type']}-{digest}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(text)
    return path.as_posix()


def candidates(root: Path) -> list[dict]:
    """Every feasible candidate workload of the 14 families (module docstring)."""
    rows: list[dict] = []
    families = ("bert", "vit", "t5", "llama", "deit", *HF_FAMILIES)
    for family in families:
        vision = family in VISION
        shapes = IMAGE_PATCH if vision else [(s, None) for s in SEQ]
        for h, n, ratio, shape, b, ws in itertools.product(
            HIDDEN, LAYERS, FFN_RATIO, shapes, BATCH, WORLD
        ):
            f = ratio * h
            row: dict = {
                "batch_size": b,
                "world_size": ws,
                "mode": "train",
                "dataset_size": 8 * b * ws,
            }
            if family in HF_FAMILIES:
                image, patch = shape if vision else (None, None)
                path = _write_config(_hf_config(family, h, n, f, image, patch), root)
                row.update(family="hf", config_path=path)
                row.update({"image_size": image} if vision else {"seq_len": shape[0]})
            else:
                row.update(
                    family=family,
                    hidden_size=h,
                    num_layers=n,
                    num_heads=h // HEAD_DIM,
                    intermediate_size=f,
                )
                if vision:
                    row.update(image_size=shape[0], patch_size=shape[1], num_labels=100)
                else:
                    row.update(seq_len=shape[0], vocab_size=VOCAB, max_positions=POSITIONS)
            rows.append({"architecture": family, **row})
    return rows


def feasible(rows: list[dict]) -> list[dict]:
    """The candidates within the token and FLOP limits (FLOPs of the traced graph)."""
    kept, flops_cache = [], {}
    for row in rows:
        spec = {k: v for k, v in row.items() if k != "architecture"}
        try:
            w = Workload.parse(spec, source=row["architecture"])
        except WorkloadError:
            continue
        if w.batch_size * w.seq_len > MAX_TOKENS:
            continue
        key = json.dumps(
            {k: v for k, v in spec.items() if k not in ("world_size", "dataset_size")},
            sort_keys=True,
        )
        if key not in flops_cache:
            nodes = build_layer_graph(w).nodes
            flops_cache[key] = float(nodes["fwd_flops"].sum() + nodes["bwd_flops"].sum())
        if flops_cache[key] <= MAX_FLOPS:
            kept.append(row)
    return kept


def main() -> None:
    """Write the workloads file of the reference dataset (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=336, help="workloads to draw")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args()
    pool = feasible(candidates(args.root))
    rng = np.random.default_rng(args.seed)
    chosen = sorted(rng.choice(len(pool), size=args.n, replace=False))
    rows = [pool[i] for i in chosen]
    out = args.root / "workloads.yaml"
    specs = [{k: v for k, v in r.items() if k != "architecture"} for r in rows]
    out.write_text(yaml.safe_dump(specs, sort_keys=False))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["architecture"]] = counts.get(r["architecture"], 0) + 1
    used = {r["config_path"] for r in rows if "config_path" in r}
    for path in (args.root / "configs").glob("*.json"):
        if path.as_posix() not in used:
            path.unlink()
    print(json.dumps({"candidates": len(pool), "drawn": len(rows), "per_family": counts}))


if __name__ == "__main__":
    main()
