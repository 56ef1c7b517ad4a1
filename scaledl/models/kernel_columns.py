"""Per-layer kernel time of the layer graphs: each layer's operators predicted on its device.

The operator model (:class:`~scaledl.models.operators.OperatorTimeModel`) is passed in; this
module imports neither it nor scikit-learn, so composing a layout does not pay for them.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from scaledl.graph.features import GraphSet, architecture_graphs
from scaledl.graph.layer_graph import build_layer_graph
from scaledl.graph.operators import DESCRIPTOR_COLUMNS, at_batch, aten_descriptors
from scaledl.models.device_columns import device_columns
from scaledl.workloads.identity import architecture_key
from scaledl.workloads.spec import Workload

if TYPE_CHECKING:
    from scaledl.models.operators import OperatorTimeModel

#: The per-layer kernel time columns :func:`kernel_columns` adds (ms).
KERNEL_COLUMNS = ("kernel_fwd_ms", "kernel_bwd_ms")


@lru_cache(maxsize=4096)
def _unique_operators(key: str):
    """Distinct operators of an architecture and how often each layer launches each.

    Args:
        key: :func:`~scaledl.workloads.identity.architecture_key` of the architecture.

    Returns:
        ``(desc_2, desc_3, counts)``: descriptors at batch 2 and 3 of the U distinct operators
        (repeated blocks launch the same ones, predicted once), and ``counts`` of shape
        (n_layers, U).
    """
    base = Workload.parse({**json.loads(key), "batch_size": 1, "world_size": 2, "num_nodes": 1})
    g1, g2 = architecture_graphs(base)  # batch 1 (layers) and 2; see at_batch for why 2 and 3
    g3 = build_layer_graph(base.model_copy(update={"batch_size": 3}))
    d1, d2 = aten_descriptors(g2.operators), aten_descriptors(g3.operators)
    if len(d1) != len(d2):
        raise ValueError(f"{key}: the operators differ at batch sizes 2 and 3")
    both = pd.concat(
        [d1[list(DESCRIPTOR_COLUMNS)].reset_index(drop=True),
         d2[list(DESCRIPTOR_COLUMNS)].add_suffix("_2").reset_index(drop=True)],
        axis=1,
    )  # fmt: skip
    codes, uniques = pd.factorize(pd.MultiIndex.from_frame(both.astype(str)))
    first = pd.Series(np.arange(len(codes))).groupby(codes).first().to_numpy()
    counts = np.zeros((len(g1.layers), len(uniques)))
    np.add.at(counts, (d1["layer_index"].to_numpy(), codes), 1.0)
    return d1.iloc[first].reset_index(drop=True), d2.iloc[first].reset_index(drop=True), counts


def kernel_columns(gs: GraphSet, model: OperatorTimeModel) -> pd.DataFrame:
    """Predicted operator milliseconds summed per layer node, on each workload's device.

    Args:
        gs: the workloads' graphs.
        model: a fitted operator model.

    Returns:
        DataFrame aligned with ``gs.nodes``: ``kernel_fwd_ms``, ``kernel_bwd_ms`` (0 for
        inference workloads and for non-layer nodes).

    Raises:
        scaledl.devices.UnknownDeviceError: a workload's device is not in the device table.
    """
    graph = gs.nodes["graph"].to_numpy()
    layer = (gs.nodes["node_kind"] == "layer").to_numpy()
    layer_index = gs.nodes["layer_index"].to_numpy()
    out = {c: np.zeros(len(gs.nodes)) for c in KERNEL_COLUMNS}
    groups: dict[str, list[int]] = {}
    for g, w in enumerate(gs.workloads):
        groups.setdefault(architecture_key(w), []).append(g)
    combo_of_graph = np.full(len(gs.workloads), -1)
    for key, members in groups.items():
        d1, d2, counts = _unique_operators(key)
        specs = [gs.workloads[g] for g in members]
        combos = pd.DataFrame(
            {
                "batch": [w.batch_size for w in specs],
                "device": [w.device_name for w in specs],
                "precision": [w.precision for w in specs],
            }
        )
        codes = combos.groupby(list(combos), sort=False).ngroup().to_numpy()
        unique = combos.drop_duplicates().reset_index(drop=True)  # ngroup's order
        combo_of_graph[members] = codes
        ops = at_batch(d1, d2, unique["batch"].to_numpy())
        ops = pd.concat(
            [
                ops,
                device_columns(
                    np.repeat(unique["device"].to_numpy(), len(d1)),
                    np.repeat(unique["precision"].to_numpy(), len(d1)),
                ),
            ],
            axis=1,
        )
        rows = np.flatnonzero(layer & np.isin(graph, members))
        for column, direction in zip(KERNEL_COLUMNS, ("forward", "backward"), strict=True):
            if direction == "backward" and specs[0].mode != "train":
                continue
            pred = model.predict(ops, direction).reshape(len(unique), len(d1))
            per_layer = pred @ counts.T  # (combos, layers)
            out[column][rows] = per_layer[combo_of_graph[graph[rows]], layer_index[rows]]
    return pd.DataFrame(out, index=gs.nodes.index)
