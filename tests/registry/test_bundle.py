import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from scaledl.devices.local import local_device_name
from scaledl.models.fitted import NotFittedError
from scaledl.prediction.predictor import TRACE_CACHE_DIR, load_predictor
from scaledl.registry import (
    BundleError,
    IncompatibleBundleError,
    list_predictors,
    read_manifest,
    register_bundle,
    resolve_bundle,
    save_bundle,
)
from scaledl.registry.bundle import FORMAT_VERSION, LIST_COLUMNS, sha256_file
from scaledl.registry.kinds import load_method

pytestmark = pytest.mark.slow


def test_layout_and_manifest(registry_root):
    bundle = registry_root / "scaledl" / "v2"
    assert sorted(p.name for p in bundle.iterdir()) == [
        "gnn.pt",
        "layerwise.npz",
        "manifest.json",
        "params.json",
    ]
    manifest = read_manifest(bundle)
    assert manifest["format_version"] == FORMAT_VERSION
    assert (manifest["name"], manifest["version"]) == ("scaledl", "v2")
    assert set(manifest["files"]) == {"gnn.pt", "layerwise.npz", "params.json"}
    assert manifest["training_data"] == {"workloads": 8}
    assert manifest["training_summary"]["training_workloads"] == 8
    assert "attention" in manifest["feature_schema"]["layer_types"]
    assert (registry_root / "scaledl" / "latest").read_text().strip() == "v2"
    # No temporary of a publish is left (the trace cache of predictions is no temporary).
    hidden = [p.name for p in (registry_root / "scaledl").iterdir() if p.name.startswith(".")]
    assert set(hidden) <= {TRACE_CACHE_DIR}


def test_save_load_gives_identical_predictions(registry_root, profiled):
    from scaledl.models.data import load_profile_data
    from scaledl.models.gnn_training import GNNTrainConfig
    from scaledl.models.train import TrainConfig, train_predictor

    data = load_profile_data(profiled.out_dir)
    workloads = [data.workloads[i] for i in data.ids]
    gnn = GNNTrainConfig(hidden_channels=16, heads=2, max_epochs=30, patience=10)
    # Training is seeded: this is the method the shared bundle holds.
    method = train_predictor(data, TrainConfig(gnn=gnn, folds=3))
    expected = method.predict(workloads)
    predictor = load_predictor(registry_root / "scaledl")
    assert predictor.version == "v2"
    got = predictor.predict(workloads)
    np.testing.assert_allclose(got["iteration_s"], expected["iteration_s"], rtol=1e-6)
    np.testing.assert_allclose(got["epoch_s"], expected["epoch_s"], rtol=1e-6)
    # And a fresh save of that method loads back to the same numbers.
    path = save_bundle(method, registry_root.parent / "fresh", "scaledl")
    again = load_predictor(path).predict(workloads)
    np.testing.assert_array_equal(again["iteration_s"], got["iteration_s"])


def test_load_method_restores_every_part(bundle):
    method, manifest = load_method(bundle)
    assert method.gnn_ is not None and not method.gnn_.training
    assert method.allreduce_ is not None  # two-rank workloads were profiled
    assert len(method.epoch_model_.coef_) == 3
    assert "*" in method.layerwise_.models_ and "attention" in method.layerwise_.models_
    assert method.training_devices_ == [local_device_name()]
    assert len(method.training_workload_ids_) == 8
    assert manifest["version"] == "v2"


@pytest.mark.parametrize("name", ["gnn.pt", "layerwise.npz", "params.json"])
def test_tampered_file_is_named(bundle, name):
    path = bundle / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(BundleError) as info:
        load_predictor(bundle)
    assert str(path) in str(info.value)
    assert "checksum" in str(info.value)


@pytest.mark.parametrize("name", ["gnn.pt", "layerwise.npz"])
def test_truncated_file_is_refused(bundle, name):
    path = bundle / name
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(BundleError, match=name):
        load_predictor(bundle)


def test_missing_file_is_named(bundle):
    (bundle / "gnn.pt").unlink()
    with pytest.raises(BundleError, match="gnn.pt.*missing"):
        load_predictor(bundle)


def test_truncated_manifest(bundle):
    path = bundle / "manifest.json"
    path.write_text(path.read_text()[:50])
    with pytest.raises(BundleError, match="manifest.json"):
        load_predictor(bundle)


def edit_manifest(bundle, **changes):
    path = bundle / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.update(changes)
    path.write_text(json.dumps(manifest))
    return manifest


def test_a_file_dropped_from_the_manifest_is_refused(bundle):
    """Issue 15, case 5: params.json edited and removed from the manifest."""
    (bundle / "params.json").write_text((bundle / "params.json").read_text().replace("1", "2"))
    files = {k: v for k, v in read_files(bundle).items() if k != "params.json"}
    edit_manifest(bundle, files=files)
    with pytest.raises(BundleError) as info:
        load_predictor(bundle)
    message = str(info.value)
    assert message.startswith(f"{bundle / 'params.json'}: not listed in")
    assert "field 'files'" in message


