"""D-optimal experimental design of profiling experiments (which workloads to profile).

Public API::

    from scaledl.design import (load_preset, candidate_workloads, generate_design,
                                augment_design, write_design, read_design, DesignResult,
                                DesignError)

Modules: :mod:`~scaledl.design.presets` (YAML presets), :mod:`~scaledl.design.space`
(candidates and constraints; documents the preset format), :mod:`~scaledl.design.cost`
(parameter/memory/FLOP estimates), :mod:`~scaledl.design.features` (model matrix),
:mod:`~scaledl.design.doptimal` (exchange algorithm), :mod:`~scaledl.design.samplers` (random
and Latin hypercube baselines), :mod:`~scaledl.design.design` (designs of a preset),
:mod:`~scaledl.design.io` (parquet).
"""

from scaledl.design.design import DesignResult, augment_design, generate_design
from scaledl.design.doptimal import d_efficiency, d_optimal_indices, log_det_information
from scaledl.design.errors import DesignError, PresetError
from scaledl.design.io import read_design, write_design
from scaledl.design.presets import load_preset, preset_names
from scaledl.design.space import CandidateSpace, candidate_workloads, enumerate_candidates

__all__ = [
    "CandidateSpace",
    "DesignError",
    "DesignResult",
    "PresetError",
    "augment_design",
    "candidate_workloads",
    "d_efficiency",
    "d_optimal_indices",
    "enumerate_candidates",
    "generate_design",
    "load_preset",
    "log_det_information",
    "preset_names",
    "read_design",
    "write_design",
]
