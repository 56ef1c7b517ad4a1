"""The history script of the GNN layout correction (benchmarks/history/layout_gnn.py)."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from flops_method import Method
from tiny_specs import tiny

from scaledl.parallel.collectives import COLLECTIVES, CollectiveModel
from scaledl.parallel.predict import LayoutComposer
from scaledl.parallel.recipe import CORRECTION_FEATURES
from scaledl.profiles.tables import FSDP_API

REPO = Path(__file__).resolve().parents[3]


def _script():
    path = REPO / "benchmarks" / "history" / "layout_gnn.py"
    spec = importlib.util.spec_from_file_location("layout_gnn", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["layout_gnn"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gnn = _script()
EDGE_FEATURES, NODE_FEATURES = gnn.EDGE_FEATURES, gnn.NODE_FEATURES
fit_predict_gnn, layout_graphs = gnn.fit_predict_gnn, gnn.layout_graphs

CM = CollectiveModel(dict.fromkeys(COLLECTIVES, (0.5, 1e-6)),
                         {c: "none" if c in FSDP_API else "t" for c in COLLECTIVES})  # fmt: skip


def workloads():
    kw = {"num_layers": 2, "world_size": 2}
    return [
        *(tiny("bert", batch_size=b, dp_size=2, sharding=s, **kw)
          for b in (2, 4) for s in ("none", "fsdp")),
        *(tiny("bert", batch_size=b, tp_size=2, **kw) for b in (2, 4)),
        *(tiny("bert", batch_size=b, pp_size=2, micro_batches=2, **kw) for b in (2, 4)),
    ]  # fmt: skip


def graphs_of(ws):
    composer = LayoutComposer(Method(), ws, CM)
    pred = composer.predict()
    return layout_graphs(composer, pred, ws), pred


def test_a_layout_graph_is_its_layer_chain_both_ways():
    ws = workloads()
    graphs, pred = graphs_of(ws)
    assert len(graphs) == len(ws)
    for g, it in zip(graphs, pred.iteration_ms, strict=True):
        n = len(g.x)
        assert g.x.shape == (n, len(NODE_FEATURES) + len(CORRECTION_FEATURES))
        assert g.edge_index.shape == (2, 2 * (n - 1)) and g.edge_attr.shape[1] == len(EDGE_FEATURES)
        assert g.log_prior == pytest.approx(np.log(it))
        assert np.isfinite(g.x).all() and np.isfinite(g.edge_attr).all()
    pp = graphs[-1]
    stage_position = pp.x[:, NODE_FEATURES.index("stage_position")]
    assert stage_position[0] == 0 and stage_position[-1] == 1
    crossing = pp.edge_attr[:, EDGE_FEATURES.index("crosses_stage")] == 1
    assert crossing.sum() == 2  # the stage boundary, forward and backward
    assert (pp.edge_attr[crossing, EDGE_FEATURES.index("log1p_boundary_mib")] > 0).all()
    assert pp.x[:, NODE_FEATURES.index("sends_activation")].sum() == 1
    fsdp = graphs[1]
    assert fsdp.x[:, NODE_FEATURES.index("in_sharding_unit")].any()
    tp = graphs[4]
    assert (tp.x[:, NODE_FEATURES.index("log1p_tp_allreduce_ms")] > 0).any()
    bare = pp.without_edges()
    assert bare.edge_index.shape == (2, 0) and np.array_equal(bare.x, pp.x)


def test_the_gnn_learns_a_constant_factor_and_needs_training_workloads():
    ws = workloads()
    graphs, pred = graphs_of(ws)
    measured = 1.5 * pred.iteration_ms
    train = np.ones(len(ws), dtype=bool)
    train[-1] = False
    for edges in (True, False):
        got = fit_predict_gnn(graphs, measured, train, edges=edges, seeds=(0,))
        assert got.shape == (len(ws),)
        np.testing.assert_allclose(got, measured, rtol=0.1)
        again = fit_predict_gnn(graphs, measured, train, edges=edges, seeds=(0,))
        np.testing.assert_array_equal(got, again)  # seeded
    one = np.zeros(len(ws), dtype=bool)
    one[0] = True
    with pytest.raises(ValueError, match="1 training workload"):
        fit_predict_gnn(graphs, measured, one)
