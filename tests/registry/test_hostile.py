"""Issue 23: hostile bundles never run code or hang, and publishing survives crashes.

Every test works on a private copy of the shared bundle, made consistent again after each edit
(checksum and size in the manifest), as a hostile bundle from a DVC remote or a shared folder
would be.
"""

import errno
import itertools
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import skops
import skops.io as sio
import torch
from faults import FsyncSpy, count_io, crash_at, tmpfs
from tiny_specs import tiny_spec

from scaledl.prediction.predictor import load_predictor
from scaledl.registry import BundleError, list_predictors, register_bundle
from scaledl.registry.bundle import TRUSTED_TYPES, latest_bundle, read_manifest, sha256_file

pytestmark = pytest.mark.slow


def relist(bundle: Path, name: str) -> None:
    """Record a file's current checksum and size in the manifest (a consistent hostile bundle)."""
    path = bundle / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["files"][name] = sha256_file(bundle / name)
    manifest["file_sizes"][name] = (bundle / name).stat().st_size
    path.write_text(json.dumps(manifest))


# ------------------------------------------------------------------ crafted skops trees
_ids = itertools.count(1)
RUNSTRING = ("numpy.testing._private.utils", "runstring")  # runstring(code, dict): exec(code)


def node(loader, module, cls, **extra):
    return {"__class__": cls, "__module__": module, "__loader__": loader, "__id__": next(_ids),
            **extra}  # fmt: skip


def text(value):
    return node("JsonNode", "builtins", "str", content=json.dumps(value), is_json=True)


def empty_dict():
    return node("DictNode", "builtins", "dict", content={},
                key_types=node("ListNode", "builtins", "list", content=[]))  # fmt: skip


def crafted_trees(marker: Path) -> dict[str, tuple[dict, str]]:
    """One tree per node class of skops that names a callable (or a class) by module and name,
    each naming something an allow-list prefix (``numpy.``, ``sklearn.``,
    ``scaledl.models.layerwise.LayerTimeRegressor``) would admit; with the name it must be
    refused by."""
    code = f"open({str(marker)!r}, 'w').write('ran')"
    args = node("TupleNode", "builtins", "tuple", content=[text(code), empty_dict()])
    run = ".".join(RUNSTRING)
    bunch = ("sklearn.utils._bunch", "Bunch")
    return {
        # Calls the named callable with the stored arguments while loading.
        "ConstructorFromReduceNode": (
            node("ConstructorFromReduceNode", *RUNSTRING, content=args), run),
        "LossNode": (node("LossNode", *RUNSTRING, __reduce__={"args": args},
                          content=empty_dict()), run),
        # Return the named function or class (called later by whoever uses it).
        "FunctionNode": (node("FunctionNode", *RUNSTRING), run),
        "TypeNode": (node("TypeNode", *RUNSTRING), run),
        "PartialNode": (
            node("PartialNode", "functools", "partial", content={
                "func": node("FunctionNode", *RUNSTRING), "args": args,
                "kwds": empty_dict(), "namespace": empty_dict()}),
            run),
        # Build an instance of the named class (its __setstate__ runs).
        "ObjectNode": (node("ObjectNode", *bunch, content=empty_dict()), ".".join(bunch)),
        "MethodNode": (
            node("MethodNode", *bunch, content={
                "obj": node("ObjectNode", *bunch, content=empty_dict()), "func": "clear"}),
            ".".join(bunch)),
        # A name that starts with the regressor's full name.
        "prefix of an allowed name": (
            node("ObjectNode", "scaledl.models.layerwise", "LayerTimeRegressorX",
                 content=empty_dict()),
            "scaledl.models.layerwise.LayerTimeRegressorX"),
    }  # fmt: skip


def write_skops(path: Path, tree: dict) -> None:
    schema = node("DictNode", "builtins", "dict", content={"*": tree},
                  key_types=node("ListNode", "builtins", "list",
                                 content=[node("TypeNode", "builtins", "str")]),
                  protocol=2, _skops_version=skops.__version__)  # fmt: skip
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("schema.json", json.dumps(schema))


@pytest.mark.parametrize("kind", list(crafted_trees(Path("x"))))
def test_a_crafted_skops_tree_never_runs_code(legacy, tmp_path, kind):
    """The README's promise: a tree naming a function inside an allowed prefix is refused."""
    marker = tmp_path / "ran"
    tree, name = crafted_trees(marker)[kind]
    write_skops(legacy / "layerwise.skops", tree)
    relist(legacy, "layerwise.skops")
    assert name in sio.get_untrusted_types(file=legacy / "layerwise.skops")
    with pytest.raises(BundleError, match="outside the allow-list") as info:
        load_predictor(legacy)
    assert name in str(info.value) and "layerwise.skops" in str(info.value)
    assert not marker.exists()


