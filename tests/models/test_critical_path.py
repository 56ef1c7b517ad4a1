"""The critical-path assembly on hand-made graphs, and on a real traced two-rank workload."""

import numpy as np
import pandas as pd
import pytest
from tiny_specs import tiny

from scaledl.graph.features import build_graph_set
from scaledl.graph.layer_graph import EDGE_TYPES
from scaledl.models.critical_path import assemble, critical_path

GRADIENT = EDGE_TYPES.index("gradient")
SEQUENTIAL = EDGE_TYPES.index("sequential")


def graph(fwd, bwd, buckets, opt_ms=0.0):
    """One graph: layers 0..L-1, then one all-reduce node per bucket, then the optimizer.

    Args:
        fwd, bwd: per-layer forward and backward ms.
        buckets: ``[(allreduce_ms, [layer indices whose gradients it holds]), ...]``.
        opt_ms: the optimizer step.
    """
    n_layers = len(fwd)
    kind = ["layer"] * n_layers + ["allreduce"] * len(buckets) + ["optimizer"]
    n = len(kind)
    forward = np.r_[fwd, np.zeros(len(buckets)), opt_ms]
    backward = np.r_[bwd, np.zeros(len(buckets) + 1)]
    total = np.r_[np.add(fwd, bwd), [b[0] for b in buckets], opt_ms]
    edges = [(i, i + 1, SEQUENTIAL) for i in range(n_layers - 1)]
    for k, (_, layers) in enumerate(buckets):
        edges += [(layer, n_layers + k, GRADIENT) for layer in layers]
    edge_index = np.array([[e[0] for e in edges], [e[1] for e in edges]], dtype=np.int64)
    return dict(
        graph=np.zeros(n, dtype=np.int64),
        node_kind=np.array(kind),
        layer_index=np.r_[np.arange(n_layers), -np.ones(len(buckets) + 1)].astype(int),
        node_index=np.arange(n),
        forward_ms=forward,
        backward_ms=backward,
        total_ms=total,
        edge_index=edge_index,
        edge_type=np.array([e[2] for e in edges], dtype=np.int64),
        num_graphs=1,
    )


def test_without_buckets_the_critical_path_is_the_sum():
    g = graph([1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [], opt_ms=1.5)
    cp = assemble(**g)
    assert cp.iteration_ms[0] == pytest.approx(6.0 + 12.0 + 1.5)
    assert cp.iteration_ms[0] == pytest.approx(cp.sum_ms[0])
    assert cp.exposed_allreduce_ms[0] == 0.0


def test_no_overlap_is_the_sum():
    # The only bucket holds the first layer's gradients: ready when backward ends.
    g = graph([1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [(5.0, [0, 2])], opt_ms=1.0)
    cp = assemble(**g)
    assert cp.iteration_ms[0] == pytest.approx(6 + 12 + 5 + 1) == pytest.approx(cp.sum_ms[0])
    assert cp.exposed_allreduce_ms[0] == pytest.approx(5.0)


def test_full_overlap_is_the_max_of_compute_and_communication():
    # The bucket of the last layer is ready after its backward (6 ms into backward) and its 4 ms
    # all-reduce hides under the 6 ms of backward left: the iteration is the compute alone.
    g = graph([1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [(4.0, [2])], opt_ms=1.0)
    cp = assemble(**g)
    compute = 6 + 12 + 1
    assert cp.iteration_ms[0] == pytest.approx(max(compute, 6 + 6 + 4 + 1)) == compute
    assert cp.exposed_allreduce_ms[0] == 0.0
    # A long all-reduce is exposed by what outlasts backward.
    g = graph([1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [(10.0, [2])], opt_ms=1.0)
    assert assemble(**g).iteration_ms[0] == pytest.approx(6 + 6 + 10 + 1)


def test_the_communication_lane_serialises_buckets_in_order():
    # Bucket 0 (layer 2) ready at F+6, bucket 1 (layer 1) ready at F+10: 0 runs 6..14 (ms after
    # F), bucket 1 waits for it (14..17), backward ends at 12: 3 ms exposed.
    g = graph([1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [(8.0, [2]), (3.0, [1])], opt_ms=0.0)
    cp = assemble(**g)
    assert cp.iteration_ms[0] == pytest.approx(6 + 17)
    assert cp.exposed_allreduce_ms[0] == pytest.approx(17 - 12)
    assert cp.allreduce_ms[0] == pytest.approx(11.0)
    # The critical path lies between max(compute, communication) and the sum.
    assert max(18.0, 11.0) <= cp.iteration_ms[0] <= cp.sum_ms[0]


def test_graphs_are_assembled_independently():
    a = graph([1.0, 1.0], [1.0, 1.0], [(3.0, [1])])
    b = graph([2.0], [5.0], [])
    keys = ("node_kind", "layer_index", "node_index", "forward_ms", "backward_ms", "total_ms")
    both = {k: np.concatenate([a[k], b[k]]) for k in keys}
    both["graph"] = np.concatenate([a["graph"], b["graph"] + 1])
    offset = len(a["graph"])
    both["edge_index"] = np.concatenate([a["edge_index"], b["edge_index"] + offset], axis=1)
    both["edge_type"] = np.concatenate([a["edge_type"], b["edge_type"]])
    cp = assemble(**both, num_graphs=2)
    np.testing.assert_allclose(
        cp.iteration_ms, [assemble(**a).iteration_ms[0], assemble(**b).iteration_ms[0]]
    )


def test_bad_input_is_named():
    g = graph([1.0], [1.0], [])
    with pytest.raises(ValueError, match="unknown value"):
        assemble(**{**g, "node_kind": np.array(["layer", "loss"])})
    with pytest.raises(ValueError, match="'backward_ms' must be finite"):
        assemble(**{**g, "backward_ms": np.array([-1.0, 0.0])})


def test_a_traced_two_rank_workload_overlaps_its_buckets():
    big = {"hidden_size": 256, "num_layers": 2, "num_heads": 4, "intermediate_size": 1024}
    workloads = [tiny("bert", world_size=2, **big), tiny("bert", world_size=1, **big)]
    gs = build_graph_set(workloads)
    nodes = gs.nodes
    times = pd.DataFrame(
        {
            "forward_ms": np.where(nodes["node_kind"] == "allreduce", 0.0, 1.0),
            "backward_ms": np.where(nodes["node_kind"] == "layer", 2.0, 0.0),
        }
    )
    times["total_ms"] = np.where(
        nodes["node_kind"] == "allreduce", 0.5, times["forward_ms"] + times["backward_ms"]
    )
    cp = critical_path(gs, times)
    sums = gs.per_graph_sum(times["total_ms"].to_numpy())
    np.testing.assert_allclose(cp.sum_ms, sums)
    assert cp.iteration_ms[1] == pytest.approx(sums[1])  # one rank: no bucket, the sum
    assert cp.iteration_ms[0] < sums[0]  # the first (1 MiB) bucket overlaps backward
    assert cp.allreduce_ms[0] > 0 and cp.allreduce_ms[1] == 0
