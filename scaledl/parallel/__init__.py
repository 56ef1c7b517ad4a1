"""Layouts beyond data parallelism: pipeline schedules, collectives and their composition.

* :mod:`scaledl.parallel.lanes`: a list scheduler over resources (compute, links), vectorised
  over candidates;
* :mod:`scaledl.parallel.schedule`: GPipe and 1F1B pipeline replay;
* :mod:`scaledl.parallel.collectives`: all-gather / reduce-scatter / send-recv / all-reduce cost;
* :mod:`scaledl.parallel.shard`: the layer graph of one rank of a layout (tensor-parallel
  shards, pipeline stages, FSDP units);
* :mod:`scaledl.parallel.compose`: the iteration of a layout from per-layer times;
* :mod:`scaledl.parallel.predict`: layout workloads from a predictor.
"""
