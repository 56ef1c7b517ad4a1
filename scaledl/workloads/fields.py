"""Names shared by the workload spec and the Hugging Face config reader, and their error.

:mod:`scaledl.workloads.spec` calls :mod:`scaledl.workloads.hf` while it parses an ``hf``
workload, and both name the architecture fields and raise :class:`WorkloadError`: those live
here, below both.
"""

from __future__ import annotations

#: Numeric fields that describe the architecture; ``None`` where a family has no such field.
ARCHITECTURE_FIELDS = (
    "hidden_size",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "intermediate_size",
    "vocab_size",
    "max_positions",
    "image_size",
    "patch_size",
    "num_channels",
    "num_labels",
    "decoder_num_layers",
    "decoder_seq_len",
)


class WorkloadError(ValueError):
    """A workload spec is invalid; the message names the field and the value."""
