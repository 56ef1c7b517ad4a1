"""Evaluation of ScaleDL and its baselines (ScaleDL, arXiv 2511.04162).

Public API::

    from scaledl.evaluation import evaluate, EvaluationConfig
    from scaledl.evaluation.results import Metrics            # read metrics.json
    from scaledl.stats.significance import paired_comparison

Modules: :mod:`~scaledl.evaluation.splits` (ID / leave-one-family-out / extrapolation splits),
:mod:`~scaledl.stats.metrics` (MRE, RMSE, percentiles, noise floor),
:mod:`~scaledl.evaluation.results` (the typed ``metrics.json``: one reader and writer),
:mod:`~scaledl.stats.significance` (paired bootstrap comparison of two methods),
:mod:`~scaledl.evaluation.learning_curve` (D-optimal vs random vs Latin hypercube subsets),
:mod:`~scaledl.evaluation.gpu` (imported real-GPU profiles through the product's models:
leave one model / GPU out, operators, data parallel; report in
:mod:`~scaledl.report.gpu_report`), :mod:`~scaledl.evaluation.vidur` (Vidur all-reduce),
:mod:`~scaledl.evaluation.profiled_layouts` (the layout recipe, leave one layout out),
:mod:`~scaledl.evaluation.targets` (every target of every evaluation: one table, and the one
entry shape every result file holds them in), :mod:`~scaledl.evaluation.envelope` (the result
file of the reference, layouts and 4-GPU layouts evaluations),
:mod:`~scaledl.evaluation.evaluate` (orchestration, in stages: :mod:`~scaledl.evaluation.stages`).
The report, its figures and the README block are :mod:`scaledl.report`.

``evaluate`` and ``EvaluationConfig`` are imported on first use, so reading a ``metrics.json``
does not import the models (torch, scikit-learn).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scaledl.evaluation.evaluate import EvaluationConfig, evaluate

__all__ = ["EvaluationConfig", "evaluate"]


def __getattr__(name: str) -> Any:
    """Import :data:`__all__` from :mod:`scaledl.evaluation.evaluate` on first access."""
    if name in __all__:
        module = importlib.import_module("scaledl.evaluation.evaluate")
        # Importing the submodule binds its name on this package: the function takes it back.
        globals().update({n: getattr(module, n) for n in __all__})
        return globals()[name]
    raise AttributeError(f"module 'scaledl.evaluation' has no attribute {name!r}")
