"""``layerwise.npz``: a bundle's fitted layer-wise models as plain arrays, read with NumPy only.

One row per fitted regressor (a layer type and a pass) and the boosted trees' nodes
concatenated; :func:`read_layer_arrays` rebuilds the
:class:`~scaledl.models.layer_time.LayerTimeModel` of every row. Members (an uncompressed
``numpy.savez`` archive; ``R`` regressors of ``F`` features, ``T`` trees, ``N`` nodes):

* ``pair_types`` (P,) str: the layer types of ``models_`` (``"*"`` the generic pair);
* ``layer_type``, ``direction`` (R,) str: each regressor's type and pass;
* ``scale``, ``coef`` (R, F), ``intercept`` (R,), ``correction_range`` (R, 2) float64;
* ``tree_count`` (R,) int64 (0: no correction), ``booster_init``, ``learning_rate`` (R,)
  float64: each regressor's trees are the next ``tree_count`` of ``node_count``;
* ``node_count`` (T,) int64; ``children_left``, ``children_right``, ``feature`` (N,) int64
  (child indices count from the tree's first node); ``threshold``, ``value`` (N,) float64.

Reading never unpickles (``allow_pickle=False``) and checks before it allocates: the file at
most :data:`MAX_LAYER_ARRAYS_BYTES`, exactly these members, each array's dtype, and its header's
shape against the bytes the member holds; then the shapes against each other, every number
finite, every pass and type named once, learning rates in ``(0, MAX_LEARNING_RATE]`` and every
tree's structure (:func:`~scaledl.registry.trees.check_tree_arrays`: children after parents,
indices in range, features below ``F``). Errors name the file, the member (field), the row or
node and the value.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from scaledl.io.excerpt import excerpt
from scaledl.models.layer_time import DIRECTIONS, BoostedTrees, LayerTimeModel
from scaledl.registry.trees import (
    MAX_LEARNING_RATE,
    MAX_TREE_NODES,
    TreeStructureError,
    check_tree_arrays,
)

#: Largest ``layerwise.npz`` read (bytes); the product's are under 1 MiB.
MAX_LAYER_ARRAYS_BYTES = 64 << 20
#: Most features a layer regressor reads (the product's: 4 work or 2 kernel features).
MAX_LAYER_FEATURES = 64
_FLOAT, _INT, _STR = "float64", "int64", "str"
#: Member -> (dtype, number of dimensions).
MEMBERS = {
    "pair_types": (_STR, 1),
    "layer_type": (_STR, 1),
    "direction": (_STR, 1),
    "scale": (_FLOAT, 2),
    "coef": (_FLOAT, 2),
    "intercept": (_FLOAT, 1),
    "correction_range": (_FLOAT, 2),
    "tree_count": (_INT, 1),
    "booster_init": (_FLOAT, 1),
    "learning_rate": (_FLOAT, 1),
    "node_count": (_INT, 1),
    "children_left": (_INT, 1),
    "children_right": (_INT, 1),
    "feature": (_INT, 1),
    "threshold": (_FLOAT, 1),
    "value": (_FLOAT, 1),
}
_NODE_FIELDS = ("children_left", "children_right", "feature", "threshold", "value")


class LayerArraysError(ValueError):
    """A ``layerwise.npz`` that cannot be read safely (names the file, field and value)."""


def write_layer_arrays(
    models: Mapping[str, Mapping[str, LayerTimeModel | None]], path: Path
) -> None:
    """Write fitted layer-time models as ``layerwise.npz`` (module docstring).

    Args:
        models: ``{layer_type: {"forward": model, "backward": model}}`` (``None``: not fitted).
        path: the file to write.

    Raises:
        ValueError: the models read different numbers of features, or there are none.
    """
    rows = [(str(t), d, m) for t, pair in models.items() for d in DIRECTIONS if (m := pair[d])]
    if not rows:
        raise ValueError("layer-wise models: no fitted regressor to write")
    widths = {m.n_features_in_ for _, _, m in rows}
    if len(widths) != 1:
        raise ValueError(f"layer-wise models: regressors read {sorted(widths)} features")
    boosters = [m.booster_ for _, _, m in rows if m.booster_ is not None]

    def nodes(name: str, dtype: str) -> np.ndarray:
        return np.concatenate([np.asarray(getattr(b, name), dtype) for b in boosters] or [[]])

    arrays = {
        "pair_types": np.array([str(t) for t in models], dtype=str),
        "layer_type": np.array([t for t, _, _ in rows], dtype=str),
        "direction": np.array([d for _, d, _ in rows], dtype=str),
        "scale": np.array([m.scale_ for _, _, m in rows], dtype=_FLOAT),
        "coef": np.array([m.coef_ for _, _, m in rows], dtype=_FLOAT),
        "intercept": np.array([m.intercept_ for _, _, m in rows], dtype=_FLOAT),
        "correction_range": np.array([m.correction_range_ for _, _, m in rows], dtype=_FLOAT),
        "tree_count": np.array(
            [0 if m.booster_ is None else len(m.booster_.node_counts) for _, _, m in rows],
            dtype=_INT,
        ),
        "booster_init": np.array(
            [0.0 if m.booster_ is None else m.booster_.init for _, _, m in rows], dtype=_FLOAT
        ),
        "learning_rate": np.array(
            [0.0 if m.booster_ is None else m.booster_.learning_rate for _, _, m in rows],
            dtype=_FLOAT,
        ),
        "node_count": nodes("node_counts", _INT),
        **{name: nodes(name, _INT) for name in ("children_left", "children_right", "feature")},
        "threshold": nodes("threshold", _FLOAT),
        "value": nodes("value", _FLOAT),
    }
    with open(path, "wb") as file:
        np.savez(file, **arrays)


def read_layer_arrays(path: Path) -> dict[str, dict[str, LayerTimeModel | None]]:
    """Read and check a ``layerwise.npz`` (module docstring).

    Args:
        path: the file (its size and checksum verified against the manifest by the caller).

    Returns:
        ``{layer_type: {"forward": model, "backward": model}}`` (``None``: not fitted).

    Raises:
        LayerArraysError: naming the file, the field (member), the row or node and the value.
    """
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_LAYER_ARRAYS_BYTES:
        raise LayerArraysError(
            f"{path}: {size:,} bytes, more than the {MAX_LAYER_ARRAYS_BYTES:,} a layer-wise "
            "file may have; refused unread"
        )
    arrays = _read_members(path)
    return _models(path, arrays)


def _read_members(path: Path) -> dict[str, np.ndarray]:
    """Every member, its dtype and header shape checked before its data are read."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = {info.filename: info for info in archive.infolist()}
            names = {name.removesuffix(".npy") for name in infos}
            if set(infos) != {f"{m}.npy" for m in MEMBERS}:
                raise LayerArraysError(
                    f"{path}: members {excerpt(sorted(names))}: expected exactly {sorted(MEMBERS)}"
                )
            if sum(info.file_size for info in infos.values()) > MAX_LAYER_ARRAYS_BYTES:
                raise LayerArraysError(
                    f"{path}: members expand beyond {MAX_LAYER_ARRAYS_BYTES:,} bytes; refused"
                )
            return {
                name: _read_member(path, archive, infos[f"{name}.npy"], name) for name in MEMBERS
            }
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise LayerArraysError(f"{path}: not a readable npz archive: {excerpt(str(exc))}") from None


