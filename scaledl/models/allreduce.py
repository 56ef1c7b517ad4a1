"""Alpha-beta (latency-bandwidth) model of a ring all-reduce.

A ring all-reduce of ``n`` bytes over ``p`` workers sends ``2(p-1)/p * n`` bytes per worker
(reduce-scatter then all-gather) after a start-up latency, so its time is

    t_ms = alpha_ms + 2(p-1)/p * n / bandwidth_bytes_per_ms

(Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH",
IJHPCA 2005; Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", JPDC 2009). ``alpha`` and ``1/bandwidth`` are fitted by non-negative least squares
on the regressors ``[1, 2(p-1)/p * n]``. By default every equation is divided by the measured
time (``weighting="relative"``), so the fit minimises the squared *relative* error: otherwise the
few largest messages (milliseconds) dominate and the latency-bound small ones (microseconds) are
predicted with errors of several hundred percent.

Two refinements, both optional and off by default:

* ``per_topology=True`` fits one (alpha, bandwidth) for single-node groups and one for groups
  spanning several nodes (``num_nodes > 1``): NVLink and the inter-node network differ by an
  order of magnitude.
* ``size_breakpoints_bytes=(b1, b2, ...)`` fits one (alpha, bandwidth) per message-size regime
  (``n < b1``, ``b1 <= n < b2``, ...): NCCL switches protocol (LL, LL128, Simple) and algorithm with
  the message size, so a single line cannot follow both the latency-bound and the
  bandwidth-bound end. :func:`select_size_breakpoints` picks them on training data.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import NonNegativeFloat, NonNegativeInt, model_validator
from scipy.optimize import nnls

from scaledl.io.schema import Artefact, parse_artefact
from scaledl.models.fitted import check_fitted

_WEIGHTINGS = ("relative", "none")


def ring_bytes_factor(world_size: np.ndarray) -> np.ndarray:
    """Fraction ``2(p-1)/p`` of the message each worker sends in a ring all-reduce.

    Args:
        world_size: number of workers ``p`` (>= 1), any shape.

    Returns:
        ``2(p-1)/p`` as float array (0 for ``p == 1``).
    """
    p = np.asarray(world_size, dtype=float)
    return 2.0 * (p - 1.0) / p


def _as_1d(name: str, values: Any, *, allow_zero: bool = False) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(values, dtype=float)).ravel()
    bad = ~np.isfinite(arr) | ((arr < 0) if allow_zero else (arr <= 0))
    if bad.any():
        raise ValueError(
            f"{name} must be {'non-negative' if allow_zero else 'positive'} and finite; "
            f"got {arr[bad][0]!r} at index {int(np.flatnonzero(bad)[0])}"
        )
    return arr


def _fit_line(x: np.ndarray, y: np.ndarray, weighting: str) -> tuple[float, float]:
    """NNLS of ``y ~ a + b x``; returns ``(a, b)``."""
    design = np.column_stack([np.ones_like(x), x])
    w = 1.0 / y if weighting == "relative" else np.ones_like(y)
    coef, _ = nnls(design * w[:, None], y * w)
    return float(coef[0]), float(coef[1])


class AlphaBetaAllReduce:
    """Ring all-reduce time model ``alpha + 2(p-1)/p * bytes / bandwidth``.

    Args:
        weighting: ``"relative"`` (default) weights each point by ``1/t`` so the fit minimises the
            squared relative error; ``"none"`` minimises the squared error in milliseconds.
        per_topology: fit separate parameters for single-node (``num_nodes == 1``) and multi-node
            groups when the training data contains both.
        per_configuration: fit separate parameters for every (world size, number of nodes)
            measured (the links a ring crosses differ, e.g. 4 GPUs with pairwise NVLink ring
            through PCIe); takes precedence over ``per_topology``. An unseen configuration uses
            the fitted one with the same topology and the nearest world size (log scale).
        size_breakpoints_bytes: message sizes splitting the data into regimes with their own
            parameters (empty: one regime).

    Attributes:
        alpha_ms_: start-up latency (ms) of the first fitted group (smallest key) in its first
            size regime; all groups are in :attr:`params_`.
        bandwidth_bytes_per_ms_: ring (bus) bandwidth in bytes/ms of the same group (``inf`` when
            the fitted slope is zero).
        params_: ``{(group, regime): (alpha_ms, ms_per_byte)}`` where ``group`` is ``()``,
            ``(multi_node,)`` or ``(world_size, num_nodes)`` depending on the grouping.

    Example:
        >>> m = AlphaBetaAllReduce().fit([1e6, 2e6, 4e6], [8, 8, 8], [0.02, 0.03, 0.05])
        >>> float(m.predict_ms(1e6, 1)[0])
        0.0
    """

    def __init__(
        self,
        weighting: str = "relative",
        per_topology: bool = False,
        per_configuration: bool = False,
        size_breakpoints_bytes: Sequence[float] = (),
    ) -> None:
        if weighting not in _WEIGHTINGS:
            raise ValueError(f"weighting must be one of {_WEIGHTINGS}; got {weighting!r}")
        self.weighting = weighting
        self.per_topology = bool(per_topology)
        self.per_configuration = bool(per_configuration)
        self.size_breakpoints_bytes = tuple(sorted(float(b) for b in size_breakpoints_bytes))
        if any(b <= 0 for b in self.size_breakpoints_bytes):
            raise ValueError(
                f"size_breakpoints_bytes must be positive; got {self.size_breakpoints_bytes}"
            )

    # ----------------------------------------------------------------- helpers
    def _regime(self, nbytes: np.ndarray) -> np.ndarray:
        return np.searchsorted(np.asarray(self.size_breakpoints_bytes), nbytes, side="right")

    def _group(self, world: int, nodes: int) -> tuple[int, ...]:
        if self.per_configuration:
            return (int(world), int(nodes))
        if self.per_topology:
            return (int(nodes > 1),)
        return ()

    def _nearest_group(self, group: tuple[int, ...]) -> tuple[int, ...]:
        fitted = sorted({g for g, _ in self.params_})
        if group in fitted:
            return group
        if self.per_configuration:
            world, nodes = group

            def distance(g: tuple[int, ...]) -> tuple[int, float, int]:
                return (int((g[1] > 1) != (nodes > 1)), abs(math.log2(g[0] / world)), g[0])

            return min(fitted, key=distance)
        return fitted[0]

    def _set_summary(self) -> None:
        alpha, inv_bw = self.params_[min(self.params_)]
        self.alpha_ms_ = alpha
        self.bandwidth_bytes_per_ms_ = 1.0 / inv_bw if inv_bw > 0 else math.inf

    # ----------------------------------------------------------------- fitting
    def fit(
        self,
        allreduce_bytes: Any,
        world_size: Any,
        allreduce_ms: Any,
        num_nodes: Any = None,
    ) -> AlphaBetaAllReduce:
        """Fit alpha and bandwidth by (weighted) non-negative least squares.

        Args:
            allreduce_bytes: message size per worker in bytes (> 0).
            world_size: number of workers (>= 2: a single worker does not communicate).
            allreduce_ms: measured time in milliseconds (> 0).
            num_nodes: number of nodes spanned by each group (>= 1); used by ``per_topology`` and
                ``per_configuration``. ``None`` means one node.

        Returns:
            ``self``.

        Raises:
            ValueError: arrays of different lengths, fewer than 2 points (overall or in a fitted
                group), or a non-positive / non-finite value (the message names the field).
        """
        nbytes = _as_1d("allreduce_bytes", allreduce_bytes)
        p = _as_1d("world_size", world_size)
        t = _as_1d("allreduce_ms", allreduce_ms)
        nodes = np.ones_like(p) if num_nodes is None else _as_1d("num_nodes", num_nodes)
        if not (len(nbytes) == len(p) == len(t) == len(nodes)):
            raise ValueError(
                "allreduce_bytes, world_size, allreduce_ms (and num_nodes) must have equal "
                f"lengths; got {len(nbytes)}, {len(p)}, {len(t)}, {len(nodes)}"
            )
        if len(t) < 2:
            raise ValueError(f"need at least 2 points to fit alpha and beta; got {len(t)}")
        if (p < 2).any():
            raise ValueError(
                f"world_size must be >= 2 to fit (got {p[p < 2][0]!r}); a single worker does "
                "not communicate"
            )
        groups = [self._group(w, n) for w, n in zip(p, nodes, strict=True)]
        regime = self._regime(nbytes)
        pairs = list(zip(groups, regime.tolist(), strict=True))
        ids = {key: i for i, key in enumerate(sorted(set(pairs)))}
        key_id = np.array([ids[key] for key in pairs])
        x = ring_bytes_factor(p) * nbytes
        params: dict[tuple[tuple[int, ...], int], tuple[float, float]] = {}
        for (g, r), i in ids.items():
            mask = key_id == i
            if mask.sum() < 2:
                raise ValueError(
                    f"group {g}, size regime {r} has {int(mask.sum())} point(s); need at least 2"
                )
            params[(g, int(r))] = _fit_line(x[mask], t[mask], self.weighting)
        self.params_ = params
        self._set_summary()
        return self

    # -------------------------------------------------------------- prediction
    def _check_fitted(self) -> None:
        check_fitted(self, "params_")

    def predict_ms(
        self, allreduce_bytes: Any, world_size: Any, num_nodes: Any = None
    ) -> np.ndarray:
        """Predicted all-reduce time.

        Args:
            allreduce_bytes: message size per worker in bytes (>= 0).
            world_size: number of workers (>= 1); a single worker costs 0 ms.
            num_nodes: nodes spanned (>= 1); ``None``: one node. A group (or size regime) not
                seen in training uses the nearest fitted one.

        Returns:
            Times in milliseconds, one per input (inputs are broadcast together).

        Raises:
            sklearn.exceptions.NotFittedError: the model is not fitted.
            ValueError: a negative size or a world size below 1.
        """
        self._check_fitted()
        nbytes = _as_1d("allreduce_bytes", allreduce_bytes, allow_zero=True)
        p = _as_1d("world_size", world_size)
        if (p < 1).any():
            raise ValueError(f"world_size must be >= 1; got {p[p < 1][0]!r}")
        nodes = np.ones(1) if num_nodes is None else _as_1d("num_nodes", num_nodes)
        nbytes, p, nodes = np.broadcast_arrays(nbytes, p, nodes)
        regime = self._regime(nbytes)
        alpha = np.zeros(nbytes.shape)
        inv_bw = np.zeros(nbytes.shape)
        pairs = np.stack([p.astype(np.int64), nodes.astype(np.int64)], axis=-1).reshape(-1, 2)
        uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
        inverse = inverse.reshape(nbytes.shape)
        for j, (w, n) in enumerate(uniq):
            group = self._nearest_group(self._group(w, n))
            fitted = sorted(r for g, r in self.params_ if g == group)
            for reg in range(len(self.size_breakpoints_bytes) + 1):
                # a size regime without training data borrows the nearest fitted regime
                near = min(fitted, key=lambda r, reg=reg: abs(r - reg))
                mask = (inverse == j) & (regime == reg)
                alpha[mask], inv_bw[mask] = self.params_[(group, near)]
        out = alpha + ring_bytes_factor(p) * nbytes * inv_bw
        return np.where(p <= 1, 0.0, out)

    # ---------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe description (hyper-parameters and fitted values, :class:`AllReduceParams`).

        Returns:
            A dict that :meth:`from_dict` turns back into an equal model.

        Raises:
            sklearn.exceptions.NotFittedError: the model is not fitted.
        """
        self._check_fitted()
        return AllReduceParams(
            weighting=self.weighting,
            per_topology=self.per_topology,
            per_configuration=self.per_configuration,
            size_breakpoints_bytes=tuple(self.size_breakpoints_bytes),
            groups=tuple(
                AllReduceGroup(group=g, regime=r, alpha_ms=a, ms_per_byte=b)
                for (g, r), (a, b) in sorted(self.params_.items())
            ),
        ).model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AlphaBetaAllReduce:
        """Rebuild a fitted model from :meth:`to_dict` output.

        Args:
            data: the dict.

        Returns:
            The fitted model.

        Raises:
            ValueError: not an :class:`AllReduceParams` mapping (a wrong ``kind``, a missing
                key, no fitted group, a negative or non-finite latency or per-byte cost),
                naming the field and value.
        """
        params = parse_artefact(AllReduceParams, data, "alpha_beta_allreduce")
        model = cls(
            weighting=params.weighting,
            per_topology=params.per_topology,
            per_configuration=params.per_configuration,
            size_breakpoints_bytes=params.size_breakpoints_bytes,
        )
        model.params_ = {(g.group, g.regime): (g.alpha_ms, g.ms_per_byte) for g in params.groups}
        model._set_summary()
        return model

    def __repr__(self) -> str:
        return (
            f"AlphaBetaAllReduce(weighting={self.weighting!r}, per_topology={self.per_topology}, "
            f"per_configuration={self.per_configuration}, "
            f"size_breakpoints_bytes={self.size_breakpoints_bytes})"
        )


