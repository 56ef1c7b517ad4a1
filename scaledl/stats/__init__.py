"""Statistics shared by evaluation, layout calibration and the pipeline's registration policy.

:mod:`~scaledl.stats.metrics` (MRE, RMSE, percentiles, noise floor) and
:mod:`~scaledl.stats.significance` (paired bootstrap comparison of two methods). This package
imports nothing from scaledl, so any layer may use it.
"""
