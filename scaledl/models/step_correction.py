"""The learned correction of composed LLM training steps: a GNN over the step graph.

ScaleDL's GNN idea (arXiv 2511.04162 Sec. III-C; :class:`~scaledl.models.gnn.RuntimeGNN`)
applied to :func:`~scaledl.parallel.llm_step.compose_step`: the composition of one rank's step
is the prior, and the same graph Transformer predicts ``log(measured / composed)`` from the
step's graph (:class:`~scaledl.parallel.llm_step.StepGraph`), so the corrected step is
``composed * exp(delta)``. Its inputs (:func:`correction_graph`):

* **nodes**: the composition's node features (``StepGraph.node_features``, named by
  ``scaledl.parallel.llm_step.NODE_FEATURES``), a one-hot of the node's type over
  :data:`NODE_TYPES` (a type not listed sets ``other``), and the step's context on every node
  (:data:`CONTEXT_FEATURES`): each exposed component's share of the composed step
  (:data:`COMPONENTS`), ``log2`` of the GPU count, the precision's ``log2`` bytes per element
  relative to 16-bit, whether the job spans nodes and ``log10`` of the tokens per GPU per step;
* **edges**: the graph's edges with a one-hot of their type over :data:`EDGE_TYPES`
  (``other`` for a type not listed).

The ``no_edges`` ablation (:meth:`StepCorrection.fit` with ``edges=False``) trains the same model
on the same nodes without edges (a set model over the step's parts): the test of whether the
graph structure helps.

Decisions, fixed before the first leave-one-source-out run and not changed after it
(:data:`DEFAULT_CONFIG`): the GNN's hyper-parameters are
:class:`~scaledl.models.gnn_training.GNNTrainConfig`'s defaults with ``max_epochs`` 200 and
``patience`` 30 (for the command's 10-minute budget on 2 cores); an ensemble of three seeds (the
geometric mean of their predictions), each stopping early on its own random quarter of the
training rows; loss weights equal per source (each training row weighs ``1 / rows of its
source``), so one large source does not decide the correction. The prediction is clamped to the
range of corrections seen in training (``RuntimeGNN``'s ``delta_min``/``delta_max``).

**Fallback**: with fewer than :data:`MIN_TRAINING_ROWS` training rows or fewer than
:data:`MIN_ARCHITECTURES` distinct model architectures among them a GNN is not fitted; the
correction is the constant weighted mean of the training rows' ``log(measured / composed)``
(``kind == "constant"``), and the result says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from scaledl.models.gnn_training import GNNTrainConfig, GraphBatch, predict_gnn, train_gnn
from scaledl.models.threads import single_threaded

#: Node types with their own one-hot column (else ``other``): the composition's
#: (``scaledl.parallel.llm_step.NODE_TYPES``; repeated here, a lower layer, and kept equal by a
#: test).
NODE_TYPES = ("embedding", "attention", "mlp", "head", "recompute", "tp_collective", "cp_p2p",
              "pp_p2p", "bubble", "dp_collective", "param_gather", "fsdp_collective",
              "optimizer", "other")  # fmt: skip
#: Edge types with their own one-hot column (else ``other``; ``llm_step.EDGE_TYPES``).
EDGE_TYPES = ("data_flow", "overlaps", "on_path", "other")
#: Exposed components of the composed step whose share of it is a context feature.
COMPONENTS = ("forward_s", "backward_s", "recompute_s", "tp_exposed_s", "cp_exposed_s",
              "pp_p2p_s", "pp_bubble_s", "dp_exposed_s", "fsdp_exposed_s",
              "optimizer_s", "weight_cast_s")  # fmt: skip
#: Context features on every node, in column order (module docstring).
CONTEXT_FEATURES = (
    *(f"share_{c}" for c in COMPONENTS),
    "log2_n_gpus",
    "log2_bytes_per_element_vs_16bit",
    "multi_node",
    "log10_tokens_per_gpu",
)
#: Bytes per element of the GEMM inputs of each precision (module docstring).
PRECISION_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_blockwise": 1.0,
                   "fp8_rowwise": 1.0,
                   "mxfp8": 1.0, "nvfp4": 0.5}  # fmt: skip
#: Fewest training rows a GNN is fitted on (fewer: the constant fallback).
MIN_TRAINING_ROWS = 20
#: Fewest distinct architectures among the training rows a GNN is fitted on.
MIN_ARCHITECTURES = 3


@dataclass(frozen=True)
class CorrectionConfig:
    """Hyper-parameters of the correction (module docstring: fixed once, written down).

    Attributes:
        train: the GNN's training hyper-parameters (its ``seed`` is replaced per seed).
        seeds: the ensemble's seeds.
        validation_share: share of the training rows each seed holds out for early stopping.
    """

    train: GNNTrainConfig = field(
        default_factory=lambda: GNNTrainConfig(max_epochs=200, patience=30)
    )
    seeds: tuple[int, ...] = (0, 1, 2)
    validation_share: float = 0.25


DEFAULT_CONFIG = CorrectionConfig()


@dataclass(frozen=True)
class CorrectionGraph:
    """One job's input to the correction.

    Attributes:
        x: node features, shape (n_nodes, F_step + len(NODE_TYPES) + len(CONTEXT_FEATURES)).
        edge_index: shape (2, n_edges), int64.
        edge_attr: shape (n_edges, len(EDGE_TYPES)), one-hot.
        composed_s: the composed step (the prior), seconds, > 0.
    """

    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    composed_s: float

    def without_edges(self) -> CorrectionGraph:
        """The same nodes, no edge (the ``no_edges`` ablation)."""
        return CorrectionGraph(
            self.x, np.zeros((2, 0), dtype=np.int64), np.zeros((0, len(EDGE_TYPES))),
            self.composed_s,
        )  # fmt: skip


def _one_hot(names: Sequence[str], vocabulary: Sequence[str]) -> np.ndarray:
    index = {name: i for i, name in enumerate(vocabulary)}
    out = np.zeros((len(names), len(vocabulary)))
    for row, name in enumerate(names):
        out[row, index.get(name, index["other"])] = 1.0
    return out


def context_features(
    components_s: Mapping[str, float],
    iteration_s: float,
    n_gpus: int,
    precision: str,
    multi_node: bool,
    tokens_per_gpu: float,
) -> np.ndarray:
    """The step's context (:data:`CONTEXT_FEATURES`), shape (len(CONTEXT_FEATURES),).

    Args:
        components_s: the composition's exposed components, seconds (missing ones count 0).
        iteration_s: the composed step, seconds, > 0.
        n_gpus: GPUs of the job.
        precision: a :data:`PRECISION_BYTES` key.
        multi_node: whether the job spans nodes.
        tokens_per_gpu: tokens per GPU per optimizer step.

    Raises:
        ValueError: a non-positive step, GPU count or token count, or an unknown precision.
    """
    if not iteration_s > 0 or n_gpus < 1 or not tokens_per_gpu > 0:
        raise ValueError(
            f"step correction: iteration_s={iteration_s}, n_gpus={n_gpus}, "
            f"tokens_per_gpu={tokens_per_gpu} must be positive"
        )
    if precision not in PRECISION_BYTES:
        raise ValueError(f"step correction: precision {precision!r} not in {list(PRECISION_BYTES)}")
    shares = [float(components_s.get(c, 0.0)) / iteration_s for c in COMPONENTS]
    return np.array([*shares, np.log2(n_gpus), np.log2(PRECISION_BYTES[precision] / 2.0),
                     float(multi_node), np.log10(tokens_per_gpu)])  # fmt: skip


def correction_graph(graph, context: np.ndarray, composed_s: float) -> CorrectionGraph:
    """The correction's input of one composed step.

    Args:
        graph: the composition's ``StepGraph`` (``node_types``, ``node_features`` of shape
            (n_nodes, F_step), ``edges`` of shape (2, n_edges), ``edge_types`` one per edge).
        context: :func:`context_features` of the step.
        composed_s: the composed step, seconds.

    Returns:
        The :class:`CorrectionGraph`.

    Raises:
        ValueError: inconsistent shapes, a non-finite feature or a non-positive step.
    """
    x = np.asarray(graph.node_features, dtype=np.float64)
    edges = np.asarray(graph.edges, dtype=np.int64).reshape(2, -1)
    if x.ndim != 2 or len(graph.node_types) != len(x) or len(graph.edge_types) != edges.shape[1]:
        raise ValueError(
            f"step graph: {len(graph.node_types)} node types for features of shape {x.shape}, "
            f"{len(graph.edge_types)} edge types for {edges.shape[1]} edges"
        )
    if not np.all(np.isfinite(x)) or not np.all(np.isfinite(context)) or not composed_s > 0:
        raise ValueError(f"step graph: non-finite features or composed step {composed_s}")
    if edges.size and (edges.min() < 0 or edges.max() >= len(x)):
        raise ValueError(f"step graph: edge index outside 0..{len(x) - 1}")
    nodes = np.column_stack(
        [
            x,
            _one_hot(graph.node_types, NODE_TYPES),
            np.broadcast_to(context, (len(x), len(context))),
        ]
    )
    return CorrectionGraph(nodes, edges, _one_hot(graph.edge_types, EDGE_TYPES), float(composed_s))


def _batch(graphs: Sequence[CorrectionGraph], y: np.ndarray | None = None,
           weight: np.ndarray | None = None) -> GraphBatch:  # fmt: skip
    """PyTorch Geometric's batch layout of some graphs (node indices offset per graph)."""
    offsets = np.cumsum([0] + [len(g.x) for g in graphs])[:-1]
    edge_index = [g.edge_index + o for g, o in zip(graphs, offsets, strict=True)]
    if weight is not None:
        weight = np.asarray(weight, dtype=np.float64) / np.mean(weight)
    return GraphBatch(
        x=torch.from_numpy(np.concatenate([g.x for g in graphs]).astype(np.float32)),
        edge_index=torch.from_numpy(np.concatenate(edge_index, axis=1).astype(np.int64)),
        edge_attr=torch.from_numpy(
            np.concatenate([g.edge_attr for g in graphs]).astype(np.float32)
        ),
        batch=torch.from_numpy(np.repeat(np.arange(len(graphs)), [len(g.x) for g in graphs])),
        log_prior=torch.tensor([np.log(g.composed_s) for g in graphs], dtype=torch.float32),
        y=None if y is None else torch.from_numpy(np.asarray(y, dtype=np.float32)),
        weight=None if weight is None else torch.from_numpy(weight.astype(np.float32)),
    )