@pytest.mark.parametrize("name", ["../params.json", "extra.json"])
def test_an_unknown_manifest_entry_is_refused(bundle, name):
    edit_manifest(bundle, files={**read_files(bundle), name: "0" * 64})
    with pytest.raises(BundleError, match="not a bundle file"):
        load_predictor(bundle)


def test_unlisted_files_the_loader_never_reads_are_ignored(bundle):
    (bundle / "README.txt").write_text("notes")
    assert load_predictor(bundle).version == "v2"


def read_files(bundle):
    return json.loads((bundle / "manifest.json").read_text())["files"]


def test_other_format_version_is_incompatible(bundle):
    edit_manifest(bundle, format_version=FORMAT_VERSION + 1)
    with pytest.raises(IncompatibleBundleError, match="format_version"):
        load_predictor(bundle)


def test_other_sklearn_minor_is_incompatible_only_with_skops_files(bundle, legacy):
    for path in (bundle, legacy):
        manifest = json.loads((path / "manifest.json").read_text())
        versions = {**manifest["library_versions"], "scikit-learn": "0.1.0"}
        edit_manifest(path, library_versions=versions)
    assert load_predictor(bundle).version == "v2"  # NumPy arrays and tensors only
    with pytest.raises(IncompatibleBundleError, match="scikit-learn 0.1.0"):
        load_predictor(legacy)


def test_a_bundle_without_layer_models_names_the_file(bundle):
    files = {k: v for k, v in read_files(bundle).items() if k != "layerwise.npz"}
    edit_manifest(bundle, files=files)
    with pytest.raises(BundleError, match="layerwise.npz: not listed in"):
        load_predictor(bundle)


