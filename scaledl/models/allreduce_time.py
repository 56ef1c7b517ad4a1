"""The fitted alpha-beta all-reduce model, predicting with NumPy only.

:class:`AllReduceTime` holds what :class:`~scaledl.models.allreduce.AlphaBetaAllReduce` (the
model and its fit, SciPy's non-negative least squares) found: ``{(group, size regime): (alpha_ms,
ms_per_byte)}``, and predicts ``t_ms = alpha_ms + 2(p-1)/p * n * ms_per_byte``. A predictor
bundle's ``params.json`` loads into it, so loading and predicting never import SciPy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import NonNegativeFloat, NonNegativeInt, model_validator

from scaledl.io.schema import Artefact, parse_artefact
from scaledl.models.fitted import check_fitted

WEIGHTINGS = ("relative", "none")


def ring_bytes_factor(world_size: np.ndarray) -> np.ndarray:
    """Fraction ``2(p-1)/p`` of the message each worker sends in a ring all-reduce.

    Args:
        world_size: number of workers ``p`` (>= 1), any shape.

    Returns:
        ``2(p-1)/p`` as float array (0 for ``p == 1``).
    """
    p = np.asarray(world_size, dtype=float)
    return 2.0 * (p - 1.0) / p


def as_1d(name: str, values: Any, *, allow_zero: bool = False) -> np.ndarray:
    """``values`` as a flat float array, each finite and positive (``allow_zero``: >= 0).

    Raises:
        ValueError: naming ``name``, the first bad value and its index.
    """
    arr = np.atleast_1d(np.asarray(values, dtype=float)).ravel()
    bad = ~np.isfinite(arr) | ((arr < 0) if allow_zero else (arr <= 0))
    if bad.any():
        raise ValueError(
            f"{name} must be {'non-negative' if allow_zero else 'positive'} and finite; "
            f"got {arr[bad][0]!r} at index {int(np.flatnonzero(bad)[0])}"
        )
    return arr


class AllReduceTime:
    """Ring all-reduce time model ``alpha + 2(p-1)/p * bytes / bandwidth``, fitted state only.

    Predicts, saves and loads (:meth:`from_dict`, how a predictor bundle loads it) with NumPy
    only; :class:`~scaledl.models.allreduce.AlphaBetaAllReduce` adds ``fit`` (SciPy).

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

    """

    def __init__(
        self,
        weighting: str = "relative",
        per_topology: bool = False,
        per_configuration: bool = False,
        size_breakpoints_bytes: Sequence[float] = (),
    ) -> None:
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}; got {weighting!r}")
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
            scaledl.models.fitted.NotFittedError: the model is not fitted.
            ValueError: a negative size or a world size below 1.
        """
        self._check_fitted()
        nbytes = as_1d("allreduce_bytes", allreduce_bytes, allow_zero=True)
        p = as_1d("world_size", world_size)
        if (p < 1).any():
            raise ValueError(f"world_size must be >= 1; got {p[p < 1][0]!r}")
        nodes = np.ones(1) if num_nodes is None else as_1d("num_nodes", num_nodes)
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
            scaledl.models.fitted.NotFittedError: the model is not fitted.
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
    def from_dict(cls, data: dict[str, Any]) -> AllReduceTime:
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
            f"{type(self).__name__}(weighting={self.weighting!r}, "
            f"per_topology={self.per_topology}, per_configuration={self.per_configuration}, "
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
