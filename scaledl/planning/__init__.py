"""Resource planning: the cheapest configuration that trains a model in time (:func:`plan`)."""

from scaledl.planning.memory import MemoryEstimate, estimate_memory, fits_memory
from scaledl.planning.planner import Plan, PlanError, candidate_grid, pareto_mask, plan

__all__ = [
    "MemoryEstimate",
    "Plan",
    "PlanError",
    "candidate_grid",
    "estimate_memory",
    "fits_memory",
    "pareto_mask",
    "plan",
]
