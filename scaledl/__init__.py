"""ScaleDL: runtime prediction for distributed deep-learning workloads.

Layer-wise models, a Transformer GNN over the layer graph and D-optimal profiling designs, after
"ScaleDL: Towards Scalable and Efficient Runtime Prediction for Distributed Deep Learning
Workloads" (arXiv 2511.04162). Start with :func:`load_predictor`, :class:`Workload` and
:func:`plan`.

The names below are imported on first use (PEP 562), so ``import scaledl`` and importing one of
its light modules (``scaledl.workloads.spec``, ``scaledl.evaluation.results``) does not pay for
torch, PyTorch Geometric, scikit-learn and skops.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scaledl.planning import plan
    from scaledl.prediction.predictor import Predictor, load_predictor
    from scaledl.workloads.fields import WorkloadError
    from scaledl.workloads.spec import Workload

__all__ = ["Predictor", "Workload", "WorkloadError", "load_predictor", "plan"]
__version__ = "0.1.0"

_LAZY = {
    "Predictor": "scaledl.prediction.predictor",
    "load_predictor": "scaledl.prediction.predictor",
    "plan": "scaledl.planning.planner",
    "Workload": "scaledl.workloads.spec",
    "WorkloadError": "scaledl.workloads.fields",
}


def __getattr__(name: str) -> Any:
    """Import the public names of :data:`__all__` on first access."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'scaledl' has no attribute {name!r}")
