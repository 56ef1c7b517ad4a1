import numpy as np
import pytest
import torch
from tiny_specs import tiny

from scaledl.graph.features import (
    NUM_EDGE_FEATURES,
    NUM_NODE_FEATURES,
    build_graph_set,
    node_feature_matrix,
)
from scaledl.graph.layer_graph import build_layer_graph
from scaledl.models.gnn import RuntimeGNN
from scaledl.models.gnn_training import GNNTrainConfig, make_batch, predict_gnn, train_gnn
from scaledl.models.threads import single_threaded


@pytest.fixture(autouse=True)
def one_thread():
    """As the methods fit: small graphs, and 2 busy cores make torch threads spin."""
    with single_threaded():
        yield


THREE = [tiny("bert"), tiny("vit", world_size=2), tiny("t5", mode="infer")]


def batch_of(workloads, y=None, prior_shift: float = 0.0):
    gs = build_graph_set(workloads)
    prior = np.log(gs.per_graph_sum(gs.nodes["fwd_flops"].to_numpy()) + 1.0) / 10 + prior_shift
    return gs, make_batch(gs, node_feature_matrix(gs), prior, y)


def model(use_prior: bool, hidden: int = 8) -> RuntimeGNN:
    torch.manual_seed(0)
    return RuntimeGNN(
        NUM_NODE_FEATURES,
        NUM_EDGE_FEATURES,
        hidden_channels=hidden,
        num_layers=2,
        heads=2,
        use_prior=use_prior,
    )


def test_batch_layout_of_three_graphs():
    gs, batch = batch_of(THREE)
    sizes = [len(build_layer_graph(w).nodes) for w in THREE]
    assert torch.bincount(batch.batch).tolist() == sizes
    assert batch.x.shape == (sum(sizes), NUM_NODE_FEATURES) and batch.x.dtype == torch.float32
    assert batch.edge_index.shape[0] == 2 and batch.edge_index.dtype == torch.int64
    assert batch.edge_attr.shape == (batch.edge_index.shape[1], NUM_EDGE_FEATURES)
    assert (batch.edge_attr.sum(1) == 1).all()
    # Edges never cross graphs.
    src, dst = batch.edge_index
    assert torch.equal(batch.batch[src], batch.batch[dst])
    assert batch.log_prior.shape == (3,) and batch.y is None


@pytest.mark.parametrize("use_prior", [True, False])
def test_output_shape_for_a_batch_of_three(use_prior):
    _, batch = batch_of(THREE)
    _, shifted = batch_of(THREE, prior_shift=5.0)
    net = model(use_prior).eval()
    out = net(batch.x, batch.edge_index, batch.edge_attr, batch.batch, batch.log_prior)
    assert out.shape == (3,) and torch.isfinite(out).all()
    out2 = net(shifted.x, shifted.edge_index, shifted.edge_attr, shifted.batch, shifted.log_prior)
    # The prior enters ScaleDL's output; the graph-only baseline ignores it.
    if use_prior:
        assert not torch.allclose(out2, out)
    else:
        torch.testing.assert_close(out2, out)
    assert predict_gnn(net, batch).shape == (3,)


def test_graphs_do_not_influence_each_other():
    net = model(True).eval()
    together = predict_gnn(net, batch_of(THREE)[1])
    alone = np.concatenate([predict_gnn(net, batch_of([w])[1]) for w in THREE])
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-5)


def test_repr_and_config():
    net = model(False)
    text = repr(net)
    assert "TransformerConv" in text and "use_prior=False" in text
    again = RuntimeGNN(**net.config())
    assert again.config() == net.config()
    assert sum(p.numel() for p in again.parameters()) == sum(p.numel() for p in net.parameters())


def test_heads_must_divide_hidden():
    with pytest.raises(ValueError, match="heads=3"):
        RuntimeGNN(NUM_NODE_FEATURES, NUM_EDGE_FEATURES, hidden_channels=8, heads=3)