def _read_member(
    path: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str
) -> np.ndarray:
    """One member: header first (dtype, shape within the member's bytes), then the data."""
    kind, ndim = MEMBERS[name]
    fmt = np.lib.format
    try:
        with archive.open(info) as file:
            version = fmt.read_magic(file)
            header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, fortran, dtype = header(file, max_header_size=10_000)
            if not _dtype_ok(dtype, kind) or len(shape) != ndim or fortran:
                raise LayerArraysError(
                    f"{path}: field {name!r} (dtype {excerpt(str(dtype))}, shape {shape}): "
                    f"expected a C-ordered {ndim}-D {kind} array"
                )
            if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize > info.file_size:
                raise LayerArraysError(
                    f"{path}: field {name!r} (shape {shape}): more data than the member's "
                    f"{info.file_size:,} bytes"
                )
            file.seek(0)
            array = fmt.read_array(file, allow_pickle=False)
    except LayerArraysError:
        raise
    except (ValueError, OSError, EOFError) as exc:
        raise LayerArraysError(f"{path}: field {name!r}: unreadable: {excerpt(str(exc))}") from None
    if kind == _STR:
        return array.astype(str)
    return array


def _dtype_ok(dtype: np.dtype, kind: str) -> bool:
    if kind == _STR:
        return dtype.kind == "U"
    return dtype == np.dtype(kind).newbyteorder("<") or dtype == np.dtype(kind)


