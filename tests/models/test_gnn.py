import numpy as np
import pytest
import torch
from torch_geometric.data import Batch

from scaledl.models.gnn import RuntimeGNN
from scaledl.models.gnn_training import GNNTrainConfig, make_graph, predict_gnn, train_gnn

IN, EDGE = 6, 5


def tiny_graph(n_nodes: int, seed: int, y: float | None = None):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_nodes, IN))
    src = np.arange(n_nodes - 1)
    edge_index = np.stack([src, src + 1])
    edge_attr = np.eye(EDGE)[rng.integers(0, EDGE, size=n_nodes - 1)]
    prior = float(np.log(1.0 + x[:, 0].clip(min=0).sum()))
    return make_graph(x, edge_index, edge_attr, prior, y=y)


def dataset(count: int, seed: int = 0):
    graphs = [tiny_graph(3 + i % 4, seed + i) for i in range(count)]
    for g in graphs:  # a learnable target: the prior plus the node count
        g.y = g.log_prior + 0.1 * g.x.shape[0]
    return graphs


def model(use_prior: bool) -> RuntimeGNN:
    torch.manual_seed(0)
    return RuntimeGNN(IN, EDGE, hidden_channels=8, num_layers=2, heads=2, use_prior=use_prior)


@pytest.mark.parametrize("use_prior", [True, False])
def test_output_shape_for_a_batch_of_three(use_prior):
    batch = Batch.from_data_list([tiny_graph(n, seed=n) for n in (3, 5, 4)])
    net = model(use_prior).eval()
    out = net(batch.x, batch.edge_index, batch.edge_attr, batch.batch, batch.log_prior)
    assert out.shape == (3,)
    assert torch.isfinite(out).all()
    # The prior is an additive offset for ScaleDL and ignored by the graph-only baseline.
    shifted = net(batch.x, batch.edge_index, batch.edge_attr, batch.batch, batch.log_prior + 5.0)
    if use_prior:
        assert not torch.allclose(shifted, out)
    else:
        torch.testing.assert_close(shifted, out)


def test_graph_order_in_batch_does_not_mix_graphs():
    graphs = [tiny_graph(n, seed=n) for n in (3, 5, 4)]
    net = model(True).eval()
    together = predict_gnn(net, graphs)
    alone = np.concatenate([predict_gnn(net, [g]) for g in graphs])
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-6)
    assert predict_gnn(net, []).shape == (0,)


def test_repr_and_config():
    net = model(False)
    text = repr(net)
    assert "TransformerConv" in text and "use_prior=False" in text
    again = RuntimeGNN(**net.config())
    assert again.config() == net.config()
    assert sum(p.numel() for p in again.parameters()) == sum(p.numel() for p in net.parameters())


def test_heads_must_divide_hidden():
    with pytest.raises(ValueError, match="heads=3"):
        RuntimeGNN(IN, EDGE, hidden_channels=8, heads=3)


def test_make_graph_fields():
    g = tiny_graph(4, seed=1, y=2.5)
    assert g.x.shape == (4, IN) and g.x.dtype == torch.float32
    assert g.edge_index.shape == (2, 3) and g.edge_index.dtype == torch.int64
    assert g.edge_attr.shape == (3, EDGE)
    assert g.log_prior.shape == (1,) and float(g.y) == 2.5


CONFIG = GNNTrainConfig(hidden_channels=8, num_layers=1, heads=2, max_epochs=25, patience=5)


@pytest.mark.parametrize("use_prior", [True, False])
def test_training_is_deterministic_for_a_seed(use_prior):
    train, val = dataset(10), dataset(4, seed=100)
    a, hist_a = train_gnn(train, val, use_prior=use_prior, config=CONFIG)
    b, hist_b = train_gnn(train, val, use_prior=use_prior, config=CONFIG)
    np.testing.assert_array_equal(predict_gnn(a, val), predict_gnn(b, val))
    assert hist_a == hist_b
    assert not a.training


def test_training_history_and_early_stopping():
    train = dataset(10)
    model_, history = train_gnn(train, [], use_prior=True, config=CONFIG)
    assert set(history) == {"epochs", "best_epoch", "best_val_mse", }
    assert 1 <= history["best_epoch"] <= history["epochs"] <= CONFIG.max_epochs
    pred = predict_gnn(model_, train)
    y = np.array([float(g.y) for g in train])
    assert np.mean((pred - y) ** 2) == pytest.approx(history["best_val_mse"], rel=1e-4)
    # Patience 1 and a learning rate that overshoots: stops long before max_epochs.
    wild = GNNTrainConfig(hidden_channels=8, num_layers=1, heads=2, lr=5.0, max_epochs=200,
                          patience=1)  # fmt: skip
    _, history = train_gnn(train, dataset(4, seed=50), use_prior=True, config=wild)
    assert history["epochs"] < 200
    assert history["epochs"] - history["best_epoch"] == 1


def test_training_improves_on_the_initial_fit():
    train, val = dataset(12), dataset(4, seed=100)
    first = GNNTrainConfig(**{**CONFIG.__dict__, "max_epochs": 1})
    _, h1 = train_gnn(train, val, use_prior=False, config=first)
    _, h2 = train_gnn(train, val, use_prior=False,
                      config=GNNTrainConfig(**{**CONFIG.__dict__, "max_epochs": 80}))  # fmt: skip
    assert h2["best_val_mse"] < h1["best_val_mse"]


def test_training_needs_graphs():
    with pytest.raises(ValueError, match="no training graph"):
        train_gnn([], [], use_prior=True)
