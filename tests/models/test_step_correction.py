"""The learned correction of composed LLM steps (scaledl.models.step_correction)."""

from types import SimpleNamespace

import numpy as np
import pytest

from scaledl.models.gnn_training import GNNTrainConfig
from scaledl.models.step_correction import (
    CONTEXT_FEATURES,
    EDGE_TYPES,
    NODE_TYPES,
    CorrectionConfig,
    StepCorrection,
    context_features,
    correction_graph,
)


def _graph(n: int, features: np.ndarray, types=None, edge_types=None) -> SimpleNamespace:
    edges = np.stack([np.arange(n - 1), np.arange(1, n)])
    return SimpleNamespace(
        node_types=types or ["attention", "mlp"] * (n // 2) + ["head"] * (n % 2),
        node_features=features,
        edges=edges,
        edge_types=edge_types or ["data_flow"] * (n - 1),
    )


def _context(n_gpus: int = 8) -> np.ndarray:
    return context_features({"forward_s": 1.0, "backward_s": 2.0}, 4.0, n_gpus, "bf16", False, 1e5)


def test_context_features_are_shares_and_scale():
    ctx = context_features({"forward_s": 1.0, "pp_bubble_s": 0.5}, 2.0, 16, "fp8", True, 1000.0)
    names = dict(zip(CONTEXT_FEATURES, ctx, strict=True))
    assert names["share_forward_s"] == 0.5 and names["share_pp_bubble_s"] == 0.25
    assert names["share_backward_s"] == 0.0
    assert names["log2_n_gpus"] == 4.0 and names["log2_bytes_per_element_vs_16bit"] == -1.0
    assert names["multi_node"] == 1.0 and names["log10_tokens_per_gpu"] == pytest.approx(3.0)
    with pytest.raises(ValueError, match="precision 'int3'"):
        context_features({}, 1.0, 8, "int3", False, 1.0)
    with pytest.raises(ValueError, match="iteration_s=0"):
        context_features({}, 0.0, 8, "bf16", False, 1.0)


def test_correction_graph_one_hots_types_and_broadcasts_context():
    g = _graph(3, np.ones((3, 2)), types=["attention", "mystery", "mlp"],
               edge_types=["data_flow", "teleport"])  # fmt: skip
    c = correction_graph(g, _context(), 2.5)
    assert c.x.shape == (3, 2 + len(NODE_TYPES) + len(CONTEXT_FEATURES))
    types = c.x[:, 2 : 2 + len(NODE_TYPES)]
    assert types[1, NODE_TYPES.index("other")] == 1 and types[0, NODE_TYPES.index("attention")] == 1
    assert c.edge_attr.shape == (2, len(EDGE_TYPES))
    assert c.edge_attr[1, EDGE_TYPES.index("other")] == 1
    assert np.all(c.x[:, -len(CONTEXT_FEATURES) :] == _context())
    assert c.without_edges().edge_index.shape == (2, 0) and c.composed_s == 2.5


def test_correction_graph_refuses_inconsistent_graphs():
    g = _graph(3, np.ones((3, 2)))
    with pytest.raises(ValueError, match="4 node types for features of shape"):
        correction_graph(SimpleNamespace(**{**vars(g), "node_types": ["mlp"] * 4}), _context(), 1)
    with pytest.raises(ValueError, match="non-finite"):
        correction_graph(_graph(3, np.full((3, 2), np.nan)), _context(), 1.0)
    with pytest.raises(ValueError, match="edge index outside"):
        correction_graph(SimpleNamespace(**{**vars(g), "edges": np.array([[0, 1], [1, 5]])}),
                         _context(), 1.0)  # fmt: skip


def test_too_few_rows_fall_back_to_the_weighted_mean_log_ratio():
    graphs = [correction_graph(_graph(2, np.ones((2, 1))), _context(), 1.0) for _ in range(3)]
    corr = StepCorrection().fit(graphs, np.array([2.0, 2.0, 8.0]), np.array([1.0, 1.0, 2.0]))
    assert corr.kind == "constant"
    expected = (2 * np.log(2) + 2 * np.log(8)) / 4
    assert corr.predict(graphs) == pytest.approx(np.exp(expected) * np.ones(3))
    with pytest.raises(RuntimeError, match="before fit"):
        StepCorrection().predict(graphs)
    with pytest.raises(ValueError, match="positive"):
        StepCorrection().fit(graphs, np.array([1.0, -1.0, 1.0]))


def test_gnn_learns_a_correction_that_depends_on_the_graph():
    rng = np.random.default_rng(0)
    graphs, measured = [], []
    for i in range(48):
        share = rng.uniform(0, 1)  # the composition misses a part proportional to this feature
        feats = np.column_stack([np.full(4, share), rng.normal(size=4)])
        composed = float(np.exp(rng.normal()))
        graphs.append(correction_graph(_graph(4, feats), _context(2 ** (i % 4)), composed))
        measured.append(composed * np.exp(0.8 * share))
    measured = np.array(measured)
    config = CorrectionConfig(train=GNNTrainConfig(hidden_channels=16, max_epochs=150,
                                                   patience=150, lr=1e-2), seeds=(0,))  # fmt: skip
    corr = StepCorrection(config=config).fit(graphs[:36], measured[:36],
                                             architectures=list(range(36)))  # fmt: skip
    assert corr.kind == "gnn"
    composed = np.array([g.composed_s for g in graphs[36:]])
    err_composed = np.mean(np.abs(composed / measured[36:] - 1))
    err_corrected = np.mean(np.abs(corr.predict(graphs[36:]) / measured[36:] - 1))
    assert err_corrected < 0.5 * err_composed
    ablation = StepCorrection(edges=False, config=config).fit(graphs[:36], measured[:36])
    assert ablation.kind == "gnn" and ablation.predict(graphs[36:]).shape == (12,)


def test_vocabularies_cover_the_composition():
    from scaledl.parallel import llm_step

    assert set(llm_step.NODE_TYPES) | {"other"} == set(NODE_TYPES)
    assert set(llm_step.EDGE_TYPES) | {"other"} == set(EDGE_TYPES)
    from scaledl.models.step_correction import COMPONENTS

    assert set(llm_step.COMPONENTS) == set(COMPONENTS)
