"""Resource planning: the cheapest configuration (and layout) that trains a model in time."""

from scaledl.planning.layouts import LayoutSpace
from scaledl.planning.memory import (
    MemoryEstimate,
    estimate_layout_memory,
    estimate_memory,
    fits_memory,
)
from scaledl.planning.planner import Plan, PlanError, candidate_grid, pareto_mask, plan

__all__ = [
    "LayoutSpace",
    "MemoryEstimate",
    "Plan",
    "PlanError",
    "candidate_grid",
    "estimate_layout_memory",
    "estimate_memory",
    "fits_memory",
    "pareto_mask",
    "plan",
]
