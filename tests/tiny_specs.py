"""The one table of tiny workloads shared by the tests, and a tiny GPT-2 config.

Every test that needs a small workload starts here: :func:`tiny_spec` (a dict, e.g. a row of a
workloads file) or :func:`tiny` (a :class:`~scaledl.workloads.spec.Workload`), overriding only
the fields it is about. The base is one transformer block of width 32 (2 heads, feed-forward
64), batch 2 and an 8-sample epoch: it builds, traces and profiles in well under a second.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Architecture and run fields common to every family.
TINY = {
    "hidden_size": 32,
    "num_layers": 1,
    "num_heads": 2,
    "intermediate_size": 64,
    "batch_size": 2,
    "dataset_size": 8,
}
#: Family-specific fields (token or image sizes).
FAMILY_FIELDS = {
    "bert": {"vocab_size": 100, "seq_len": 16},
    "vit": {"image_size": 32, "patch_size": 16, "num_labels": 10},
    "t5": {"vocab_size": 100, "seq_len": 16, "decoder_seq_len": 8},
    "llama": {"vocab_size": 100, "seq_len": 16, "num_kv_heads": 1},
    "deit": {"image_size": 32, "patch_size": 16, "num_labels": 10},
}
FAMILIES = tuple(FAMILY_FIELDS)
#: A tiny GPT-2 (a family never profiled here) for ``family="hf"`` workloads.
GPT2 = {
    "model_type": "gpt2",
    "n_embd": 32,
    "n_layer": 1,
    "n_head": 2,
    "vocab_size": 100,
    "n_positions": 64,
}


def tiny_spec(family: str, config_path: Path | str | None = None, **fields: Any) -> dict:
    """A tiny workload of ``family`` as a dict, with ``fields`` overriding the table.

    Args:
        family: one of :data:`FAMILIES`, or ``"hf"`` (then ``config_path`` names the config).
        config_path: the Hugging Face config JSON of an ``hf`` workload.
        **fields: fields to set or override.

    Returns:
        The spec mapping.
    """
    if family == "hf":  # the architecture is the config's
        spec = {
            "family": "hf",
            "config_path": str(config_path),
            "seq_len": 16,
            "batch_size": TINY["batch_size"],
            "dataset_size": TINY["dataset_size"],
        }
    else:
        spec = {"family": family, **TINY, **FAMILY_FIELDS[family]}
    return {**spec, **fields}


def tiny(family: str, config_path: Path | str | None = None, **fields: Any):
    """:func:`tiny_spec` parsed into a :class:`~scaledl.workloads.spec.Workload`."""
    from scaledl.workloads.spec import Workload

    return Workload.parse(tiny_spec(family, config_path, **fields))


def gpt2_config(directory: Path, **fields: Any) -> Path:
    """Write :data:`GPT2` (with ``fields`` overriding it) to ``directory/gpt2.json``."""
    path = Path(directory) / "gpt2.json"
    path.write_text(json.dumps({**GPT2, **fields}))
    return path


#: Every family at two blocks: the graph and instrumentation tests look across blocks.
SPECS = {family: tiny_spec(family, num_layers=2) for family in FAMILIES}
