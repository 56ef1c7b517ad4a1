"""Assets, checks, resources, jobs and schedules of the ScaleDL pipeline.

Asset and check bodies import the library inside the function, on purpose: loading the code
location (``dagster dev``, ``definitions validate``, every run's start) does not pay for torch,
PyTorch Geometric, transformers and scikit-learn. That is the one reason for the function-level
imports under ``pipelines/defs``.
"""
