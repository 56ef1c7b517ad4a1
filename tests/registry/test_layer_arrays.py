import io
import zipfile

import numpy as np
import pytest

from scaledl.models.layerwise import LayerTimeRegressor
from scaledl.registry.layer_arrays import (
    MAX_LAYER_ARRAYS_BYTES,
    LayerArraysError,
    read_layer_arrays,
    write_layer_arrays,
)


@pytest.fixture(scope="module")
def regressors():
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(1e5, 1e10, 80), rng.integers(1, 60, 80),
                         rng.uniform(1e3, 1e8, 80), rng.uniform(0, 1e7, 80)])  # fmt: skip
    y = (1e-8 * X[:, 0] + 0.004 * X[:, 1]) * np.exp(rng.normal(0, 0.3, 80))
    boosted = LayerTimeRegressor(max_depth=3).fit(X, y)
    plain = LayerTimeRegressor(n_estimators=0).fit(X, y)
    models = {
        "*": {"forward": boosted, "backward": plain},
        "attention": {"forward": boosted, "backward": None},
    }
    return models, X


@pytest.fixture
def saved(regressors, tmp_path):
    models, _ = regressors
    path = tmp_path / "layerwise.npz"
    converted = {t: {d: r and r.to_model() for d, r in p.items()} for t, p in models.items()}
    write_layer_arrays(converted, path)
    return path


def test_a_round_trip_predicts_exactly_what_the_regressors_do(regressors, saved):
    models, X = regressors
    loaded = read_layer_arrays(saved)
    assert set(loaded) == {"*", "attention"} and loaded["attention"]["backward"] is None
    for layer_type, pair in models.items():
        for direction, regressor in pair.items():
            if regressor is not None:
                got = loaded[layer_type][direction].predict(X)
                np.testing.assert_array_equal(got, regressor.predict(X))
    with zipfile.ZipFile(saved) as archive:  # np.savez: stored, nothing to decompress
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_STORED}


def rewrite(path, **changes) -> None:
    """The archive with members replaced (``None``: removed) or added."""
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    for key, value in changes.items():
        if value is None:
            del arrays[key]
        else:
            arrays[key] = value
    with open(path, "wb") as file:
        np.savez(file, **arrays)


def member(path, name):
    with np.load(path) as npz:
        return npz[name].copy()


def first_split(path) -> int:
    return int(np.flatnonzero(member(path, "children_left") != -1)[0])


CASES = {
    "nan coef": (
        lambda p: {"coef": np.where(member(p, "coef") >= 0, np.nan, 0.0)},
        "field 'coef' row 0 (value [nan, nan, nan, nan]): not finite",
    ),
    "inf threshold": (
        lambda p: {"threshold": np.full_like(member(p, "threshold"), np.inf)},
        "field 'threshold' row 0",
    ),
    "bad shape": (
        lambda p: {"coef": member(p, "coef")[:, :3]},
        "field 'coef' (value 'shape (3, 3)'): expected shape (3, 4)",
    ),
    "child out of range": (
        lambda p: {
            "children_left": np.where(
                np.arange(len(member(p, "children_left"))) == first_split(p),
                10**9,
                member(p, "children_left"),
            )
        },
        "node 0 field 'children_left' (value 1000000000): a child must lie after its parent",
    ),
    "cyclic tree": (
        lambda p: {
            "children_right": np.where(
                np.arange(len(member(p, "children_right"))) == first_split(p),
                0,
                member(p, "children_right"),
            )
        },
        "node 0 field 'children_right' (value 0): a child must lie after its parent",
    ),
    "feature out of range": (
        lambda p: {"feature": np.where(member(p, "children_left") != -1, 7, member(p, "feature"))},
        "node 0 field 'feature' (value 7): not in [0, 4)",
    ),
    "node count": (lambda p: {"node_count": member(p, "node_count") + 1}, "field 'children_left'"),
    "tree count": (lambda p: {"tree_count": member(p, "tree_count") * 2}, "field 'tree_count'"),
    "learning rate": (
        lambda p: {"learning_rate": np.full(3, 1e6)},
        "field 'learning_rate' row 0 (value 1000000.0): not in (0, 10.0]",
    ),
    "duplicate pass": (
        lambda p: {"direction": np.array(["forward"] * 3)},
        "field 'layer_type' row 1 (value '*/forward')",
    ),
    "no generic pair": (
        lambda p: {"pair_types": np.array(["attention", "norm"])},
        "field 'pair_types'",
    ),
    "object array": (
        lambda p: {"coef": np.array([[{"x": 1}]] * 3, dtype=object)},
        "field 'coef' (dtype 'object'",
    ),
    "int where float": (
        lambda p: {"intercept": np.zeros(3, dtype=np.int64)},
        "field 'intercept' (dtype 'int64'",
    ),
    "missing member": (lambda p: {"value": None}, "members"),
    "extra member": (lambda p: {"payload": np.zeros(2)}, "members"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_archive_is_refused_naming_the_file_and_field(saved, case):
    edit, message = CASES[case]
    rewrite(saved, **edit(saved))
    with pytest.raises(LayerArraysError) as info:
        read_layer_arrays(saved)
    assert str(saved) in str(info.value) and message in str(info.value)


def test_a_header_claiming_a_huge_array_is_refused_before_allocating(saved):
    """The header says 2**40 float64s; the member holds a few bytes."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (2**40,)}
    )
    with np.load(saved) as npz:
        arrays = {k: npz[k] for k in npz.files}
    with zipfile.ZipFile(saved, "w") as archive:
        for key, value in arrays.items():
            if key == "threshold":
                archive.writestr("threshold.npy", b"\x93NUMPY\x01\x00" + header.getvalue()[8:])
            else:
                buffer = io.BytesIO()
                np.save(buffer, value)
                archive.writestr(f"{key}.npy", buffer.getvalue())
    with pytest.raises(LayerArraysError, match=r"field 'threshold' \(shape \(1099511627776,\)\)"):
        read_layer_arrays(saved)


def test_a_file_beyond_the_bound_is_refused_unread(tmp_path):
    path = tmp_path / "layerwise.npz"
    with open(path, "wb") as file:
        file.truncate(MAX_LAYER_ARRAYS_BYTES + 1)
    with pytest.raises(LayerArraysError, match="refused unread"):
        read_layer_arrays(path)


def test_a_deflated_member_that_expands_beyond_the_bound_is_refused(saved):
    with np.load(saved) as npz:
        arrays = {k: npz[k] for k in npz.files}
    with zipfile.ZipFile(saved, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for key, value in arrays.items():
            buffer = io.BytesIO()
            np.save(buffer, value)
            data = buffer.getvalue() + (b"\0" * MAX_LAYER_ARRAYS_BYTES if key == "value" else b"")
            archive.writestr(f"{key}.npy", data)
    with pytest.raises(LayerArraysError, match="members expand beyond"):
        read_layer_arrays(saved)


def test_not_a_zip_is_refused(tmp_path):
    path = tmp_path / "layerwise.npz"
    path.write_bytes(b"not a zip")
    with pytest.raises(LayerArraysError, match="not a readable npz archive"):
        read_layer_arrays(path)