def dataset(batch_sizes):
    workloads = [tiny(f, batch_size=b) for f in ("bert", "vit") for b in batch_sizes]
    gs = build_graph_set(workloads)
    flops = gs.per_graph_sum(gs.nodes["fwd_flops"].to_numpy())
    y = 0.9 * np.log(flops) - 8.0  # a learnable target: a power law of FLOPs
    return make_batch(gs, node_feature_matrix(gs), np.log(flops) - 8.0, y)


TRAIN, VAL = dataset([1, 2, 3, 5, 8, 13]), dataset([4, 6])
CONFIG = GNNTrainConfig(hidden_channels=8, num_layers=1, heads=2, max_epochs=25, patience=5)


@pytest.mark.parametrize("use_prior", [True, False])
def test_training_is_deterministic_for_a_seed(use_prior):
    a, hist_a = train_gnn(TRAIN, VAL, use_prior=use_prior, config=CONFIG)
    b, hist_b = train_gnn(TRAIN, VAL, use_prior=use_prior, config=CONFIG)
    np.testing.assert_array_equal(predict_gnn(a, VAL), predict_gnn(b, VAL))
    assert hist_a == hist_b
    assert not a.training
    other = GNNTrainConfig(**{**CONFIG.__dict__, "seed": 1})
    c, _ = train_gnn(TRAIN, VAL, use_prior=use_prior, config=other)
    assert not np.array_equal(predict_gnn(a, VAL), predict_gnn(c, VAL))


def test_history_keys_and_best_model_is_kept():
    net, history = train_gnn(TRAIN, None, use_prior=True, config=CONFIG)
    assert set(history) == {"epochs", "best_epoch", "best_val_mse", "train_mse"}
    assert history["best_epoch"] >= 1
    assert history["best_epoch"] <= history["epochs"] <= CONFIG.max_epochs
    # Without validation graphs the training loss is monitored: the kept model has that loss.
    mse = float(np.mean((predict_gnn(net, TRAIN) - TRAIN.y.numpy()) ** 2))
    assert mse == pytest.approx(history["best_val_mse"], rel=1e-4)
    assert history["train_mse"] == pytest.approx(history["best_val_mse"], rel=1e-4)


def test_early_stopping():
    wild = GNNTrainConfig(
        hidden_channels=8, num_layers=1, heads=2, lr=5.0, max_epochs=300, patience=2
    )
    _, history = train_gnn(TRAIN, VAL, use_prior=True, config=wild)
    assert history["epochs"] < 300
    assert history["epochs"] - history["best_epoch"] == 2


def test_training_improves_the_fit():
    short = GNNTrainConfig(**{**CONFIG.__dict__, "max_epochs": 1})
    long = GNNTrainConfig(**{**CONFIG.__dict__, "max_epochs": 150, "patience": 150})
    _, h1 = train_gnn(TRAIN, VAL, use_prior=False, config=short)
    _, h2 = train_gnn(TRAIN, VAL, use_prior=False, config=long)
    assert h2["best_val_mse"] < h1["best_val_mse"]


def test_training_needs_targets():
    gs = build_graph_set(THREE)
    no_y = make_batch(gs, node_feature_matrix(gs), np.zeros(3))
    with pytest.raises(ValueError, match="no training graph"):
        train_gnn(no_y, None, use_prior=True)


def test_weights_are_normalised_to_mean_one_and_an_empty_batch_keeps_none(recwarn):
    gs, batch = batch_of(THREE[:2])
    weighted = make_batch(gs, node_feature_matrix(gs), batch.log_prior.numpy(), [1.0, 2.0],
                          weight=[1.0, 3.0])  # fmt: skip
    assert weighted.weight.tolist() == [0.5, 1.5]
    empty = build_graph_set([])
    nothing = np.zeros(0)
    none = make_batch(empty, np.zeros((0, NUM_NODE_FEATURES)), nothing, nothing, nothing)
    assert none.weight.numel() == 0 and none.y.numel() == 0
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
