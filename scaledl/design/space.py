"""The search space of a preset: candidate workloads and the constraints that filter them.

Preset format (``scaledl/presets/<name>.yaml``; loaded by :func:`scaledl.design.load_preset`)::

    name: quick                      # optional, defaults to the file stem
    description: ...                 # optional, free text
    design:                          # all keys optional (defaults: presets.DesignSettings)
      n_workloads: 72                # workloads to choose
      sampler: doptimal              # doptimal (matched) | doptimal-surface | random | lhs
      seed: 0
      n_starts: 20                   # random starts of the exchange algorithm
      steps_per_epoch: 6             # dataset_size = steps_per_epoch * batch_size * world_size
      model: full                    # main | interactions | quadratic | full (features.ORDERS)
      max_tokens_per_step: 2048      # constraint: batch_size * seq_len per rank (null: none)
      memory_budget_bytes: 2.0e+9    # constraint: estimated peak memory per rank (null: none)
      max_flops_per_step: 3.0e+9     # constraint: estimated FLOPs per rank per step (null: none)
      gpus_per_node: 8               # num_nodes = ceil(world_size / gpus_per_node) (null: 1)
    profiling: {...}                 # free-form; read by the profiling stage
    device: {...}                    # free-form; advisory device/backend for callers
    families:
      bert:                          # one of bert, vit, t5, llama, deit
        hidden_size: [64, 128, 256]  # a list is a factor: its levels are crossed
        num_layers: [1, 2, 4]
        head_dim: 32                 # a scalar is fixed; num_heads = hidden_size / head_dim
        ffn_ratio: [2, 4]            # intermediate_size = round(ffn_ratio * hidden_size)
        seq_len: [32, 64, 128]       # vision families give image_size and patch_size instead
        batch_size: [2, 4, 8]
        world_size: [1, 2]
        mode: [train]                # train | infer
        vocab_size: 4096             # any other Workload field, scalar or levels

Family keys are :class:`~scaledl.workloads.spec.Workload` fields (``num_heads``,
``intermediate_size``, ``num_kv_heads``, ``image_size``, ``patch_size``, ``precision``,
``num_nodes``, ...) plus the helpers ``head_dim`` (instead of ``num_heads``) and ``ffn_ratio``
(instead of ``intermediate_size``). ``device_name`` and ``backend`` come from the caller.

Candidates are the full factorial of each family's levels. A combination is rejected (and never
chosen by any sampler) when it violates a constraint:

* ``divisibility``: ``head_dim`` or ``num_heads`` must divide ``hidden_size``, ``patch_size``
  must divide ``image_size``;
* ``max_tokens_per_step``: ``batch_size * seq_len`` above the limit;
* ``memory_budget_bytes``: :func:`scaledl.design.cost.memory_bytes` above the budget (training:
  16 bytes per parameter for fp32 AdamW plus Korthikanti et al. 2022 activation memory,
  ``L s b h (34 + 5 a s / h)`` bytes at 16 bits);
* ``max_flops_per_step``: :func:`scaledl.design.cost.flops_per_step` above the limit (``6 N T``);
* ``invalid_workload``: :meth:`Workload.parse` rejects it (e.g. ``seq_len > max_positions``,
  ``num_nodes`` not dividing ``world_size``, ``nccl`` on a CPU device).

Accepted candidates are deduplicated by ``workload_id`` (first occurrence kept) and keep the
order of the preset (families in file order, then the levels' product in key order).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from scaledl.design import cost
from scaledl.design.errors import PresetError
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.spec import Workload

_HELPER_KEYS = ("head_dim", "ffn_ratio")


@dataclass
class CandidateSpace:
    """Candidates of a preset and why the other combinations were rejected.

    Attributes:
        workloads: feasible candidate workloads, deduplicated, in preset order.
        rejected: constraint name -> number of rejected combinations.
        examples: constraint name -> one example message.
        per_family: family -> number of feasible candidates.
    """

    workloads: list[Workload]
    rejected: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    per_family: Counter = field(default_factory=Counter)


def enumerate_candidates(
    preset: dict[str, Any], device_name: str, backend: str = "gloo"
) -> CandidateSpace:
    """Enumerate a preset's candidate workloads with rejection statistics.

    Args:
        preset: a validated preset (:func:`scaledl.design.load_preset`).
        device_name: ``device_name`` of every workload (part of its ``workload_id``).
        backend: ``gloo`` or ``nccl``.

    Returns:
        The candidate space.

    Raises:
        PresetError: a family has no feasible combination; the message names the file, the
            family and the rejection counts with an example.
    """
    source = preset.get("source", "<preset>")
    design = preset["design"]
    space = CandidateSpace(workloads=[])
    seen: set[str] = set()
    for family, spec in preset["families"].items():
        keys = list(spec)
        level_lists = [v if isinstance(v, list) else [v] for v in spec.values()]
        before = len(space.workloads)
        family_rejects: Counter = Counter()
        for combo in itertools.product(*level_lists):
            values = dict(zip(keys, combo, strict=True))
            reason, detail, workload = _candidate(family, values, design, device_name, backend)
            if workload is None:
                family_rejects[reason] += 1
                space.examples.setdefault(reason, f"families.{family}: {detail}")
                continue
            if workload.workload_id in seen:
                continue
            seen.add(workload.workload_id)
            space.workloads.append(workload)
        space.rejected.update(family_rejects)
        space.per_family[family] = len(space.workloads) - before
        if space.per_family[family] == 0:
            details = {r: space.examples[r] for r in family_rejects}
            raise PresetError(
                f"{source}: families.{family}: no feasible candidate; rejected "
                f"{dict(family_rejects)}; examples: {details}"
            )
    return space


def candidate_workloads(
    preset: dict[str, Any], device_name: str, backend: str = "gloo"
) -> list[Workload]:
    """Feasible candidate workloads of a preset (see the module docstring).

    Args:
        preset: a validated preset (:func:`scaledl.design.load_preset`).
        device_name: ``device_name`` of every workload.
        backend: ``gloo`` (CPU) or ``nccl`` (CUDA).

    Returns:
        The full factorial of levels per family, filtered by the constraints, deduplicated by
        ``workload_id``, in preset order.

    Raises:
        PresetError: a family has no feasible combination.
    """
    return enumerate_candidates(preset, device_name, backend).workloads


def _candidate(
    family: str,
    values: dict[str, Any],
    design: dict[str, Any],
    device_name: str,
    backend: str,
) -> tuple[str, str, Workload | None]:
    """One combination of levels -> ``(reason, detail, workload or None)``."""
    spec: dict[str, Any] = {k: v for k, v in values.items() if k not in _HELPER_KEYS}
    spec["family"] = family
    hidden = values.get("hidden_size")
    if "head_dim" in values and hidden is not None:
        if hidden % values["head_dim"]:
            detail = f"head_dim={values['head_dim']} does not divide hidden_size={hidden}"
            return "divisibility", detail, None
        spec["num_heads"] = hidden // values["head_dim"]
    if "num_heads" in values and hidden is not None and hidden % values["num_heads"]:
        detail = f"num_heads={values['num_heads']} does not divide hidden_size={hidden}"
        return "divisibility", detail, None
    if "ffn_ratio" in values and hidden is not None:
        spec["intermediate_size"] = max(1, int(round(values["ffn_ratio"] * hidden)))
    image, patch = values.get("image_size"), values.get("patch_size")
    if image is not None and patch is not None and image % patch:
        return "divisibility", f"patch_size={patch} does not divide image_size={image}", None
    gpn = design.get("gpus_per_node")
    if gpn and "num_nodes" not in values:
        spec["num_nodes"] = math.ceil(values.get("world_size", 1) / gpn)
    spec["dataset_size"] = (
        design["steps_per_epoch"] * values["batch_size"] * values.get("world_size", 1)
    )
    spec["device_name"] = device_name
    spec["backend"] = backend
    try:
        w = Workload.parse(spec, source=f"families.{family}")
    except WorkloadError as exc:
        return "invalid_workload", str(exc), None
    limit = design.get("max_tokens_per_step")
    if limit is not None and w.batch_size * w.seq_len > limit:
        return "max_tokens_per_step", f"{w.batch_size * w.seq_len} tokens > {limit}", None
    limit = design.get("memory_budget_bytes")
    if limit is not None and cost.memory_bytes(w) > limit:
        return "memory_budget_bytes", f"{cost.memory_bytes(w):.3g} bytes > {limit:.3g}", None
    limit = design.get("max_flops_per_step")
    if limit is not None and cost.flops_per_step(w) > limit:
        return "max_flops_per_step", f"{cost.flops_per_step(w):.3g} FLOPs > {limit:.3g}", None
    return "", "", w
