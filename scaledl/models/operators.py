"""Kernel-aware operator models: a layer's time from the time of its operators on a device.

A layer is decomposed into its operators (:mod:`scaledl.graph.operators`: matmuls with their
(batch, M, N, K), element-wise, reduction and embedding operators with their bytes); this module
predicts each operator's time on a device.

**Roofline features** (Williams et al., "Roofline", CACM 2009), per operator, direction and
device: compute time at peak (FLOPs / peak FLOP/s of the workload's precision), memory time at
peak bandwidth (bytes / bandwidth), arithmetic intensity, and for matmuls the output tiles of a
``tile`` x ``tile`` thread-block tiling (128 x 128, the common cuBLAS SGEMM tile) and the waves
``ceil(tiles / SMs)`` they run in, so the compute time counts whole waves (wave quantisation:
``waves x SMs x tile FLOPs / peak``). The backward of a matmul is its two gradient GEMMs (dA:
M x K over N, dB: K x N over M), each tiled the same way.

**Utilisation** (NeuSight, Lee et al., ASPLOS 2025, predicts a per-wave utilisation bounded by
the roofline; https://github.com/sitar-lab/NeuSight): one gradient-boosted regressor per
operator class and direction (scikit-learn ``GradientBoostingRegressor``) learns the log
slowdown ``s = log(t / t_roofline)`` from the log features and the device's specs; predictions
are ``t = t_roofline * exp(max(s, 0))``, i.e. a utilisation ``exp(-s)`` in (0, 1]: never faster
than the roofline. Hyper-parameters are chosen per class and direction by an inner
leave-one-group-out validation on the training rows (groups: the ``group`` column, e.g. the
model an operator comes from), never on test data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
import pandas as pd
import sklearn
from sklearn.base import BaseEstimator
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.utils.validation import check_is_fitted

from scaledl.graph.operators import OP_CLASSES, OP_KINDS

DEFAULT_TILE = 128
#: How the device enters the operator features (see :func:`operator_features`).
DEVICE_FEATURES = ("absolute", "relative")
_DIRECTIONS = ("forward", "backward")
#: FLOPs per output element of the non-matmul kinds (forward), a nominal count for the roofline.
_FLOPS_PER_ELEMENT = {"softmax": 5.0, "layer_norm": 8.0, "reduce": 1.0, "activation": 4.0}


@dataclass(frozen=True)
class RooflineTerms:
    """Roofline quantities of operators in one direction (arrays of shape (n_ops,)).

    Attributes:
        flops: floating-point operations.
        bytes: bytes moved to and from memory.
        compute_ms: FLOPs at peak FLOP/s (wave-quantised for matmuls).
        memory_ms: bytes at peak bandwidth.
        roofline_ms: ``max(compute_ms, memory_ms)``, the lower bound of the operator's time.
        tiles: output tiles (matmuls; 0 otherwise).
        waves: ``ceil(tiles / SMs)`` (matmuls; 0 otherwise).
    """

    flops: np.ndarray
    bytes: np.ndarray
    compute_ms: np.ndarray
    memory_ms: np.ndarray
    roofline_ms: np.ndarray
    tiles: np.ndarray
    waves: np.ndarray


def _tile_side(dim: np.ndarray, tile: int) -> np.ndarray:
    """Tile side along one output dimension: the power of two covering it, 16 to ``tile``."""
    return np.clip(2.0 ** np.ceil(np.log2(np.maximum(dim, 1.0))), 16.0, float(tile))


def _gemm_waves(batch, rows, cols, inner, tile, sms, peak_per_ms):
    """Tiles, waves and wave-quantised compute time (ms) of ``batch`` GEMMs rows x cols.

    Small output dimensions get smaller tiles (as cuBLAS picks them), so a 64-wide output is
    not charged a 128-wide tile.
    """
    tr, tc = _tile_side(rows, tile), _tile_side(cols, tile)
    tiles = batch * np.ceil(np.maximum(rows, 1.0) / tr) * np.ceil(np.maximum(cols, 1.0) / tc)
    waves = np.ceil(tiles / sms)
    return tiles, waves, waves * sms * 2.0 * tr * tc * inner / peak_per_ms


def roofline_terms(
    ops: pd.DataFrame, direction: str = "forward", tile: int = DEFAULT_TILE
) -> RooflineTerms:
    """Roofline quantities of operator rows on their devices.

    Args:
        ops: descriptor rows (:data:`DESCRIPTOR_COLUMNS`) with
            :data:`~scaledl.models.device_columns.DEVICE_COLUMNS`.
        direction: ``forward`` or ``backward`` (matmul: the two gradient GEMMs; element-wise
            and reductions: read the output gradient and saved tensors, write the input
            gradient, twice the forward bytes; embedding: scatter-add into the whole table).
        tile: side of the square output tile of a matmul's thread block.

    Returns:
        The :class:`RooflineTerms`.

    Shapes:
        ``ops``: (n_ops, ...); every array of the result: (n_ops,).
    """
    if direction not in _DIRECTIONS:
        raise ValueError(f"direction must be one of {_DIRECTIONS}, got {direction!r}")
    cls = ops["op_class"].to_numpy()
    kind = ops["op_kind"].to_numpy()
    b, m, n, k = (ops[c].to_numpy(np.float64) for c in ("batch", "m", "n", "k"))
    elements = ops["elements"].to_numpy(np.float64)
    moved = (ops["bytes_in"] + ops["bytes_out"]).to_numpy(np.float64)
    peak = ops["peak_tflops"].to_numpy(np.float64) * 1e9  # FLOP per ms
    bandwidth = ops["mem_bandwidth_gbps"].to_numpy(np.float64) * 1e6  # bytes per ms
    sms = ops["num_sms"].to_numpy(np.float64)
    is_mm = cls == "matmul"
    per_element = np.array([_FLOPS_PER_ELEMENT.get(x, 1.0) for x in kind])
    if direction == "forward":
        flops = np.where(is_mm, 2.0 * b * m * n * k, per_element * elements)
        flops = np.where(cls == "embedding", 0.0, flops)
        nbytes = moved
        tiles, waves, wave_ms = _gemm_waves(b, m, n, k, tile, sms, peak)
    else:
        flops = np.where(is_mm, 4.0 * b * m * n * k, 2.0 * per_element * elements)
        table = ops["table_bytes"].to_numpy(np.float64)
        # matmul: read dC, A, B, write dA, dB; embedding: scatter into the whole table;
        # add: the gradient passes through (no kernel); others: about the forward's bytes.
        nbytes = np.select(
            [is_mm, cls == "embedding", kind == "add"], [2.0 * moved, table + moved, 0.0], moved
        )
        tiles_a, waves_a, ms_a = _gemm_waves(b, m, k, n, tile, sms, peak)  # dA = dC @ B^T
        tiles_b, waves_b, ms_b = _gemm_waves(b, k, n, m, tile, sms, peak)  # dB = A^T @ dC
        tiles, waves, wave_ms = tiles_a + tiles_b, waves_a + waves_b, ms_a + ms_b
    tiles = np.where(is_mm, tiles, 0.0)
    compute_ms = np.where(is_mm, np.maximum(wave_ms, flops / peak), flops / peak)
    memory_ms = nbytes / bandwidth
    roofline_ms = np.maximum(np.maximum(compute_ms, memory_ms), 1e-7)
    return RooflineTerms(
        flops, nbytes, compute_ms, memory_ms, roofline_ms, tiles, np.where(is_mm, waves, 0.0)
    )


def operator_features(
    ops: pd.DataFrame,
    op_class: str,
    direction: str = "forward",
    tile: int = DEFAULT_TILE,
    device_features: str = "absolute",
) -> tuple[np.ndarray, np.ndarray]:
    """Features of one class's operators for its utilisation model.

    Args:
        ops: descriptor rows of class ``op_class`` with
            :data:`~scaledl.models.device_columns.DEVICE_COLUMNS`.
        op_class: one of :data:`OP_CLASSES`.
        direction: ``forward`` or ``backward``.
        tile: matmul tile side.
        device_features: how the device enters (:data:`DEVICE_FEATURES`): ``absolute``, log2
            of its peak, bandwidth, SMs, L2, clock and machine balance (peak / bandwidth);
            ``relative``, only the operator's intensity over the machine balance and the
            balance itself (the device is otherwise seen through the waves, the bytes over L2
            and the roofline times, quantities that exist on any device: NeuSight's argument
            for predicting utilisation per wave rather than per device).

    Returns:
        ``(X, roofline_ms)``: X of shape (n_ops, n_features), float64: log2 of compute, memory
        and roofline time, arithmetic intensity, bytes over L2, elements, waves, the wave
        efficiency ``tiles / (waves x SMs)``, ``1 / waves``, log2 of the matmul dimensions
        (M, N, K, batch) or the reduction row length, the device features and one-hot kinds;
        roofline_ms of shape (n_ops,).

    Raises:
        ValueError: an unknown ``device_features``.
    """
    if device_features not in DEVICE_FEATURES:
        raise ValueError(
            f"device_features must be one of {DEVICE_FEATURES}, got {device_features!r}"
        )
    t = roofline_terms(ops, direction, tile)
    log = np.log2
    l2_bytes = ops["l2_mb"].to_numpy(np.float64) * 2**20
    peak = ops["peak_tflops"].to_numpy(np.float64)
    bw = ops["mem_bandwidth_gbps"].to_numpy(np.float64)
    sms = ops["num_sms"].to_numpy(np.float64)
    cols = [
        log(np.maximum(t.compute_ms, 1e-9)),
        log(np.maximum(t.memory_ms, 1e-9)),
        log(t.roofline_ms),
        log((t.flops + 1.0) / (t.bytes + 1.0)),
        log((t.bytes + 1.0) / l2_bytes),
        log(ops["elements"].to_numpy(np.float64) + 1.0),
    ]
    if op_class == "matmul":
        waves = np.maximum(t.waves, 1.0)
        cols += [
            log(waves),
            t.tiles / (waves * sms),
            1.0 / waves,
            *(log(ops[c].to_numpy(np.float64) + 1.0) for c in ("m", "n", "k", "batch")),
        ]
    elif op_class == "reduction":
        cols.append(log(ops["row_len"].to_numpy(np.float64) + 1.0))
    elif op_class == "embedding":
        cols.append(log(ops["table_bytes"].to_numpy(np.float64) + 1.0))
    balance = peak * 1e3 / bw  # FLOP per byte at which the device turns compute-bound
    if device_features == "absolute":
        cols += [
            log(peak),
            log(bw),
            log(sms),
            log(ops["l2_mb"].to_numpy(np.float64)),
            log(ops["clock_mhz"].to_numpy(np.float64)),
            log(balance),
        ]
    else:  # relative: the operator measured against its device, nothing device-absolute
        cols += [log((t.flops + 1.0) / (t.bytes + 1.0) / balance), log(balance)]
    kinds = ops["op_kind"].to_numpy()
    cols += [(kinds == kind).astype(np.float64) for kind in OP_KINDS[op_class]]
    return np.column_stack(cols), t.roofline_ms


#: Candidate hyper-parameters of the utilisation regressors (chosen by inner validation).
DEFAULT_GRID = (
    {"n_estimators": 100, "max_depth": 3, "learning_rate": 0.1, "min_samples_leaf": 10},
    {"n_estimators": 200, "max_depth": 4, "learning_rate": 0.05, "min_samples_leaf": 5},
)


def _regressor(params: dict) -> GradientBoostingRegressor:
    # Single-threaded on purpose: on a shared 2-core host, OpenMP histogram boosting spun for
    # seconds per fit; exact boosting takes 0.1-0.3 s on these thousand-row tables.
    return GradientBoostingRegressor(random_state=0, **params)


#: The memo of :func:`shared_fits` (``None``: every fit is computed).
_SHARED_FITS: ContextVar[dict | None] = ContextVar("_SHARED_FITS", default=None)


@contextmanager
def shared_fits() -> Iterator[dict]:
    """Within the block, a utilisation regressor fitted twice on the same data is fitted once.

    A regressor's fit is a deterministic function of its parameters and training arrays
    (``random_state`` fixed), so the memo, keyed by the parameters and the bytes, shapes and
    dtypes of ``X`` and ``y``, returns the very regressor a refit would give. Fits repeat where
    a caller refits on a subset it already fitted on: the leave-one-group-out selection of
    :meth:`OperatorTimeModel.fit` and the inner refits of
    :class:`~scaledl.models.kernel.KernelGraphMethod`'s correction, or folds sharing training
    data. The memoised regressors are shared between the models that use them (never
    modified after ``fit``). A nested block uses the outer block's memo.

    Yields:
        The memo, ``{key: fitted regressor}`` (for inspection).
    """
    memo = _SHARED_FITS.get()
    if memo is not None:
        yield memo
        return
    memo = {}
    token = _SHARED_FITS.set(memo)
    try:
        yield memo
    finally:
        _SHARED_FITS.reset(token)


def _fit_regressor(params: dict, X: np.ndarray, y: np.ndarray) -> GradientBoostingRegressor:
    """``_regressor(params).fit(X, y)``, read from the :func:`shared_fits` memo when active."""
    memo = _SHARED_FITS.get()
    if memo is None:
        return _regressor(params).fit(X, y)
    digest = hashlib.sha256()
    for array in (X, y):
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    key = (json.dumps(params, sort_keys=True), digest.hexdigest())
    if key not in memo:
        memo[key] = _regressor(params).fit(X, y)
    return memo[key]


class OperatorTimeModel(BaseEstimator):
    """Per operator class and direction: time = roofline time / learned utilisation.

    A scikit-learn estimator: the constructor stores its parameters as given, :meth:`fit` sets
    the fitted attributes (ending in ``_``), :func:`sklearn.base.clone` gives an unfitted copy
    and predicting before :meth:`fit` raises :class:`sklearn.exceptions.NotFittedError`.

    Args:
        tile: matmul tile side.
        grid: candidate hyper-parameters of each regressor.
        min_rows: fewest training rows for a class and direction to get its own model (else
            the roofline time alone, utilisation 1, is predicted and flagged in ``fallback_``).
        device_features: how the device enters the features (:func:`operator_features`).
            The GPU predictor uses ``relative``
            (:data:`scaledl.models.kernel.DEFAULT_OPERATOR_PARAMS`); ``absolute`` stays this
            class's default so that bundles stored before it load as they were fitted.

    Attributes:
        models_: ``{(op_class, direction): regressor}`` after :meth:`fit`.
        params_: chosen hyper-parameters per key.
        inner_mre_: inner-validation MRE of the chosen parameters per key (NaN with fewer
            than two groups).
        fallback_: keys predicted by the roofline alone.
        clipped_share_: per key, share of training rows faster than their roofline (clipped
            to utilisation 1; a measure of how far the device specs are off).
    """

    def __init__(
        self,
        tile: int = DEFAULT_TILE,
        grid: tuple[dict, ...] = DEFAULT_GRID,
        min_rows: int = 10,
        device_features: str = "absolute",
    ) -> None:
        self.tile = tile
        self.grid = grid
        self.min_rows = min_rows
        self.device_features = device_features

    def fit(self, ops: pd.DataFrame) -> OperatorTimeModel:
        """Fit the utilisation regressors on measured operators.

        Args:
            ops: descriptor rows with :data:`~scaledl.models.device_columns.DEVICE_COLUMNS`,
                ``forward_ms``, ``backward_ms`` (NaN or 0 where not measured: inference, no
                gradient) and ``group`` (the inner validation's groups, e.g. the model name).

        Returns:
            self.

        Raises:
            ValueError: no operator row with a measured time.
        """
        if ops.empty:
            raise ValueError("operator model: no training operators")
        # Parameters are checked once by DEFAULT_GRID's construction; re-validating them in
        # each of the thousands of boosting stages costs as much as fitting the trees.
        with sklearn.config_context(skip_parameter_validation=True):
            return self._fit(ops)

    def _fit(self, ops: pd.DataFrame) -> OperatorTimeModel:
        self.models_, self.params_, self.inner_mre_ = {}, {}, {}
        self.fallback_, self.clipped_share_ = [], {}
        for op_class in OP_CLASSES:
            for direction in _DIRECTIONS:
                key = (op_class, direction)
                target = ops[f"{direction}_ms"].to_numpy(np.float64)
                mask = (ops["op_class"].to_numpy() == op_class) & (target > 0)
                if direction == "backward":
                    mask &= ops["op_kind"].to_numpy() != "fill"
                rows = ops[mask]
                if len(rows) < self.min_rows:
                    self.fallback_.append(key)
                    continue
                X, roof = operator_features(
                    rows, op_class, direction, self.tile, self.device_features
                )
                slowdown = np.log(target[mask] / roof)
                self.clipped_share_[key] = float(np.mean(slowdown < 0))
                y = np.maximum(slowdown, 0.0)
                groups = rows["group"].to_numpy() if "group" in rows else np.zeros(len(rows))
                params, score = self._select(X, y, groups)
                self.params_[key], self.inner_mre_[key] = params, score
                self.models_[key] = _fit_regressor(params, X, y)
        if not self.models_:
            raise ValueError("operator model: no class has enough measured operators")
        return self

    def _select(self, X, y, groups) -> tuple[dict, float]:
        """Hyper-parameters with the lowest leave-one-group-out MRE (first on ties)."""
        unique = np.unique(groups)
        if len(self.grid) == 1 or len(unique) < 2:
            return dict(self.grid[0]), float("nan")
        scores = []
        for params in self.grid:
            errors = []
            for g in unique:
                test = groups == g
                model = _fit_regressor(params, X[~test], y[~test])
                pred = np.maximum(model.predict(X[test]), 0.0)
                errors.append(np.mean(np.abs(np.exp(pred - y[test]) - 1.0)))
            scores.append(float(np.mean(errors)))
        best = int(np.argmin(scores))
        return dict(self.grid[best]), scores[best]

    def predict(self, ops: pd.DataFrame, direction: str = "forward") -> np.ndarray:
        """Predicted milliseconds of each operator in one direction.

        Args:
            ops: descriptor rows with :data:`~scaledl.models.device_columns.DEVICE_COLUMNS`.
            direction: ``forward`` or ``backward`` (``fill`` operators have no backward: 0).

        Returns:
            float64 array of shape (n_ops,), each at least the operator's roofline time.

        Raises:
            sklearn.exceptions.NotFittedError: before :meth:`fit`.
        """
        check_is_fitted(self, "models_")
        out = np.zeros(len(ops))
        classes = ops["op_class"].to_numpy()
        for op_class in OP_CLASSES:
            mask = classes == op_class
            if not mask.any():
                continue
            X, roof = operator_features(
                ops[mask], op_class, direction, self.tile, self.device_features
            )
            model = self.models_.get((op_class, direction))
            slowdown = np.maximum(model.predict(X), 0.0) if model is not None else 0.0
            out[mask] = roof * np.exp(slowdown)
        if direction == "backward":
            out[ops["op_kind"].to_numpy() == "fill"] = 0.0
        return out