def _models(path: Path, a: dict[str, np.ndarray]) -> dict[str, dict[str, LayerTimeModel | None]]:
    """The models of checked arrays (shapes, names, numbers, trees)."""
    rows, width = a["scale"].shape if a["scale"].ndim == 2 else (0, 0)

    def fail(field: str, where: str, value: Any, why: str) -> LayerArraysError:
        return LayerArraysError(f"{path}: field {field!r}{where} (value {excerpt(value)}): {why}")

    if not 1 <= width <= MAX_LAYER_FEATURES:
        raise fail("scale", "", a["scale"].shape, f"expected (regressors, 1..{MAX_LAYER_FEATURES})")
    expected = {
        "layer_type": (rows,), "direction": (rows,), "coef": (rows, width),
        "intercept": (rows,), "correction_range": (rows, 2), "tree_count": (rows,),
        "booster_init": (rows,), "learning_rate": (rows,),
    }  # fmt: skip
    for name, shape in expected.items():
        if a[name].shape != shape:
            raise fail(name, "", f"shape {a[name].shape}", f"expected shape {shape}")
    for name in ("scale", "coef", "intercept", "correction_range", "booster_init",
                 "learning_rate", "threshold", "value"):  # fmt: skip
        bad = np.flatnonzero(~np.isfinite(a[name]).reshape(len(a[name]), -1).all(axis=1))
        if bad.size:
            row = int(bad[0])
            raise fail(name, f" row {row}", a[name][row].tolist(), "not finite")
    pair_types = [str(t) for t in a["pair_types"]]
    if len(set(pair_types)) != len(pair_types) or "*" not in pair_types:
        raise fail("pair_types", "", pair_types, "expected distinct layer types with '*'")
    models: dict[str, dict[str, LayerTimeModel | None]] = {
        t: dict.fromkeys(DIRECTIONS) for t in pair_types
    }
    counts = a["tree_count"]
    if (counts < 0).any() or counts.sum() != len(a["node_count"]):
        raise fail("tree_count", "", counts.tolist(), f"not >= 0 summing to the "
                   f"{len(a['node_count'])} trees of 'node_count'")  # fmt: skip
    node_counts = a["node_count"]
    bad = np.flatnonzero((node_counts < 1) | (node_counts > MAX_TREE_NODES))
    if bad.size:
        raise fail("node_count", f" tree {int(bad[0])}", int(node_counts[bad[0]]),
                   f"not in [1, {MAX_TREE_NODES}]")  # fmt: skip
    total = int(node_counts.sum())
    for name in _NODE_FIELDS:
        if a[name].shape != (total,):
            raise fail(name, "", f"shape {a[name].shape}", f"expected ({total},): the nodes "
                       "of 'node_count'")  # fmt: skip
    tree_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    node_start = np.concatenate([[0], np.cumsum(node_counts)]).astype(np.int64)
    for row in range(rows):
        layer_type, direction = str(a["layer_type"][row]), str(a["direction"][row])
        pair = models.get(layer_type)
        if pair is None or direction not in DIRECTIONS or pair[direction] is not None:
            raise fail("layer_type", f" row {row}", f"{layer_type}/{direction}",
                       "not a pass of a listed type, or listed twice")  # fmt: skip
        booster = None
        if counts[row]:
            rate = float(a["learning_rate"][row])
            if not 0 < rate <= MAX_LEARNING_RATE:
                raise fail("learning_rate", f" row {row}", rate,
                           f"not in (0, {MAX_LEARNING_RATE}]")  # fmt: skip
            first, last = tree_start[row], tree_start[row + 1]
            lo, hi = node_start[first], node_start[last]
            own = node_counts[first:last]
            for k, (start, stop) in enumerate(
                zip(node_start[first:last], node_start[first + 1 : last + 1], strict=True)
            ):
                try:
                    check_tree_arrays(
                        f"{path}: regressor {excerpt(layer_type)}/{direction} tree {k}",
                        *(a[name][start:stop] for name in _NODE_FIELDS[:4]),
                        a["value"][start:stop, None],
                        width,
                    )
                except TreeStructureError as exc:
                    raise LayerArraysError(str(exc)) from None
            booster = BoostedTrees(
                init=float(a["booster_init"][row]),
                learning_rate=rate,
                node_counts=own.copy(),
                **{name: a[name][lo:hi].copy() for name in _NODE_FIELDS},
            )
        low, high = (float(v) for v in a["correction_range"][row])
        pair[direction] = LayerTimeModel(
            scale_=a["scale"][row].copy(),
            intercept_=float(a["intercept"][row]),
            coef_=a["coef"][row].copy(),
            correction_range_=(low, high),
            booster_=booster,
        )
    return models