@pytest.mark.parametrize(("which", "skops_imported"), [("bundle", False), ("legacy", True)])
def test_load_and_first_prediction_never_import_skops(request, which, skops_imported):
    """The layer-wise arrays need NumPy only; a bundle written before them still loads (skops)."""
    from tiny_specs import tiny_spec

    path = request.getfixturevalue(which)
    code = (
        "import json, sys, scaledl; "
        f"p = scaledl.load_predictor({str(path)!r}); "
        f"p.predict([{tiny_spec('bert')!r}]); "
        "print(json.dumps({m: m in sys.modules for m in ('skops', 'sklearn.tree')}))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    imported = json.loads(run.stdout.strip().splitlines()[-1])
    assert imported["skops"] is skops_imported


def test_load_and_first_prediction_never_import_scikit_learn(bundle):
    """A loaded CPU predictor predicts with its predict-only parts: scikit-learn is for fitting.

    Neither scikit-learn nor ``scipy.stats`` (0.7 s of imports; the intervals use
    ``scipy.special``) is imported, checked after the load and after the first prediction (a
    fresh process: ``sys.modules``).
    """
    from tiny_specs import tiny_spec

    heavy = "m.split('.')[0] == 'sklearn' or m.startswith('scipy.stats')"
    code = (
        "import json, sys, scaledl; "
        f"p = scaledl.load_predictor({str(bundle)!r}); "
        f"at_load = sorted(m for m in sys.modules if {heavy}); "
        f"p.predict([{tiny_spec('bert')!r}]); "
        f"after = sorted(m for m in sys.modules if {heavy}); "
        "print(json.dumps({'load': at_load, 'predict': after, 'method': type(p.method).__name__}))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    imported = json.loads(run.stdout.strip().splitlines()[-1])
    assert imported == {"load": [], "predict": [], "method": "GraphPredictor"}


def test_weights_that_do_not_fit_fail_at_the_first_prediction(bundle, profiled):
    # A consistent bundle (checksums updated) whose GNN config does not fit its weights: the
    # files load, building the GNN (at the first prediction) is the error.
    params_path = bundle / "params.json"
    params = json.loads(params_path.read_text())
    params["gnn_config"]["hidden_channels"] *= 2
    params_path.write_text(json.dumps(params))
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"]["params.json"] = sha256_file(params_path)
    manifest["file_sizes"]["params.json"] = params_path.stat().st_size
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    predictor = load_predictor(bundle)
    with pytest.raises(BundleError, match="gnn.pt: cannot build predictor"):
        predictor.predict([profiled.workloads["bert_a"]])


def test_loading_does_not_import_pytorch_geometric(registry_root):
    code = (
        "import sys, scaledl; "
        f"p = scaledl.load_predictor({str(registry_root / 'scaledl')!r}); "
        "assert 'torch_geometric' not in sys.modules, 'imported at load'; "
        "from scaledl.devices.local import local_device_name; "
        "assert p.devices == [local_device_name()]"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_missing_latest_and_bad_paths(registry_root, tmp_path):
    name_dir = tmp_path / "scaledl"
    shutil.copytree(registry_root / "scaledl", name_dir)
    assert resolve_bundle(name_dir) == name_dir / "v2"
    (name_dir / "latest").write_text("v9\n")
    with pytest.raises(BundleError, match=r"'v9', which has no manifest.json \(versions here: v1"):
        load_predictor(name_dir)
    # Written by an editor with a byte-order mark and CRLF: the name is still v1.
    (name_dir / "latest").write_bytes(b"\xef\xbb\xbfv1\r\n")
    assert load_predictor(name_dir).version == "v1"
    (name_dir / "latest").unlink()
    # Copied without `latest`: the versions it holds are named, and the two ways out.
    with pytest.raises(BundleError, match="not a predictor bundle") as missing:
        load_predictor(name_dir)
    assert "versions v1, v2 but no `latest`" in str(missing.value)
    assert str(name_dir / "v2") in str(missing.value)
    assert str(name_dir / "latest") in str(missing.value)
    with pytest.raises(BundleError, match="nowhere.*no such file or folder"):
        load_predictor(tmp_path / "nowhere")
    # A registry root names its predictors.
    with pytest.raises(BundleError, match="a registry root holding scaledl;"):
        load_predictor(registry_root)
    (tmp_path / "w.csv").write_text("family\n")
    with pytest.raises(BundleError, match="a file, not a folder"):
        load_predictor(tmp_path / "w.csv")
    (name_dir / "latest").write_text("../scaledl/v1\n")
    with pytest.raises(BundleError, match="not a version directory name"):
        load_predictor(name_dir)
    # The versions themselves still load.
    assert load_predictor(name_dir / "v1").version == "v1"


def test_list_predictors(registry_root, tmp_path):
    table = list_predictors(registry_root)
    assert list(table["version"]) == ["v1", "v2"]
    assert list(table["latest"]) == [False, True]
    assert set(table["name"]) == {"scaledl"}
    assert list(table["training_workloads"]) == [8, 8]
    assert list(table["status"]) == ["ok", "ok"] and list(table["problem"]) == ["", ""]
    assert list_predictors(tmp_path / "empty").empty
    assert list(list_predictors(tmp_path).columns) == list(LIST_COLUMNS)


def test_list_predictors_skips_hidden_names_and_refuses_a_file(registry_root, tmp_path):
    """A trace cache in the root (a bundle predicted from beside it) is no predictor."""
    shutil.copytree(registry_root / "scaledl", tmp_path / "scaledl")
    (tmp_path / TRACE_CACHE_DIR / "ee581f4c").mkdir(parents=True)
    table = list_predictors(tmp_path)
    assert set(table["name"]) == {"scaledl"} and list(table["status"]) == ["ok", "ok"]
    (tmp_path / "w.csv").write_text("family\n")
    with pytest.raises(BundleError, match="w.csv: not a registry root"):
        list_predictors(tmp_path / "w.csv")


@pytest.mark.parametrize(
    ("damage", "status", "problem"),
    [
        ("cut", "broken", "unreadable manifest"),
        ("delete", "broken", "unreadable manifest"),
        ("tamper", "broken", "altered or truncated"),  # one byte less: the size differs
        ("format", "incompatible", "format_version"),
    ],
)
def test_a_broken_version_is_listed_with_its_reason(registry_root, tmp_path, damage, status,
                                                    problem):  # fmt: skip
    """Issue 15, case 6: the good version is still listed and loads through ``latest``."""
    root = tmp_path / "registry"
    shutil.copytree(registry_root, root)
    v1 = root / "scaledl" / "v1"
    manifest = v1 / "manifest.json"
    if damage == "cut":
        manifest.write_text(manifest.read_text()[:40])
    elif damage == "delete":
        manifest.unlink()
    elif damage == "tamper":
        (v1 / "gnn.pt").write_bytes((v1 / "gnn.pt").read_bytes()[:-1])
    else:
        edit_manifest(v1, format_version=FORMAT_VERSION + 1)
    (root / "scaledl" / ".v3.tmp").mkdir()  # an unfinished save_bundle: not a version
    table = list_predictors(root).set_index("version")
    assert list(table.index) == ["v1", "v2"]
    assert table.loc["v1", "status"] == status and problem in table.loc["v1", "problem"]
    assert table.loc["v2", "status"] == "ok" and table.loc["v2", "latest"]
    assert table.loc["v2", "training_workloads"] == 8
    assert str(table["training_workloads"].dtype) == "Int64"  # 8, not 8.0 beside a broken row
    assert load_predictor(root / "scaledl").version == "v2"


def test_save_refuses_existing_version_and_unfitted_method(registry_root, tmp_path):
    from scaledl.models.methods import GraphMethod

    method, _ = load_method(registry_root / "scaledl" / "v1")
    with pytest.raises(ValueError, match="exists already"):
        save_bundle(method, registry_root, "scaledl", version="v1")
    with pytest.raises(NotFittedError, match="GraphMethod instance is not fitted"):
        save_bundle(GraphMethod(mode="scaledl"), tmp_path)
    with pytest.raises(ValueError, match="mode='scaledl'"):
        save_bundle(GraphMethod(mode="additive"), tmp_path)
    assert not (tmp_path / "scaledl").exists()


def test_register_copies_a_verified_bundle(bundle, tmp_path):
    target = register_bundle(bundle, tmp_path / "registry", "scaledl", metrics={"x": 1.0})
    assert target == tmp_path / "registry" / "scaledl" / "v2"
    assert (tmp_path / "registry" / "scaledl" / "latest").read_text().strip() == "v2"
    manifest = read_manifest(target)
    assert manifest["metrics"] == {"x": 1.0} and manifest["name"] == "scaledl"
    assert load_predictor(tmp_path / "registry" / "scaledl").version == "v2"
    with pytest.raises(ValueError, match="exists already"):
        register_bundle(bundle, tmp_path / "registry", "scaledl")
    (bundle / "gnn.pt").write_bytes(b"x")
    with pytest.raises(BundleError, match="gnn.pt: .*altered or truncated"):
        register_bundle(bundle, tmp_path / "other", "scaledl")


def calibration(sha=""):
    from scaledl.models.intervals import IntervalCalibration

    rng = np.random.default_rng(0)
    residuals = {t: {"in_domain": rng.normal(0, 0.1, 30)} for t in ("iteration", "epoch")}
    return IntervalCalibration(residuals, "scaledl", sha, "test")


def test_the_training_domain_travels_in_params(bundle):
    params = json.loads((bundle / "params.json").read_text())
    assert params["training_domain"]["precisions"] == ["fp32"]
    predictor = load_predictor(bundle)
    assert predictor.domain.families == ("bert", "t5", "vit")
    assert predictor.calibration is None


def test_register_stores_a_checksummed_calibration(bundle, tmp_path):
    target = register_bundle(bundle, tmp_path / "registry", "scaledl", calibration=calibration())
    manifest = read_manifest(target)
    assert manifest["files"]["calibration.json"] == sha256_file(target / "calibration.json")
    loaded = load_predictor(target).calibration
    assert loaded.sizes() == {"iteration": {"in_domain": 30}, "epoch": {"in_domain": 30}}
    # Registered again without one, the calibration is kept (copied and verified).
    again = register_bundle(target, tmp_path / "other", "scaledl")
    assert load_predictor(again).calibration.sizes() == loaded.sizes()
    text = (target / "calibration.json").read_text()
    (target / "calibration.json").write_text(text.replace("0.", "1.", 1))
    with pytest.raises(BundleError, match="calibration.json: checksum mismatch"):
        load_predictor(target)


def test_a_calibration_of_other_tables_is_refused(bundle, tmp_path):
    from scaledl.models.intervals import CalibrationError

    edit_manifest(bundle, training_data={"sha256": "a" * 64})
    with pytest.raises(CalibrationError, match="computed on profile tables bbbb"):
        register_bundle(bundle, tmp_path / "registry", "scaledl", calibration=calibration("b" * 64))
    register_bundle(bundle, tmp_path / "registry", "scaledl", calibration=calibration("a" * 64))


def test_an_unlisted_calibration_is_never_read(bundle):
    (bundle / "calibration.json").write_text("not json")
    assert load_predictor(bundle).calibration is None


def test_a_malformed_listed_calibration_names_the_file(bundle):
    path = bundle / "calibration.json"
    path.write_text(json.dumps({"format": 1}))
    edit_manifest(bundle, files={**read_files(bundle), "calibration.json": sha256_file(path)})
    with pytest.raises(BundleError, match="calibration.json: field 'score': missing"):
        load_predictor(bundle)


def test_a_bundle_of_other_layer_types_is_incompatible(bundle):
    manifest = json.loads((bundle / "manifest.json").read_text())
    schema = manifest["feature_schema"]
    old = [t for t in schema["layer_types"] if t != "projection"]  # before the projection type
    edit_manifest(bundle, feature_schema={**schema, "layer_types": old})
    with pytest.raises(IncompatibleBundleError, match="feature_schema.layer_types.*retrain"):
        load_predictor(bundle)


def test_the_roofline_band_travels_in_params(bundle):
    from scaledl.models.roofline import RooflineBand

    params = json.loads((bundle / "params.json").read_text())
    band = RooflineBand.from_dict(params["layerwise_band"])
    assert set(band.directions) == {"forward", "backward"}
    method, _ = load_method(bundle)
    assert method.layerwise_.band_ == band
