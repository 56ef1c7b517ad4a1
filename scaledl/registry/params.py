"""Pydantic models of a bundle's ``params.json``: the CPU predictor's and the GPU predictor's.

:func:`check_params` validates the decoded file against the model of its bundle kind before
anything is built from it (:mod:`scaledl.registry.bundle`, :mod:`scaledl.registry.kernel_bundle`):
a missing or unknown key, a wrong type, a negative epoch overhead or all-reduce cost, an inverted
domain range... is a :class:`~scaledl.registry.bundle.BundleError` whose lines name the file, the
field path and the value (:func:`scaledl.io.schema.parse_artefact`). The GNN configuration and
the kernel method's constructor parameters are checked where they are used (the constructors).
"""

from __future__ import annotations

from typing import Any

from pydantic import NonNegativeFloat, NonNegativeInt

from scaledl.io.schema import Artefact, parse_artefact
from scaledl.models.allreduce_time import AllReduceParams
from scaledl.models.domain import TrainingDomain
from scaledl.models.epoch_time import EpochParams


class GraphParams(Artefact):
    """``params.json`` of a CPU bundle (:func:`~scaledl.registry.bundle.save_graph_bundle`).

    Attributes:
        allreduce: the all-reduce model (``None``: trained without communication).
        epoch: the epoch model.
        gnn_config: the GNN's constructor arguments (checked by ``RuntimeGNN``).
        gnn_prior: the GNN's prior (bundles from before it was recorded: ``sum``).
        gnn_edges: whether the GNN uses edges (older bundles: ``True``).
        gnn_system_nodes: whether the graphs have system nodes (older bundles: ``True``).
        layerwise_min_samples: the layer-wise model's ``min_samples``.
        layerwise_band: the layer-wise model's roofline band
            (:meth:`scaledl.models.roofline.RooflineBand.to_dict`; ``None``: not bounded).
        training_devices: the devices trained on.
        training_workload_ids: the training workloads (older bundles: none recorded).
        training_domain: the training domain (older bundles: none recorded).
    """

    allreduce: AllReduceParams | None
    epoch: EpochParams
    gnn_config: dict[str, Any]
    gnn_prior: str = "sum"
    gnn_edges: bool = True
    gnn_system_nodes: bool = True
    layerwise_min_samples: NonNegativeInt
    layerwise_band: dict[str, Any] | None = None
    training_devices: list[str]
    training_workload_ids: list[str] = []
    training_domain: TrainingDomain | None = None


class OperatorFit(Artefact):
    """What the GPU predictor's operator models chose, per ``<op_class>/<direction>``.

    Attributes:
        params: the chosen hyper-parameters of each operator model.
        inner_mre: its inner cross-validated MRE (``None``: not finite).
        fallback: the models that fell back to the default hyper-parameters.
        clipped_share: the share of its training labels clipped.
    """

    params: dict[str, dict[str, Any]]
    inner_mre: dict[str, NonNegativeFloat | None]
    fallback: list[str]
    clipped_share: dict[str, NonNegativeFloat]


class KernelParams(Artefact):
    """``params.json`` of a GPU predictor bundle (:mod:`scaledl.registry.kernel_bundle`).

    Attributes:
        init: the method's constructor parameters (checked by ``KernelGraphMethod``).
        layerwise_params: the fitted layer-wise parameters.
        layerwise_min_samples: the layer-wise model's ``min_samples``.
        includes_optimizer: whether the labels include the optimizer step.
        correction_kind: the correction chosen.
        correction_scores: the MRE of each correction candidate.
        correction_devices: the devices the correction was fitted on.
        operator_fit: the operator models' fit (:class:`OperatorFit`).
        allreduce: the all-reduce model (``None``: trained without communication).
        epoch: the epoch model.
        training_devices: the devices trained on.
        training_workload_ids: the training workloads.
        training_domain: the training domain.
    """

    init: dict[str, Any]
    layerwise_params: dict[str, Any]
    layerwise_min_samples: NonNegativeInt
    includes_optimizer: bool
    correction_kind: str
    correction_scores: dict[str, NonNegativeFloat]
    correction_devices: list[str]
    operator_fit: OperatorFit
    allreduce: AllReduceParams | None
    epoch: EpochParams
    training_devices: list[str]
    training_workload_ids: list[str]
    training_domain: TrainingDomain


#: ``predictor_kind`` -> the model of its ``params.json``.
PARAMS_MODELS: dict[str, type[GraphParams] | type[KernelParams]] = {
    "graph": GraphParams,
    "kernel": KernelParams,
}


def check_params(data: Any, kind: str, source: str) -> GraphParams | KernelParams:
    """Validate a decoded ``params.json`` as the model of its bundle kind.

    Args:
        data: the decoded JSON.
        kind: the manifest's ``predictor_kind`` (``graph`` or ``kernel``).
        source: the file, named in errors.

    Returns:
        The validated model.

    Raises:
        ValueError: one line per problem, naming ``source``, the field and the value.
    """
    return parse_artefact(PARAMS_MODELS[kind], data, source)
