"""Train :class:`~scaledl.models.gnn.RuntimeGNN` on layer graphs with early stopping.

Full-batch training (every training graph in one batch, PyTorch Geometric's layout): the graphs are
small, so one step over all of them is milliseconds on a CPU. Adam (Kingma & Ba 2015) on the mean
squared error of log milliseconds, each graph weighted by the precision of its label
(:func:`label_weights`); the model with the lowest validation loss is kept and training
stops after ``patience`` epochs without improvement. Seeded: the same data and seed give the same
weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from scaledl.graph.features import GraphSet

if TYPE_CHECKING:  # PyTorch Geometric is imported when a GNN is trained, not before
    from scaledl.models.gnn import RuntimeGNN

#: Relative error every label is assumed to have at least in :func:`label_weights`.
LABEL_SE_FLOOR = 0.02


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
        delta_margin: the output is clamped to the training targets' range (corrections to the
            prior for ScaleDL) widened by this fraction of its width on each side.
        seed: torch seed.
    """

    hidden_channels: int = 64
    num_layers: int = 2
    heads: int = 4
    lr: float = 3e-3
    weight_decay: float = 1e-4
    max_epochs: int = 400
    patience: int = 40
    delta_margin: float = 0.1
    seed: int = 0


@dataclass
class GraphBatch:
    """Tensors of a set of graphs in PyTorch Geometric's batch layout.

    Attributes:
        x: node features, shape (num_nodes, F), float32.
        edge_index: shape (2, num_edges), int64.
        edge_attr: shape (num_edges, F_e), float32.
        batch: graph index of every node, shape (num_nodes,), int64.
        log_prior: log of the additive prior in milliseconds, shape (num_graphs,).
        y: log iteration milliseconds, shape (num_graphs,), or ``None``.
        weight: per-graph loss weights, shape (num_graphs,), mean 1, or ``None`` (equal).
    """

    x: torch.Tensor
    edge_index: torch.Tensor
    edge_attr: torch.Tensor
    batch: torch.Tensor
    log_prior: torch.Tensor
    y: torch.Tensor | None = None
    weight: torch.Tensor | None = None


def make_batch(
    gs: GraphSet,
    x: np.ndarray,
    log_prior: np.ndarray,
    y: np.ndarray | None = None,
    weight: np.ndarray | None = None,
) -> GraphBatch:
    """A :class:`GraphBatch` of a graph set and its node features.

    Args:
        gs: the graphs.
        x: node features of shape (num_nodes, F).
        log_prior: shape (num_graphs,).
        y: targets of shape (num_graphs,) or ``None``.
        weight: loss weights of shape (num_graphs,) (normalised to mean 1) or ``None``; a
            batch of no graphs (an empty validation split, which :func:`train_gnn` replaces by
            the training graphs) keeps its empty weights.
    """
    if weight is not None:
        weight = np.asarray(weight, dtype=np.float64)
        if weight.size:
            weight = weight / weight.mean()
    return GraphBatch(
        x=torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)),
        edge_index=torch.from_numpy(np.array(gs.edge_index, dtype=np.int64)),
        edge_attr=torch.from_numpy(gs.edge_attr()),
        batch=torch.from_numpy(np.array(gs.graph, dtype=np.int64)),
        log_prior=torch.from_numpy(np.asarray(log_prior, dtype=np.float32)),
        y=None if y is None else torch.from_numpy(np.asarray(y, dtype=np.float32)),
        weight=None if weight is None else torch.from_numpy(weight.astype(np.float32)),
    )


def label_weights(rel_se: np.ndarray, floor: float = LABEL_SE_FLOOR) -> np.ndarray:
    """Inverse-variance loss weights of labels with a relative standard error.

    A log-time target with relative standard error ``s`` has variance about ``s**2``; the
    weight is ``1 / (floor**2 + s**2)`` (weighted least squares, Aitken 1935), so a label that
    reproduced badly counts less, and labels more precise than ``floor`` do not dominate. A
    missing error (``nan``) counts as 0.

    Args:
        rel_se: relative standard errors, shape (n,).
        floor: the error every label is assumed to have at least (model error included).

    Returns:
        Weights of shape (n,), mean 1.
    """
    se = np.nan_to_num(np.asarray(rel_se, dtype=np.float64), nan=0.0)
    weight = 1.0 / (floor**2 + se**2)
    return weight / weight.mean()


def _loss(pred: torch.Tensor, batch: GraphBatch) -> torch.Tensor:
    """(Weighted) mean squared error of log milliseconds."""
    err = (pred - batch.y) ** 2
    return err.mean() if batch.weight is None else (err * batch.weight).mean()


def _predict(model: RuntimeGNN, batch: GraphBatch) -> torch.Tensor:
    return model(batch.x, batch.edge_index, batch.edge_attr, batch.batch, batch.log_prior)


def train_gnn(
    train: GraphBatch,
    val: GraphBatch | None,
    use_prior: bool,
    config: GNNTrainConfig | None = None,
) -> tuple[RuntimeGNN, dict]:
    """Fit a :class:`RuntimeGNN`.

    Args:
        train: training graphs with ``y``.
        val: graphs with ``y`` for early stopping (``None``: the training loss is monitored).
        use_prior: predict a correction to ``log_prior`` (ScaleDL) or the log time itself.
        config: hyper-parameters.

    Returns:
        The model with the best validation loss (in eval mode) and a history dict
        (``epochs``, ``best_epoch``, ``best_val_mse``, and ``train_mse``: the kept model's
        weighted mean squared error of log milliseconds on the training graphs).

    Raises:
        ValueError: no training graph.
    """
    # models.gnn loads PyTorch Geometric (about 1.5 s); only building the network needs it.
    from scaledl.models.gnn import RuntimeGNN

    if train.y is None or len(train.y) == 0:
        raise ValueError("GNN training: no training graph with a target")
    config = config or GNNTrainConfig()
    torch.manual_seed(config.seed)
    val = val if val is not None and val.y is not None and len(val.y) else train
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
    margin = config.delta_margin * float(offset.max() - offset.min())
    model.delta_min.fill_(float(offset.min()) - margin)
    model.delta_max.fill_(float(offset.max()) + margin)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    best = (float("inf"), 0, {k: v.clone() for k, v in model.state_dict().items()})
    epoch = 0
    for epoch in range(1, config.max_epochs + 1):
        model.train()
        optimizer.zero_grad()
        loss = _loss(_predict(model, train), train)
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            val_loss = float(_loss(_predict(model, val), val))
        if val_loss < best[0] - 1e-6:
            best = (val_loss, epoch, {k: v.clone() for k, v in model.state_dict().items()})
        elif epoch - best[1] >= config.patience:
            break
    model.load_state_dict(best[2])
    model.eval()
    with torch.no_grad():
        train_loss = float(_loss(_predict(model, train), train))
    return model, {
        "epochs": epoch,
        "best_epoch": best[1],
        "best_val_mse": best[0],
        "train_mse": train_loss,
    }


def predict_gnn(model: RuntimeGNN, batch: GraphBatch) -> np.ndarray:
    """Predicted log milliseconds of shape (num_graphs,)."""
    model.eval()
    with torch.no_grad():
        return _predict(model, batch).numpy().astype(np.float64)