def test_the_allow_list_is_exactly_what_a_bundle_needs(legacy_bundle):
    untrusted = sio.get_untrusted_types(file=legacy_bundle / "layerwise.skops")
    assert set(untrusted) == TRUSTED_TYPES


# ------------------------------------------------------------------ special files
@pytest.mark.parametrize("special", ["fifo", "dev_zero", "directory"])
def test_a_special_file_is_refused_unread(bundle, registry_root, tmp_path, special):
    path = bundle / "gnn.pt"
    path.unlink()
    if special == "fifo":
        os.mkfifo(path)
    elif special == "dev_zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    with pytest.raises(BundleError, match="not a regular file") as info:
        load_predictor(bundle)
    assert str(path) in str(info.value)
    # The registry lists it as broken (it would hang if it read the file).
    root = tmp_path / "registry"
    shutil.copytree(registry_root, root, symlinks=True)
    shutil.rmtree(root / "scaledl" / "v1")
    shutil.move(bundle, root / "scaledl" / "v1")
    table = list_predictors(root).set_index("version")
    assert (
        table.loc["v1", "status"] == "broken" and "not a regular file" in table.loc["v1", "problem"]
    )
    assert table.loc["v2", "status"] == "ok"


def test_a_fifo_manifest_is_refused_unread(bundle):
    (bundle / "manifest.json").unlink()
    os.mkfifo(bundle / "manifest.json")
    with pytest.raises(BundleError, match="unreadable manifest: not a regular file"):
        load_predictor(bundle)


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_dvc_cache_links_to_regular_files_load(bundle, tmp_path, link):
    """DVC's symlink and hardlink cache layouts: the files are links into a cache."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for name in ("gnn.pt", "layerwise.npz", "params.json", "manifest.json"):
        shutil.move(bundle / name, cache / name)
        if link == "symlink":
            (bundle / name).symlink_to(cache / name)
        else:
            os.link(cache / name, bundle / name)
    assert load_predictor(bundle).version == "v2"


def test_a_file_of_another_size_is_refused_before_hashing(bundle):
    path = bundle / "gnn.pt"
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(
        BundleError, match=r"gnn.pt: listed in the manifest but \d+ bytes, the manifest says"
    ):
        load_predictor(bundle)


# ------------------------------------------------------------------ loaded numbers
def edit_params(bundle: Path, edit, raw: str | None = None) -> None:
    path = bundle / "params.json"
    params = json.loads(path.read_text())
    edit(params)
    text = json.dumps(params)
    path.write_text(text if raw is None else text.replace(raw[0], raw[1]))
    relist(bundle, "params.json")


def test_a_negative_epoch_overhead_is_refused(bundle):
    edit_params(bundle, lambda p: p["epoch"]["coef"].__setitem__(0, -1000.0))
    with pytest.raises(BundleError, match=r"params.json: field 'epoch.coef.0' \(value -1000.0\)"):
        load_predictor(bundle)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda p: p.__setitem__("extra", 1), r"field 'extra' \(value 1\): unknown field"),
        (lambda p: p.pop("training_devices"), r"field 'training_devices': missing"),
        (
            lambda p: p.__setitem__("layerwise_min_samples", -1),
            r"field 'layerwise_min_samples' \(value -1\): Input should be greater than or equal",
        ),
        (lambda p: p.__setitem__("gnn_edges", "maybe"), r"field 'gnn_edges' \(value 'maybe'\)"),
    ],
)
def test_params_json_is_validated_field_by_field(bundle, edit, match):
    edit_params(bundle, edit)
    with pytest.raises(BundleError, match=r"params.json: " + match):
        load_predictor(bundle)


def test_params_of_older_bundles_load_with_the_recorded_defaults(bundle):
    def edit(params):
        for key in ("gnn_prior", "gnn_edges", "gnn_system_nodes", "training_workload_ids",
                    "training_domain"):  # fmt: skip
            params.pop(key)

    edit_params(bundle, edit)
    predictor = load_predictor(bundle)
    assert predictor.domain is None and predictor.training_workload_ids == []
    assert predictor.method.prior == "sum" and predictor.method.edges


@pytest.mark.parametrize("where", ["epoch", "training_domain"])
def test_a_non_finite_number_in_params_is_refused(bundle, where):
    def edit(params):
        if where == "epoch":
            params["epoch"]["coef"][0] = 12345.5
        else:
            first = next(iter(params["training_domain"]["ranges"]))
            params["training_domain"]["ranges"][first] = [12345.5, 12345.5]

    edit_params(bundle, edit, raw=("12345.5", "NaN"))
    with pytest.raises(
        BundleError,
        match=r"params.json: unreadable: not valid JSON: field '\w+'\[0\] \(value NaN\): not a",
    ):
        load_predictor(bundle)


def test_an_inverted_domain_range_is_refused(bundle):
    def edit(params):
        first = next(iter(params["training_domain"]["ranges"]))
        params["training_domain"]["ranges"][first] = [10.0, 1.0]

    edit_params(bundle, edit)
    with pytest.raises(BundleError, match="expected finite bounds, low <= high"):
        load_predictor(bundle)


def test_non_finite_gnn_weights_are_refused(bundle):
    path = bundle / "gnn.pt"
    state = torch.load(path, weights_only=True)
    key = next(k for k, v in state.items() if v.is_floating_point() and v.numel())
    state[key].view(-1)[0] = float("nan")
    torch.save(state, path)
    relist(bundle, "gnn.pt")
    with pytest.raises(BundleError, match=f"gnn.pt: tensor '{key}' holds non-finite values"):
        load_predictor(bundle)


# ------------------------------------------------------------------ publishing
def fresh_registry(bundle_v1: Path, root: Path) -> Path:
    register_bundle(bundle_v1, root, "scaledl")
    return root / "scaledl"


@pytest.fixture
def v1(registry_root, tmp_path):
    target = tmp_path / "v1"
    shutil.copytree(registry_root / "scaledl" / "v1", target)
    return target


def test_a_crash_at_every_io_call_of_register_then_a_retry_completes(bundle, v1, tmp_path):
    name_dir = fresh_registry(v1, tmp_path / "registry")

    def publish():
        register_bundle(bundle, tmp_path / "registry", "scaledl", metrics={"mre": 0.1})

    calls = count_io(publish)
    shutil.rmtree(name_dir / "v2")
    (name_dir / "latest").write_text("v1\n")
    finished_without_latest = 0
    crashes = 0
    for n in range(1, calls + 1):
        crashes += crash_at(n, publish)  # a few failures are absorbed (metadata look-ups)
        latest = (name_dir / "latest").read_text().strip()
        assert latest in ("v1", "v2"), n
        if (name_dir / "v2").exists():
            read_manifest(name_dir / "v2")  # a published version is always whole
            finished_without_latest += latest == "v1"
        publish()  # the retry completes, whatever the crash left
        # `latest` names v2 and every file of v2 verifies (size and SHA-256 of the manifest):
        # the bytes load_predictor deserialises (tested on registered bundles above).
        assert read_manifest(latest_bundle(name_dir))["version"] == "v2", n
        # (A temporary a crash left is this live process's; a dead one's goes, see below.)
        assert sorted(p.name for p in name_dir.iterdir() if p.name[0] != ".") == [
            "latest",
            "v1",
            "v2",
        ], n
        shutil.rmtree(name_dir / "v2")
        (name_dir / "latest").write_text("v1\n")
    assert crashes > calls // 2
    assert finished_without_latest > 0  # the case that made every retry fail


def test_register_fsyncs_before_every_rename_and_the_directory_after(bundle, tmp_path, monkeypatch):
    spy = FsyncSpy().install(monkeypatch)
    register_bundle(bundle, tmp_path / "registry", "scaledl")
    spy.assert_durable()
    renamed = [dst.name for _, _, dst, _ in spy.replaces()]
    assert renamed == ["v2", "latest"]


def test_a_retry_is_idempotent_but_other_content_is_refused(bundle, tmp_path):
    first = register_bundle(bundle, tmp_path / "registry", "scaledl", metrics={"x": 1.0})
    assert register_bundle(bundle, tmp_path / "registry", "scaledl", metrics={"x": 1.0}) == first
    with pytest.raises(ValueError, match="exists already with another manifest"):
        register_bundle(bundle, tmp_path / "registry", "scaledl", metrics={"x": 2.0})
    (first / "params.json").write_text("{}")
    with pytest.raises(BundleError, match="exists already and does not verify"):
        register_bundle(bundle, tmp_path / "registry", "scaledl", metrics={"x": 1.0})


def test_temporaries_of_a_killed_publish_are_removed_by_the_next(bundle, v1, tmp_path):
    name_dir = fresh_registry(v1, tmp_path / "registry")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = name_dir / f".v2.{dead.pid}.k9x_1.tmp"
    shutil.copytree(bundle, stale)
    register_bundle(bundle, tmp_path / "registry", "scaledl")
    assert sorted(p.name for p in name_dir.iterdir()) == ["latest", "v1", "v2"]


# ------------------------------------------------------------------ latest (issue 28)
def test_a_latest_symlinked_to_a_file_is_read_like_one(v1, tmp_path):
    name_dir = fresh_registry(v1, tmp_path / "registry")
    (tmp_path / "pointer").write_text("v1\n")
    (name_dir / "latest").unlink()
    (name_dir / "latest").symlink_to(tmp_path / "pointer")
    assert load_predictor(name_dir).version == "v1"
    assert list(list_predictors(tmp_path / "registry")["latest"]) == [True]


def test_a_latest_symlinked_to_a_version_directory_is_refused_clearly(v1, tmp_path):
    name_dir = fresh_registry(v1, tmp_path / "registry")
    (name_dir / "latest").unlink()
    (name_dir / "latest").symlink_to("v1")
    refused = r"latest: not a regular file \(a directory\).*one-line file"
    with pytest.raises(BundleError, match=refused):
        load_predictor(name_dir)
    table = list_predictors(tmp_path / "registry")
    assert list(table["version"]) == ["v1", "latest"]
    assert list(table["status"]) == ["ok", "broken"]
    assert "one-line file" in table["problem"].iloc[1]
    assert load_predictor(name_dir / "v1").version == "v1"


def test_a_dangling_latest_is_listed(v1, tmp_path):
    name_dir = fresh_registry(v1, tmp_path / "registry")
    (name_dir / "latest").write_text("v9\n")
    table = list_predictors(tmp_path / "registry").set_index("version")
    assert table.loc["v9", "status"] == "missing" and table.loc["v9", "latest"]
    assert "names version 'v9', which does not exist" in table.loc["v9", "problem"]
    assert table.loc["v1", "status"] == "ok" and not table.loc["v1", "latest"]


def test_a_full_disk_keeps_latest_and_leaves_no_temporary(bundle, v1, tmp_path):
    size = sum(p.stat().st_size for p in v1.iterdir())
    with tmpfs(tmp_path / "small", size=str(size * 3 // 2)) as root:  # room for one version
        name_dir = fresh_registry(v1, root)
        with pytest.raises(OSError) as info:
            register_bundle(bundle, root, "scaledl")
        assert info.value.errno == errno.ENOSPC
        assert (name_dir / "latest").read_text() == "v1\n"
        assert sorted(p.name for p in name_dir.iterdir()) == ["latest", "v1"]
        assert load_predictor(name_dir).version == "v1"


@pytest.mark.parametrize(("field", "value"), [("coef_", float("nan")), ("coef_", -1.0),
                                              ("scale_", 0.0)])  # fmt: skip
def test_a_layer_regressor_out_of_range_is_refused(legacy, field, value):
    path = legacy / "layerwise.skops"
    models = sio.load(path, trusted=sorted(TRUSTED_TYPES))
    regressor = models["*"]["forward"]
    getattr(regressor, field)[0] = value
    sio.dump(models, path)
    relist(legacy, "layerwise.skops")
    with pytest.raises(BundleError, match=f"regressor '\\*'/'forward' field '{field}'"):
        load_predictor(legacy)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("coef", float("nan"), "field 'coef' row 0"),
        ("coef", -1.0, "field 'coef_'"),
        ("scale", 0.0, "field 'scale_'"),
    ],  # fmt: skip
)
def test_a_layer_array_out_of_range_is_refused(bundle, field, value, message):
    path = bundle / "layerwise.npz"
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays[field][0, 0] = value
    with open(path, "wb") as file:
        np.savez(file, **arrays)
    relist(bundle, "layerwise.npz")
    with pytest.raises(BundleError) as info:
        load_predictor(bundle)
    assert str(path) in str(info.value) and message in str(info.value)


def test_a_bundle_written_before_layerwise_npz_loads_and_predicts_the_same(bundle, legacy):
    """Old bundles are read through skops (decision: no retraining needed)."""
    new, old = load_predictor(bundle), load_predictor(legacy)
    spec = [tiny_spec("bert"), tiny_spec("vit")]
    assert new.predict(spec)["iteration_s"].tolist() == old.predict(spec)["iteration_s"].tolist()


# ------------------------------------------------------------------ issue 50
NESTED = "[" * 100_000 + "]" * 100_000  # 200 KB: a RecursionError inside json without a bound


def registry_with(bundle: Path, v1: Path, root: Path) -> Path:
    """A registry of ``v1`` (registered) and the altered ``bundle`` moved in as ``v2``."""
    name_dir = fresh_registry(v1, root)
    shutil.move(bundle, name_dir / "v2")
    return name_dir


@pytest.mark.parametrize("file", ["manifest.json", "params.json", "calibration.json"])
def test_a_deeply_nested_json_is_refused_naming_the_file(bundle, v1, tmp_path, file):
    from typer.testing import CliRunner

    from scaledl.cli import app

    (bundle / file).write_text(NESTED)
    if file != "manifest.json":
        relist(bundle, file)
    with pytest.raises(BundleError, match=f"{file}: .*nested 100000 levels deep") as info:
        load_predictor(bundle)
    assert str(bundle / file) in str(info.value)
    name_dir = registry_with(bundle, v1, tmp_path / "registry")
    inline = [
        x for k, v in tiny_spec("bert").items() if k != "family" for x in ("--set", f"{k}={v}")
    ]
    args = ["predict", "--predictor", str(name_dir / "v2"), "--family", "bert", *inline]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "nested 100000 levels deep" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    # listed: the manifest's error breaks v2 in the listing; the others only load, not list
    table = list_predictors(tmp_path / "registry").set_index("version")
    assert table.loc["v1", "status"] == "ok"
    if file == "manifest.json":
        assert table.loc["v2", "status"] == "broken"
        assert "nested 100000 levels deep" in table.loc["v2", "problem"]


def test_any_error_of_one_version_is_listed_and_hides_no_other(bundle, v1, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from scaledl.cli import app
    from scaledl.registry import bundle as bundle_module

    registry_with(bundle, v1, tmp_path / "registry")
    real = bundle_module.read_manifest

    def failing(path):
        if Path(path).name == "v2":
            raise MemoryError("no memory left\nsecond line")  # not a BundleError
        return real(path)

    monkeypatch.setattr(bundle_module, "read_manifest", failing)
    table = list_predictors(tmp_path / "registry").set_index("version")
    assert table.loc["v1", "status"] == "ok"
    assert table.loc["v2", "status"] == "broken"
    assert table.loc["v2", "problem"].endswith("v2: MemoryError: no memory left")
    result = CliRunner().invoke(app, ["list-predictors", "--registry", str(tmp_path / "registry")])
    assert result.exit_code == 0 and "v1" in result.stdout
    assert "scaledl v2: broken: " in result.output and "second line" not in result.output


def test_a_version_folder_linked_out_of_the_registry_is_refused(bundle, v1, tmp_path):
    name_dir = fresh_registry(v1, tmp_path / "registry")
    outside = tmp_path / "elsewhere" / "v2"
    outside.parent.mkdir()
    shutil.move(bundle, outside)
    (name_dir / "v2").symlink_to(outside)
    (name_dir / "latest").write_text("v2\n")
    refused = r"v2: outside the registry root, refused \(it resolves to .*elsewhere/v2;"
    with pytest.raises(BundleError, match=refused):
        load_predictor(name_dir)
    with pytest.raises(BundleError, match=refused):
        load_predictor(name_dir / "v2")
    table = list_predictors(tmp_path / "registry").set_index("version")
    assert (
        table.loc["v2", "status"] == "broken"
        and "outside the registry root" in (table.loc["v2", "problem"])
    )
    assert table.loc["v1", "status"] == "ok"
    # a link inside the registry is a version like any other
    (name_dir / "v2").unlink()
    shutil.move(outside, name_dir / ".store")
    (name_dir / "v2").symlink_to(name_dir / ".store")
    assert load_predictor(name_dir).version == "v2"


@pytest.mark.parametrize("same", [True, False])
def test_a_publish_that_loses_the_race_finishes_or_names_the_version(
    bundle, tmp_path, monkeypatch, same
):
    """The loser checked that ``v2`` did not exist, then the winner renamed its folder first."""
    root = tmp_path / "registry"
    target = root / "scaledl" / "v2"
    real_replace = os.replace
    raced = []

    def racing_replace(src, dst, *args, **kwargs):
        if Path(dst) == target and not raced:
            raced.append(True)
            register_bundle(bundle, root, "scaledl", metrics={"run": 1.0})  # the winner
            assert target.is_dir()
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", racing_replace)
    metrics = {"run": 1.0 if same else 2.0}
    if same:
        assert register_bundle(bundle, root, "scaledl", metrics=metrics) == target
    else:
        with pytest.raises(ValueError, match="bundle version 'v2' exists already with another"):
            register_bundle(bundle, root, "scaledl", metrics=metrics)
    assert raced
    assert read_manifest(target)["metrics"] == {"run": 1.0}
    assert sorted(p.name for p in target.parent.iterdir()) == ["latest", "v2"]  # no temporary
    assert (target.parent / "latest").read_text() == "v2\n"
