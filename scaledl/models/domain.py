"""The training domain of a predictor: what its training workloads covered.

A runtime predictor is trustworthy where it has seen data. :class:`TrainingDomain` records,
from the training workloads of a fit, the categorical settings it saw (families, precisions,
modes, devices, world sizes, node counts, measured layer types) and the range ``[min, max]`` of
the size features of :data:`RANGE_FEATURES`. The predictor bundle stores it (``params.json``)
and :mod:`scaledl.models.guard` checks every prediction against it.

A family key is the workload's ``family``; for ``hf`` workloads it is ``hf:<model_type>`` of
the config (a GPT-2 config and an OPT config are two families, since their layers differ),
except that a config of a built-in family's model type (``bert``, ``vit``, ``t5``, ``llama``,
``deit``) is that family: transformers builds the same layers from it (an ``hf``
``LlamaForCausalLM`` config is the built-in ``llama``), and a head the built-in family does
not have is flagged by the layer-type check instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from pydantic import field_validator

from scaledl.graph.features import GraphSet, build_graph_set
from scaledl.io.excerpt import excerpt
from scaledl.io.schema import Artefact, parse_artefact
from scaledl.models.samples import measured_nodes
from scaledl.workloads.identity import architecture_key, family_key
from scaledl.workloads.spec import Workload

if TYPE_CHECKING:  # profile data is built when fitting; checking a domain needs no profile
    from scaledl.models.data import ProfileData

#: The range features that are fields of the workload spec.
_SPEC_RANGE_FEATURES = (
    "hidden_size",
    "num_layers",
    "num_heads",
    "intermediate_size",
    "seq_len",
    "batch_size",
)
#: Size features whose training range is recorded; a value outside it is an extrapolation in
#: size, calibrated by the ``beyond_range`` stratum of :mod:`scaledl.models.intervals`.
#: ``tokens_per_step`` is ``batch_size * seq_len`` per rank, ``flops_per_iteration`` the
#: forward (+ backward when training) FLOPs of one rank's iteration and ``parameters`` the
#: model's parameters, both summed over the traced layer graph.
RANGE_FEATURES = (
    *_SPEC_RANGE_FEATURES,
    "tokens_per_step",
    "flops_per_iteration",
    "parameters",
)


def range_features(
    workloads: list[Workload],
    graphs: GraphSet | None = None,
    arch_keys: list[str] | None = None,
) -> pd.DataFrame:
    """The :data:`RANGE_FEATURES` of workloads.

    Args:
        workloads: the workloads.
        graphs: their layer graphs in the same order (built when ``None``).
        arch_keys: each workload's :func:`~scaledl.graph.features.architecture_key`, when
            the caller knows them (computed when ``None``).

    Returns:
        One row per workload, columns :data:`RANGE_FEATURES` (float; an architecture field a
        family does not have, e.g. ``intermediate_size`` of an ``hf`` config without one, is
        NaN).

    Raises:
        scaledl.workloads.fields.WorkloadError: a workload's model cannot be traced.
    """
    if graphs is None:
        # The features depend on the architecture (precision and mode included) and the batch
        # only: trace one workload per such key, however many workloads share it.
        if arch_keys is None:
            arch_keys = [architecture_key(w) for w in workloads]
        keys = [(a, w.batch_size) for a, w in zip(arch_keys, workloads, strict=True)]
        first = {k: i for i, k in reversed(list(enumerate(keys)))}
        if len(first) < len(workloads):
            row = {k: r for r, k in enumerate(first)}
            unique = range_features(
                [workloads[i] for i in first.values()],
                arch_keys=[arch_keys[i] for i in first.values()],
            )
            return unique.iloc[[row[k] for k in keys]].reset_index(drop=True)
    gs = graphs if graphs is not None else build_graph_set(workloads, arch_keys=arch_keys)
    nodes = gs.nodes
    layer = (nodes["node_kind"] == "layer").to_numpy()
    train = nodes["train"].to_numpy(dtype=float)
    flops = nodes["fwd_flops"].to_numpy(dtype=float) + train * nodes["bwd_flops"].to_numpy(
        dtype=float
    )
    frame = pd.DataFrame(
        {
            name: [
                float("nan") if getattr(w, name) is None else float(getattr(w, name))
                for w in workloads
            ]
            for name in _SPEC_RANGE_FEATURES
        }
    )
    frame["tokens_per_step"] = frame["batch_size"] * frame["seq_len"]
    frame["flops_per_iteration"] = gs.per_graph_sum(np.where(layer, flops, 0.0))
    frame["parameters"] = gs.per_graph_sum(
        np.where(layer, nodes["params"].to_numpy(dtype=float), 0.0)
    )
    return frame[list(RANGE_FEATURES)]


class TrainingDomain(Artefact):
    """What a predictor's training workloads covered (``params.json`` key ``training_domain``).

    Attributes:
        n_workloads: training workloads.
        families: family keys (:func:`family_key`), sorted.
        precisions: precisions (``fp32``, ``bf16``, ``fp16``), sorted.
        modes: ``train`` and/or ``infer``.
        devices: device names.
        world_sizes: world sizes, ascending.
        num_nodes: node counts, ascending.
        layer_types: layer types with measured layer times.
        ranges: feature of :data:`RANGE_FEATURES` -> ``[min, max]`` over the training workloads
            (a feature no training workload has is absent).
    """

    n_workloads: int
    families: tuple[str, ...]
    precisions: tuple[str, ...]
    modes: tuple[str, ...]
    devices: tuple[str, ...]
    world_sizes: tuple[int, ...]
    num_nodes: tuple[int, ...]
    layer_types: tuple[str, ...]
    ranges: dict[str, tuple[float, float]]

    @classmethod
    def from_workloads(
        cls,
        workloads: list[Workload],
        graphs: GraphSet | None = None,
        layer_types: list[str] | None = None,
    ) -> TrainingDomain:
        """The domain covered by training workloads.

        Args:
            workloads: the training workloads.
            graphs: their layer graphs in the same order (built when ``None``).
            layer_types: layer types with measured times (default: every layer type of the
                graphs).

        Returns:
            The domain.

        Raises:
            ValueError: no workload.
        """
        if not workloads:
            raise ValueError("training domain: no training workload")
        gs = graphs if graphs is not None else build_graph_set(workloads)
        if layer_types is None:
            layer = gs.nodes["node_kind"] == "layer"
            layer_types = gs.nodes.loc[layer, "layer_type"].astype(str).tolist()
        features = range_features(workloads, gs)
        ranges = {
            name: (float(col.min()), float(col.max()))
            for name, col in features.items()
            if col.notna().any()
        }
        return cls(
            n_workloads=len(workloads),
            families=tuple(sorted({family_key(w) for w in workloads})),
            precisions=tuple(sorted({w.precision for w in workloads})),
            modes=tuple(sorted({w.mode for w in workloads})),
            devices=tuple(sorted({w.device_name for w in workloads})),
            world_sizes=tuple(sorted({w.world_size for w in workloads})),
            num_nodes=tuple(sorted({w.num_nodes for w in workloads})),
            layer_types=tuple(sorted(set(layer_types))),
            ranges=ranges,
        )

    @classmethod
    def from_data(cls, data: ProfileData) -> TrainingDomain:
        """The domain of profile data (its graphs and measured layer types reused).

        Raises:
            ValueError: no workload.
        """
        return cls.from_workloads(
            [data.workloads[i] for i in data.ids],
            data.graphs,
            measured_nodes(data.nodes)["layer_type"].astype(str).tolist(),
        )

    @field_validator("ranges")
    @classmethod
    def _ordered(cls, ranges: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        for name, (lo, hi) in ranges.items():
            if lo > hi:
                raise ValueError(
                    f"range {excerpt(name)} is [{lo}, {hi}]: expected finite bounds, low <= high"
                )
        return ranges

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable mapping (lists for tuples)."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Any, source: str = "<domain>") -> TrainingDomain:
        """The domain of :meth:`to_dict`'s mapping.

        Raises:
            ValueError: a key is missing, unknown or of the wrong type, or a range is not
                finite with low <= high (naming ``source``, the key and the value).
        """
        return parse_artefact(cls, data, f"{source}: training domain")
