"""Evaluation of ScaleDL and its baselines (ScaleDL, arXiv 2511.04162).

Public API::

    from scaledl.evaluation import evaluate, EvaluationConfig

Modules: :mod:`~scaledl.evaluation.splits` (ID / leave-one-family-out / extrapolation splits),
:mod:`~scaledl.evaluation.metrics` (MRE, RMSE, percentiles, noise floor),
:mod:`~scaledl.evaluation.learning_curve` (D-optimal vs random vs Latin hypercube subsets),
:mod:`~scaledl.evaluation.gpu` (imported real-GPU profiles through the product's models:
leave one model / GPU out, operators, data parallel; report in
:mod:`~scaledl.evaluation.gpu_report`), :mod:`~scaledl.evaluation.external` (Vidur all-reduce),
:mod:`~scaledl.evaluation.figures` (PNG figures), :mod:`~scaledl.evaluation.report` (HTML),
:mod:`~scaledl.evaluation.evaluate` (orchestration, ``metrics.json`` schema).
"""

from scaledl.evaluation.evaluate import EvaluationConfig, evaluate

__all__ = ["EvaluationConfig", "evaluate"]
