"""What one rank of a layout runs: tensor-parallel shards, pipeline stages and sharding units.

* **Tensor parallelism** (Megatron-LM, Shoeybi et al. 2019, arXiv 1909.08053, Sec. 3; the
  column/row-wise plans of ``torch.distributed.tensor.parallel``): each attention and
  feed-forward unit is split over ``t`` ranks, the first linear layer column-wise and the
  second row-wise. A rank holds ``1/t`` of the unit's weights (heads / t, intermediate / t) and
  does ``1/t`` of its FLOPs; its input is the full, replicated activation and its output the
  full activation after the all-reduce (so the unit's input and output bytes and its operator
  count are those of the whole unit). Embeddings, norms, the pooler and the head stay
  replicated (the plans shard attention and MLP only). Each block needs one all-reduce of its
  output activation after its attention (each of self- and cross-attention) and one after its
  feed-forward, in forward (Megatron's ``g``) and one each in backward (``f``: the gradient of
  the replicated input): :func:`tensor_parallel_collective_bytes`. PyTorch's plan all-reduces
  that gradient once per column-wise linear instead (three in an attention unit): the
  composition counts it in the probed API cost of each column-wise linear
  (:func:`tensor_parallel_linears`, :mod:`scaledl.profiling.tp_probe`).
* **Pipeline stages**: stage ``s`` of ``p`` holds blocks ``[s k, (s + 1) k)`` of the model's
  ``p k`` blocks (encoder then decoder blocks), the layers before the first block (embeddings)
  on the first stage and every layer outside a block after a block on that block's stage (final
  norm, head: the last stage; :func:`stage_of_layers`).
* **Sharding units** (FSDP / ZeRO-2): every block is one unit (``fully_shard`` on each block),
  the remaining layers the root unit (:func:`unit_of_layers`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scaledl.workloads.parallelism import LAYOUT_DEFAULTS
from scaledl.workloads.spec import Workload

#: Layer types split by the tensor-parallel plans.
TENSOR_PARALLEL_TYPES = ("attention", "cross-attention", "feed-forward")
_SHARDED_COLUMNS = ("fwd_flops", "bwd_flops", "params", "kernel_fwd_ms", "kernel_bwd_ms")


def base_workload(w: Workload, batch_size: int) -> Workload:
    """The single-rank workload whose layer graph a layout's rank shards (one micro-batch).

    Args:
        w: the layout workload.
        batch_size: samples of one micro-batch (``w.batch_size / w.micro_batches``).

    Returns:
        ``w`` with the default layout, one rank on one node and ``batch_size``.
    """
    update = {**LAYOUT_DEFAULTS, "dp_size": 1, "world_size": 1, "num_nodes": 1}
    return w.model_copy(update={**update, "batch_size": int(batch_size)})


def block_ordinal(blocks: pd.Series) -> np.ndarray:
    """Index of each layer's block in order of first appearance (-1: outside any block).

    Args:
        blocks: the ``block`` column of the layer nodes, in execution order.

    Returns:
        int array, shape (n_layers,).
    """
    order: dict[str, int] = {}
    out = np.full(len(blocks), -1, dtype=np.int64)
    for i, b in enumerate(blocks.astype(str).tolist()):
        if b:
            out[i] = order.setdefault(b, len(order))
    return out


def stage_of_layers(block: np.ndarray, stages: int) -> np.ndarray:
    """The pipeline stage of each layer (module docstring).

    Args:
        block: :func:`block_ordinal` per layer, in execution order.
        stages: ``p``; must divide the number of blocks.

    Returns:
        int array, shape (n_layers,), values in ``[0, p)``.

    Raises:
        ValueError: ``p`` does not divide the blocks.
    """
    n_blocks = int(block.max()) + 1 if len(block) and block.max() >= 0 else 0
    if stages < 1 or (stages > 1 and (n_blocks == 0 or n_blocks % stages)):
        raise ValueError(f"pp_size={stages} must divide the {n_blocks} blocks of the model")
    if stages == 1:
        return np.zeros(len(block), dtype=np.int64)
    per_stage = n_blocks // stages
    current = np.maximum.accumulate(np.where(block >= 0, block, -1))
    return np.where(current >= 0, current // per_stage, 0).astype(np.int64)


def unit_of_layers(block: np.ndarray) -> np.ndarray:
    """The sharding unit of each layer: its block, -1 for the root unit (module docstring)."""
    return np.asarray(block, dtype=np.int64).copy()


def shard_tensor_parallel(layers: pd.DataFrame, tp_size: int) -> pd.DataFrame:
    """The layer nodes one tensor-parallel rank runs (module docstring).

    Args:
        layers: layer nodes (``layer_type`` and the layer feature columns).
        tp_size: ``t`` >= 1.

    Returns:
        A copy with FLOPs, parameters (and the kernel-model times, when present) of the
        attention and feed-forward units divided by ``t``.
    """
    out = layers.copy()
    if tp_size == 1:
        return out
    split = out["layer_type"].isin(TENSOR_PARALLEL_TYPES).to_numpy()
    return divide_rows(out, split, tp_size, _SHARDED_COLUMNS)


def divide_rows(
    layers: pd.DataFrame, rows: np.ndarray, divisor: float, columns: tuple[str, ...]
) -> pd.DataFrame:
    """Divide ``columns`` (those present) of the ``rows`` by ``divisor``, in place.

    Args:
        layers: layer nodes.
        rows: bool mask, shape (n_layers,).
        divisor: ``t``, the tensor-parallel ranks.
        columns: the columns to divide (float after).

    Returns:
        ``layers``.
    """
    for column in columns:
        if column in layers:
            values = layers[column].to_numpy(dtype=np.float64).copy()
            values[rows] /= divisor
            layers[column] = values
    return layers


def tensor_parallel_allreduce_layers(types: np.ndarray, block: np.ndarray) -> np.ndarray:
    """Which layers a tensor-parallel all-reduce follows (Megatron-LM's split, Sec. 3).

    Every attention unit (after its row-parallel output projection) and the last feed-forward
    unit of each run of them in a block: a feed-forward split in two units (BERT's
    intermediate and output) has one all-reduce, after the second.

    Args:
        types: ``layer_type`` per layer, in execution order.
        block: :func:`block_ordinal` per layer (or any label equal within one block).

    Returns:
        bool array, shape (n_layers,).
    """
    types = np.asarray(types).astype(str)
    result = np.isin(types, ("attention", "cross-attention"))
    ff = types == "feed-forward"
    for i in np.flatnonzero(ff):
        nxt = i + 1
        result[i] = nxt >= len(types) or not ff[nxt] or block[nxt] != block[i]
    return result


def tensor_parallel_collective_bytes(layers: pd.DataFrame, block: np.ndarray) -> np.ndarray:
    """Bytes of the all-reduce after each layer in forward (and before it in backward).

    The layers of :func:`tensor_parallel_allreduce_layers`, each all-reducing its output.

    Args:
        layers: layer nodes in execution order (``layer_type``, ``output_bytes``).
        block: :func:`block_ordinal` per layer.

    Returns:
        float array, shape (n_layers,): 0 where no all-reduce follows.
    """
    after = tensor_parallel_allreduce_layers(layers["layer_type"].to_numpy(), block)
    return np.where(after, layers["output_bytes"].to_numpy(dtype=np.float64), 0.0)


def tensor_parallel_linears(
    layers: pd.DataFrame,
    block: np.ndarray,
    hidden_size: int,
    intermediate_size: int,
    tp_size: int,
) -> tuple[np.ndarray, np.ndarray]:
    """How many column- and row-wise linear layers of each unit the tensor-parallel plan splits.

    Megatron's plan (:func:`scaledl.profiling.layout_models.tensor_parallel_plan`) splits the
    four projections of an attention unit (query, key, value column-wise, output row-wise;
    grouped-query attention too) and every linear layer of a feed-forward unit; a feed-forward
    unit's count is read from its parameters, one ``hidden x intermediate`` matrix per linear
    layer (gated MLPs: 3; BERT's intermediate and output units: 1 each), rounded, at least 1.
    The row-wise one is the last of the block's feed-forward linears: the unit the block's
    all-reduce follows (:func:`tensor_parallel_collective_bytes`), the others are column-wise.

    Args:
        layers: layer nodes of one rank in execution order (``layer_type``, ``output_bytes``;
            ``params`` after :func:`shard_tensor_parallel`, so ``1/t`` of the unit's).
        block: :func:`block_ordinal` per layer.
        hidden_size: ``h``.
        intermediate_size: the feed-forward width.
        tp_size: ``t``; 1 parallelises nothing.

    Returns:
        ``(colwise, rowwise)``: float arrays, shape (n_layers,) each, 0 outside the attention
        and feed-forward units (attention: 3 and 1; a gated MLP: 2 and 1; BERT's intermediate
        unit 1 and 0, its output unit 0 and 1).
    """
    types = layers["layer_type"].astype(str).to_numpy()
    linears = np.zeros(len(types))
    if tp_size == 1:
        return linears, linears.copy()
    linears[np.isin(types, ("attention", "cross-attention"))] = 4.0
    ff = types == "feed-forward"
    params = layers["params"].to_numpy(dtype=np.float64)[ff] * tp_size
    linears[ff] = np.maximum(np.rint(params / (hidden_size * intermediate_size)), 1.0)
    rowwise = (tensor_parallel_collective_bytes(layers, block) > 0).astype(float)
    return linears - rowwise, rowwise


def rank_parameters(
    layers: pd.DataFrame, tp_size: int, pp_size: int, split=None
) -> tuple[list[float], float]:
    """Parameters one rank holds per pipeline stage, and the largest sharding unit's.

    Args:
        layers: the layer nodes of the model (``block``, ``layer_type``, ``layer_name``,
            ``params``), in execution order; a repeated call (``name#k``) holds no parameters
            of its own.
        tp_size: tensor-parallel ranks.
        pp_size: pipeline stages.
        split: ``split(layers, tp_size)`` -> the rank's layer nodes (default
            :func:`shard_tensor_parallel`, PyTorch's plan; Megatron-LM's:
            :func:`scaledl.parallel.megatron.shard_megatron`).

    Returns:
        ``(per stage parameters, largest unit parameters)``, one rank's (after the TP split).

    Raises:
        ValueError: ``pp_size`` does not divide the blocks.
    """
    block = block_ordinal(layers["block"])
    stage = stage_of_layers(block, pp_size)
    params = (split or shard_tensor_parallel)(layers, tp_size)["params"].to_numpy(np.float64)
    params = params.copy()
    params[layers["layer_name"].astype(str).str.contains("#").to_numpy()] = 0.0
    unit = unit_of_layers(block)
    largest = max(float(params[unit == u].sum()) for u in np.unique(unit))
    return [float(params[stage == s].sum()) for s in range(pp_size)], largest
