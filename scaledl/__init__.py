"""ScaleDL: runtime prediction for distributed deep-learning workloads.

Layer-wise models, a Transformer GNN over the layer graph and D-optimal profiling designs, after
"ScaleDL: Towards Scalable and Efficient Runtime Prediction for Distributed Deep Learning
Workloads" (arXiv 2511.04162). Start with :func:`load_predictor` and :class:`Workload`.
"""

from scaledl.registry import Predictor, load_predictor
from scaledl.workloads.spec import Workload, WorkloadError

__all__ = ["Predictor", "Workload", "WorkloadError", "load_predictor"]
__version__ = "0.1.0"
