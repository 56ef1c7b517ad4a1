"""Parallel layouts (data, tensor, pipeline, ZeRO / FSDP): schedules, collectives, composition.

* :mod:`scaledl.parallel.lanes`: a list scheduler over resources (compute, links), vectorised
  over candidates;
* :mod:`scaledl.parallel.schedule`: GPipe and 1F1B pipeline replay;
* :mod:`scaledl.parallel.collectives`: all-gather / reduce-scatter / send-recv / all-reduce cost
  fitted on a host's profiled collectives; :mod:`scaledl.parallel.measured_collectives`: the
  same read off Vidur's measured NCCL all-reduces of a GPU system;
* :mod:`scaledl.parallel.shard`: the layer graph of one rank of a layout (tensor-parallel
  shards, pipeline stages, FSDP units); :mod:`scaledl.parallel.optimizer_tensors`: the
  tensors one rank's optimizer step updates;
* :mod:`scaledl.parallel.compose`: the iteration of a layout from per-layer times;
  :mod:`scaledl.parallel.overlap`: the measured overlap of each collective lane;
* :mod:`scaledl.parallel.training`: layer-wise samples from layout profiles;
  :mod:`scaledl.parallel.recipe`, :mod:`scaledl.parallel.calibration`: a host's fitted
  layout recipe;
* :mod:`scaledl.parallel.predict`: layout workloads from a predictor (CPU hosts);
  :mod:`scaledl.parallel.megatron`: Megatron-LM's layouts on a GPU from the GPU predictor;
* the recipe's leave one layout out and ranking on profiled layouts is an evaluation
  (:mod:`scaledl.evaluation.profiled_layouts`), the results page's block
  :mod:`scaledl.report.blocks.layouts`.
"""
