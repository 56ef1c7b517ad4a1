"""Which workloads count as "the same": the three keys the models group workloads by.

Each answers a different question; all three live here so that a new grouping is added beside
them, not as a fourth copy in a model module:

* :func:`architecture_key`: the same layer graph up to the batch (the spec without batch,
  world size, nodes, dataset size, device and backend; precision and mode included). Traces and
  graph features are cached per key (:mod:`scaledl.graph.features`).
* :func:`architecture_group`: the same model, whatever its batch, sequence, mode or device
  (``family:hidden x layers``): the groups of leave-one-architecture-out fits
  (:mod:`scaledl.models.kernel`, :mod:`scaledl.evaluation.gpu`).
* :func:`family_key`: the same family for the domain guard (a built-in family, or
  ``hf:<model_type>``; :mod:`scaledl.models.domain`).
"""

from __future__ import annotations

import json

from scaledl.workloads.hf import read_hf_config
from scaledl.workloads.parallelism import LAYOUT_FIELDS
from scaledl.workloads.spec import FAMILIES, Workload

#: Spec fields that do not change the layer graph's structure (the batch only scales it).
_NOT_ARCHITECTURE = {
    "batch_size",
    "world_size",
    "num_nodes",
    "dataset_size",
    "device_name",
    "backend",
    *LAYOUT_FIELDS,
}
#: The built-in families, which are also transformers model types.
BUILTIN_FAMILIES = tuple(f for f in FAMILIES if f != "hf")


def architecture_key(workload: Workload) -> str:
    """JSON of the spec fields that shape the layer graph's structure."""
    return json.dumps(workload.model_dump(mode="json", exclude=_NOT_ARCHITECTURE), sort_keys=True)


def architecture_group(workload: Workload) -> str:
    """The model a workload runs, whatever its batch, sequence, mode or device.

    Used as the group of leave-one-architecture-out fits: ``family:hidden x layers`` (for an
    ``hf`` workload without those fields, its ``config_path``).
    """
    if workload.hidden_size and workload.num_layers:
        return f"{workload.family}:{workload.hidden_size}x{workload.num_layers}"
    return f"{workload.family}:{workload.config_path}"


def family_key(workload: Workload) -> str:
    """The family a workload belongs to for the domain check (:mod:`scaledl.models.domain`).

    Returns:
        The built-in family, or ``hf:<model_type>`` for other ``hf`` configs (whose model type
        is read from the config file).
    """
    if workload.family != "hf":
        return workload.family

    model_type = read_hf_config(workload.config_path).model_type
    return model_type if model_type in BUILTIN_FAMILIES else f"hf:{model_type}"