class AllReduceGroup(Artefact):
    """One fitted (group, size regime) of :class:`AlphaBetaAllReduce`.

    Attributes:
        group: ``()``, ``(multi_node,)`` or ``(world_size, num_nodes)`` (the grouping).
        regime: index of the message-size regime.
        alpha_ms: start-up latency, ms (>= 0).
        ms_per_byte: inverse ring bandwidth, ms per byte (>= 0).
    """

    group: tuple[int, ...]
    regime: NonNegativeInt
    alpha_ms: NonNegativeFloat
    ms_per_byte: NonNegativeFloat


class AllReduceParams(Artefact):
    """The all-reduce model in ``params.json`` (key ``allreduce``) and Vidur's metrics."""

    kind: Literal["alpha_beta_allreduce"] = "alpha_beta_allreduce"
    weighting: Literal["relative", "none"]
    per_topology: bool
    per_configuration: bool = False
    size_breakpoints_bytes: tuple[float, ...]
    groups: tuple[AllReduceGroup, ...]

    @model_validator(mode="after")
    def _fitted(self) -> AllReduceParams:
        if not self.groups:
            raise ValueError("field 'groups' (value []): no fitted group")
        return self


def mean_relative_error(pred: Any, true: Any) -> float:
    """Mean of ``|pred - true| / true``.

    Args:
        pred: predictions.
        true: measurements (> 0).

    Returns:
        The mean relative error (0.1 = 10 %).
    """
    pred = np.asarray(pred, dtype=float)
    true = np.asarray(true, dtype=float)
    return float(np.mean(np.abs(pred - true) / true))


