"""Train :class:`~scaledl.models.gnn.RuntimeGNN` on layer graphs with early stopping.

Full-batch training (every training graph in one PyTorch Geometric ``Batch``): the graphs are
small, so one step over all of them is milliseconds on a CPU. Adam (Kingma & Ba 2015) on the mean
squared error of log milliseconds; the model with the lowest validation loss is kept and training
stops after ``patience`` epochs without improvement. Seeded: the same data and seed give the same
weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from scaledl.models.gnn import RuntimeGNN


@dataclass
class GNNTrainConfig:
    """Hyper-parameters of GNN training.

    Attributes:
        hidden_channels: width of node states.
        num_layers: TransformerConv layers.
        heads: attention heads.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        max_epochs: upper bound on epochs.
        patience: epochs without validation improvement before stopping.
        seed: torch seed.
    """

    hidden_channels: int = 64
    num_layers: int = 2
    heads: int = 4
    lr: float = 3e-3
    weight_decay: float = 1e-4
    max_epochs: int = 400
    patience: int = 40
    seed: int = 0


def make_graph(
    x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray, log_prior: float, y=None
) -> Data:
    """A PyG ``Data`` of one layer graph.

    Args:
        x: node features, shape (num_nodes, F).
        edge_index: shape (2, num_edges).
        edge_attr: shape (num_edges, F_e).
        log_prior: log of the additive prior in milliseconds.
        y: log iteration milliseconds (training) or ``None``.
    """
    data = Data(
        x=torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)),
        edge_index=torch.from_numpy(np.ascontiguousarray(edge_index, dtype=np.int64)),
        edge_attr=torch.from_numpy(np.ascontiguousarray(edge_attr, dtype=np.float32)),
        log_prior=torch.tensor([log_prior], dtype=torch.float32),
    )
    if y is not None:
        data.y = torch.tensor([y], dtype=torch.float32)
    return data


def _predict(model: RuntimeGNN, batch: Batch) -> torch.Tensor:
    return model(batch.x, batch.edge_index, batch.edge_attr, batch.batch, batch.log_prior)


def train_gnn(
    train_graphs: list[Data],
    val_graphs: list[Data],
    use_prior: bool,
    config: GNNTrainConfig | None = None,
) -> tuple[RuntimeGNN, dict]:
    """Fit a :class:`RuntimeGNN`.

    Args:
        train_graphs: graphs with ``y``.
        val_graphs: graphs with ``y`` for early stopping (may be empty: then the training loss
            is monitored).
        use_prior: predict a correction to ``log_prior`` (ScaleDL) or the log time itself.
        config: hyper-parameters.

    Returns:
        The model with the best validation loss (in eval mode) and a history dict
        (``epochs``, ``best_epoch``, ``best_val_mse``).

    Raises:
        ValueError: no training graph.
    """
    if not train_graphs:
        raise ValueError("GNN training: no training graph")
    config = config or GNNTrainConfig()
    torch.manual_seed(config.seed)
    train = Batch.from_data_list(train_graphs)
    val = Batch.from_data_list(val_graphs) if val_graphs else train
    model = RuntimeGNN(
        in_channels=train.x.shape[1],
        edge_channels=train.edge_attr.shape[1],
        hidden_channels=config.hidden_channels,
        num_layers=config.num_layers,
        heads=config.heads,
        use_prior=use_prior,
    )
    model.feature_mean.copy_(train.x.mean(0))
    model.feature_std.copy_(train.x.std(0).clamp(min=1e-3))
    offset = train.y - train.log_prior if use_prior else train.y
    model.output_bias.fill_(float(offset.mean()))
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    best = (float("inf"), 0, {k: v.clone() for k, v in model.state_dict().items()})
    epoch = 0
    for epoch in range(1, config.max_epochs + 1):
        model.train()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(_predict(model, train), train.y)
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            val_loss = float(torch.nn.functional.mse_loss(_predict(model, val), val.y))
        if val_loss < best[0] - 1e-6:
            best = (val_loss, epoch, {k: v.clone() for k, v in model.state_dict().items()})
        elif epoch - best[1] >= config.patience:
            break
    model.load_state_dict(best[2])
    model.eval()
    return model, {"epochs": epoch, "best_epoch": best[1], "best_val_mse": best[0]}


def predict_gnn(model: RuntimeGNN, graphs: list[Data], chunk: int = 4096) -> np.ndarray:
    """Predicted log milliseconds of shape (len(graphs),)."""
    out = []
    model.eval()
    with torch.no_grad():
        for start in range(0, len(graphs), chunk):
            batch = Batch.from_data_list(graphs[start : start + chunk])
            out.append(_predict(model, batch).numpy())
    return np.concatenate(out) if out else np.zeros(0)
