r"""The runtime GNN: a graph Transformer over the layer graph that predicts iteration time.

ScaleDL's second idea (arXiv 2511.04162, Sec. III-C): message passing over the layer graph
captures what a sum of layer times misses: overlap of gradient all-reduce with backward, framework
overhead between layers, cache effects across neighbouring layers. Each layer applies
``TransformerConv`` (Shi et al. 2021, "Masked Label Prediction: Unified Message Passing Model for
Semi-Supervised Classification", with edge features) with a residual connection and layer norm:

.. math::
    \mathbf{h}^{(l+1)} = \mathrm{LN}\left(\mathbf{h}^{(l)} + \mathrm{GELU}\left(
    \mathrm{TransformerConv}(\mathbf{h}^{(l)}, \mathcal{E}, \mathbf{e})\right)\right)

The readout concatenates mean and max pooling and the log of the additive prior and maps them
through an MLP to a scalar :math:`\delta`, clamped to the range of corrections seen in training
at inference (an unseen architecture is never pushed further from its prior than any training
one was); the prediction is :math:`\log \hat t = \log t_{\text{additive}} + \delta` (a
correction to the sum of layer-wise predictions) when ``use_prior`` is set, else
:math:`\log \hat t = \delta` (the graph-only, DNNPerf-style baseline).
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import TransformerConv, global_max_pool, global_mean_pool


class RuntimeGNN(nn.Module):
    r"""Graph Transformer predicting log iteration milliseconds of layer graphs.

    Args:
        in_channels: node feature size.
        edge_channels: edge feature size.
        hidden_channels: width of the hidden node states.
        num_layers: ``TransformerConv`` layers.
        heads: attention heads per layer (``hidden_channels`` must be divisible by it).
        dropout: dropout on attention coefficients and in the readout.
        use_prior: add the additive prior ``log_prior`` to the output (ScaleDL) or not
            (graph-only baseline).

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, edge indices
          :math:`(2, |\mathcal{E}|)`, edge features :math:`(|\mathcal{E}|, F_{e})`, batch vector
          :math:`(|\mathcal{V}|)`, log prior :math:`(B)`
        - **output:** log milliseconds :math:`(B)`
    """

    def __init__(
        self,
        in_channels: int,
        edge_channels: int,
        hidden_channels: int = 64,
        num_layers: int = 2,
        heads: int = 4,
        dropout: float = 0.0,
        use_prior: bool = True,
    ) -> None:
        super().__init__()
        if hidden_channels % heads:
            raise ValueError(f"heads={heads} must divide hidden_channels={hidden_channels}")
        self.in_channels = in_channels
        self.edge_channels = edge_channels
        self.hidden_channels = hidden_channels
        self.num_layers = num_layers
        self.heads = heads
        self.use_prior = use_prior
        self.encoder = nn.Sequential(nn.Linear(in_channels, hidden_channels), nn.GELU())
        self.convs = nn.ModuleList(
            TransformerConv(
                hidden_channels,
                hidden_channels // heads,
                heads=heads,
                edge_dim=edge_channels,
                dropout=dropout,
                root_weight=True,
            )
            for _ in range(num_layers)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(hidden_channels) for _ in range(num_layers))
        self.readout = nn.Sequential(
            nn.Linear(2 * hidden_channels + 1, hidden_channels),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_channels, 1),
        )
        self.register_buffer("feature_mean", torch.zeros(in_channels))
        self.register_buffer("feature_std", torch.ones(in_channels))
        self.register_buffer("output_bias", torch.zeros(1))
        # Range of the correction seen in training (set by the trainer): outside its data the
        # GNN may not move the prediction further from the prior than it ever did in training.
        self.register_buffer("delta_min", torch.full((1,), -float("inf")))
        self.register_buffer("delta_max", torch.full((1,), float("inf")))

    def forward(
        self,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        edge_attr: torch.Tensor,
        batch: torch.Tensor,
        log_prior: torch.Tensor,
    ) -> torch.Tensor:
        """Predict log iteration milliseconds per graph (see the class docstring for shapes)."""
        h = self.encoder((x - self.feature_mean) / self.feature_std)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            h = norm(h + nn.functional.gelu(conv(h, edge_index, edge_attr)))
        num_graphs = log_prior.shape[0]
        pooled = torch.cat(
            [
                global_mean_pool(h, batch, size=num_graphs),
                global_max_pool(h, batch, size=num_graphs),
                log_prior.unsqueeze(-1) if self.use_prior else torch.zeros_like(log_prior)[:, None],
            ],
            dim=-1,
        )
        delta = self.readout(pooled).squeeze(-1) + self.output_bias
        if not self.training:
            delta = torch.maximum(torch.minimum(delta, self.delta_max), self.delta_min)
        return log_prior + delta if self.use_prior else delta

    def extra_repr(self) -> str:  # noqa: D102
        return f"use_prior={self.use_prior}"

    def config(self) -> dict:
        """Constructor arguments (saved beside the state dict in predictor bundles)."""
        return {
            "in_channels": self.in_channels,
            "edge_channels": self.edge_channels,
            "hidden_channels": self.hidden_channels,
            "num_layers": self.num_layers,
            "heads": self.heads,
            "use_prior": self.use_prior,
        }