def select_size_breakpoints(
    allreduce_bytes: Any,
    world_size: Any,
    allreduce_ms: Any,
    num_nodes: Any = None,
    *,
    per_topology: bool = False,
    per_configuration: bool = False,
    max_breakpoints: int = 2,
    candidates_bytes: Sequence[float] | None = None,
    min_points: int = 4,
) -> tuple[float, ...]:
    """Pick message-size breakpoints minimising the training mean relative error.

    Exhaustive search over combinations of up to ``max_breakpoints`` candidates (default: powers
    of 4 from 4 KiB to 64 MiB), keeping only splits that leave at least ``min_points`` points in
    every regime of every topology group. Uses only the data given, so pass the training split.

    Args:
        allreduce_bytes: message sizes (bytes).
        world_size: workers.
        allreduce_ms: measured times (ms).
        num_nodes: nodes spanned, or ``None``.
        per_topology: passed to :class:`AlphaBetaAllReduce`.
        per_configuration: passed to :class:`AlphaBetaAllReduce`.
        max_breakpoints: largest number of breakpoints tried.
        candidates_bytes: candidate breakpoints.
        min_points: smallest regime size allowed.

    Returns:
        The best breakpoints (possibly empty: no split beats the single line).
    """
    nbytes = _as_1d("allreduce_bytes", allreduce_bytes)
    t = _as_1d("allreduce_ms", allreduce_ms)
    nodes = None if num_nodes is None else np.asarray(num_nodes, dtype=float)
    cands = (
        [4096.0 * 4**k for k in range(8)] if candidates_bytes is None else list(candidates_bytes)
    )
    probe = AlphaBetaAllReduce(per_topology=per_topology, per_configuration=per_configuration)
    world = np.asarray(world_size, dtype=float)
    node_arr = np.ones_like(world) if nodes is None else nodes
    group_ids = [probe._group(w, n) for w, n in zip(world, node_arr, strict=True)]
    labels = {g: i for i, g in enumerate(sorted(set(group_ids)))}
    groups = np.array([labels[g] for g in group_ids])

    def score(bps: tuple[float, ...]) -> float:
        regime = np.searchsorted(np.asarray(bps), nbytes, side="right")
        for g in np.unique(groups):
            counts = np.bincount(regime[groups == g], minlength=len(bps) + 1)
            if (counts < min_points).any():
                return math.inf
        model = AlphaBetaAllReduce(
            per_topology=per_topology,
            per_configuration=per_configuration,
            size_breakpoints_bytes=bps,
        )
        model.fit(nbytes, world_size, t, nodes)
        return mean_relative_error(model.predict_ms(nbytes, world_size, nodes), t)

    best: tuple[float, ...] = ()
    best_score = score(best)
    for k in range(1, max_breakpoints + 1):
        for bps in itertools.combinations(sorted(cands), k):
            s = score(bps)
            if s < best_score - 1e-12:
                best, best_score = bps, s
    return best