class StepCorrection:
    """The fitted correction: ``predict(graphs) = composed * exp(delta)``.

    Attributes:
        edges: message passing over the edges (``False``: the ``no_edges`` ablation).
        config: the hyper-parameters.
        kind: ``"gnn"`` or ``"constant"`` (the fallback, module docstring); ``None`` unfitted.
        constant_log: the fallback's log correction (``kind == "constant"``).
        n_training_rows: rows it was fitted on.
    """

    def __init__(self, edges: bool = True, config: CorrectionConfig = DEFAULT_CONFIG) -> None:
        self.edges = edges
        self.config = config
        self.kind: str | None = None
        self.constant_log = 0.0
        self.n_training_rows = 0
        self._models: list = []

    def _graphs(self, graphs: Sequence[CorrectionGraph]) -> list[CorrectionGraph]:
        return list(graphs) if self.edges else [g.without_edges() for g in graphs]

    def fit(
        self,
        graphs: Sequence[CorrectionGraph],
        measured_s: np.ndarray,
        weights: np.ndarray | None = None,
        architectures: Sequence[object] | None = None,
    ) -> StepCorrection:
        """Fit on training rows only.

        Args:
            graphs: the training rows' graphs.
            measured_s: their measured steps, seconds, shape (len(graphs),), > 0.
            weights: loss weights, shape (len(graphs),), positive (``None``: equal).
            architectures: an architecture key per row (for the fallback's count; ``None``:
                every row its own).

        Returns:
            ``self``.

        Raises:
            ValueError: no training row, lengths that differ, a non-positive measured step or
                weight.
        """
        graphs = self._graphs(graphs)
        y = np.asarray(measured_s, dtype=float)
        w = np.ones(len(graphs)) if weights is None else np.asarray(weights, dtype=float)
        if not graphs or len(y) != len(graphs) or len(w) != len(graphs):
            raise ValueError(
                f"step correction: {len(graphs)} graphs, {len(y)} measured steps, {len(w)} weights"
            )
        if not np.all(y > 0) or not np.all(np.isfinite(y)) or not np.all(w > 0):
            raise ValueError("step correction: measured steps and weights must be positive")
        log_ratio = np.log(y) - np.log([g.composed_s for g in graphs])
        n_arch = len(set(architectures)) if architectures is not None else len(graphs)
        self.n_training_rows = len(graphs)
        self._models = []
        if len(graphs) < MIN_TRAINING_ROWS or n_arch < MIN_ARCHITECTURES:
            self.kind, self.constant_log = "constant", float(np.average(log_ratio, weights=w))
            return self
        self.kind = "gnn"
        rows = np.arange(len(graphs))
        logs = np.log(y)
        with single_threaded():
            for seed in self.config.seeds:
                order = np.random.default_rng(seed).permutation(rows)
                n_val = max(1, round(self.config.validation_share * len(rows)))
                val, fit = order[:n_val], order[n_val:]
                model, _ = train_gnn(
                    _batch([graphs[i] for i in fit], logs[fit], w[fit]),
                    _batch([graphs[i] for i in val], logs[val], w[val]),
                    use_prior=True,
                    config=replace(self.config.train, seed=seed),
                )
                self._models.append(model)
        return self

    def predict_log_correction(self, graphs: Sequence[CorrectionGraph]) -> np.ndarray:
        """``log(corrected / composed)`` per graph, shape (len(graphs),).

        Raises:
            RuntimeError: not fitted.
        """
        if self.kind is None:
            raise RuntimeError("step correction: predict before fit")
        if self.kind == "constant" or not graphs:
            return np.full(len(graphs), self.constant_log)
        graphs = self._graphs(graphs)
        batch = _batch(graphs)
        with single_threaded():
            logs = [predict_gnn(m, batch) for m in self._models]
        return np.mean(logs, axis=0) - batch.log_prior.numpy().astype(np.float64)

    def predict(self, graphs: Sequence[CorrectionGraph]) -> np.ndarray:
        """Corrected steps, seconds, shape (len(graphs),)."""
        composed = np.array([g.composed_s for g in graphs], dtype=float)
        return composed * np.exp(self.predict_log_correction(graphs))
