"""Session data shared by the core-module tests: one real tiny profile and one tiny bundle.

A pytest plugin (``pytest_plugins`` of the root conftest): the profile is needed by
``tests/profiling``, ``tests/models``, ``tests/registry`` and ``tests/test_cli*.py``; a session
fixture runs only when a test requests it, and the expensive work is memoised per pytest base
temp directory, so it runs once per session whichever directory asks first.

The profile (:data:`SETTINGS`: one launch per world size, labels of at least 8 steps; the
interference guard measures but never retries, so a busy test machine cannot make the session
slow or flaky: ``tests/profiling/test_interference.py`` tests the guard with a busy loop of its
own):

* world size 1, one torchrun launch until the slow workload, then a relaunch: tiny BERT, ViT and
  T5 at two sizes each (6 x ``ok``) and, in the middle, ``slow`` (a 1M-step epoch) that the
  launcher kills after ``TIMEOUT_S`` seconds (``timeout``);
* world size 2, one launch: tiny BERT (``ok``), an ``hf`` workload whose config names an
  activation transformers does not know (the spec checks its config when parsed, the model
  fails to build inside the worker: ``failed``) and tiny ViT (``ok``, after the failure).

``layout_calibration``: the layout calibration (:mod:`scaledl.parallel.calibration`) fitted on
a slice of the committed layout dataset (``datasets/layouts-cpu``: the BERT workloads of batch
4, one to three per layout kind; about 10 s), not saved anywhere; :func:`save_beside` saves it
beside a bundle as that bundle's device.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from tiny_specs import GPT2, tiny

from scaledl.profiling.launch import ProfileSummary, profile_workloads
from scaledl.profiling.settings import ProfileSettings
from scaledl.profiling.store import consolidate
from scaledl.workloads.spec import Workload

# A tiny workload takes < 2 s in the worker (first one of a launch included) on an idle host, and
# up to about 3x that while make test's other xdist worker keeps a core busy; the slow one runs
# for hours. The timer starts when the worker names the workload (marker file), after imports,
# so 20 s is three times a tiny workload's time on a busy host; the slow one costs the session 20 s.
TIMEOUT_S = 20.0
SETTINGS = ProfileSettings(
    warmup_steps=1,
    instrumented_steps=2,
    layer_stride=2,
    label_min_steps=8,
    label_budget_s=0.5,
    timeout_s=TIMEOUT_S,
    max_retries=0,
    drift_tolerance=100.0,
    memory_drift_tolerance=100.0,
    allreduce_drift_tolerance=100.0,
    max_foreign_load_cores=64.0,
    quiet_wait_s=0.0,
    probe_repeats=2,
)


@dataclass(frozen=True)
class Profiled:
    """The shared profile: its directory, summary, consolidated tables and workloads by name."""

    out_dir: Path
    summary: ProfileSummary
    tables: dict[str, pd.DataFrame]
    workloads: dict[str, Workload]

    def ok_names(self) -> list[str]:
        return [n for n in self.workloads if n not in ("slow", "hf_bad")]

    def run(self, name: str) -> pd.Series:
        runs = self.tables["runs"]
        rows = runs[runs["workload_id"] == self.workloads[name].workload_id]
        assert len(rows) == 1, f"{name}: {len(rows)} run rows"
        return rows.iloc[0]


@functools.cache
def _profile(base: Path) -> Profiled:
    root = base / "shared-profile"
    root.mkdir()
    bad = root / "bad_hf.json"
    bad.write_text(json.dumps({**GPT2, "activation_function": "no_such_activation"}))
    workloads = {
        "bert_a": tiny("bert"),
        "vit_a": tiny("vit"),
        "t5_a": tiny("t5"),
        "slow": tiny("bert", dataset_size=2_000_000),
        "bert_b": tiny("bert", seq_len=32, batch_size=4),
        "vit_b": tiny("vit", image_size=64, batch_size=4),
        "t5_b": tiny("t5", seq_len=32, batch_size=4),
        "bert_ws2": tiny("bert", world_size=2),
        "hf_bad": tiny("hf", bad, world_size=2),
        "vit_ws2": tiny("vit", world_size=2),
    }
    out = root / "profiles"
    summary = profile_workloads(list(workloads.values()), out, SETTINGS, progress=False)
    return Profiled(out, summary, consolidate(out), workloads)


@functools.cache
def _bundle(base: Path) -> Path:
    from scaledl.models.data import load_profile_data
    from scaledl.models.gnn_training import GNNTrainConfig
    from scaledl.models.train import TrainConfig, train_predictor
    from scaledl.registry import save_bundle

    profiled = _profile(base)
    data = load_profile_data(profiled.out_dir)
    gnn = GNNTrainConfig(hidden_channels=16, heads=2, max_epochs=30, patience=10)
    method = train_predictor(data, TrainConfig(gnn=gnn, folds=3))
    root = base / "shared-registry"
    info = {"workloads": len(data.ids)}
    save_bundle(method, root, "scaledl", training_data=info, version="v1")
    save_bundle(method, root, "scaledl", training_data=info, version="v2")
    _legacy_bundle(method, root / "scaledl" / "v2", base / "legacy-bundle")
    return root


def _legacy_bundle(method, source: Path, target: Path) -> None:
    """``source`` as a bundle written before ``layerwise.npz``: its regressors in skops."""
    import json
    import shutil

    import skops.io as sio

    from scaledl.registry.bundle import sha256_file

    shutil.copytree(source, target)
    (target / "layerwise.npz").unlink()
    sio.dump(method.layerwise_.models_, target / "layerwise.skops")
    manifest = json.loads((target / "manifest.json").read_text())
    for key in ("files", "file_sizes"):
        del manifest[key]["layerwise.npz"]
    manifest["files"]["layerwise.skops"] = sha256_file(target / "layerwise.skops")
    manifest["file_sizes"]["layerwise.skops"] = (target / "layerwise.skops").stat().st_size
    (target / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture(scope="session")
def profiled(tmp_path_factory) -> Profiled:
    """The shared real profile (three torchrun launches, about a minute on 2 cores)."""
    return _profile(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def registry_root(tmp_path_factory) -> Path:
    """A registry root holding ``scaledl/v1`` and ``scaledl/v2`` (latest) of one tiny predictor.

    Read-only for tests: copy a bundle before altering it.
    """
    return _bundle(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def legacy_bundle(registry_root) -> Path:
    """The tiny predictor's ``v2`` as written before ``layerwise.npz`` (``layerwise.skops``).

    Read-only for tests: copy it before altering it.
    """
    return registry_root.parent / "legacy-bundle"


#: The committed layout dataset (issue 26).
LAYOUT_DATASET = Path(__file__).resolve().parents[1] / "datasets" / "layouts-cpu" / "validated"


def layout_slice(out: Path, family: str = "bert", batch_size: int = 4) -> Path:
    """The tables of :data:`LAYOUT_DATASET` restricted to one model's workloads, in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    w = pd.read_parquet(LAYOUT_DATASET / "workloads.parquet")
    keep = set(w.loc[(w["family"] == family) & (w["batch_size"] == batch_size), "workload_id"])
    for path in LAYOUT_DATASET.glob("*.parquet"):
        table = pd.read_parquet(path)
        if "workload_id" in table:
            table = table[table["workload_id"].isin(keep)]
        table.to_parquet(out / path.name)
    return out


@functools.cache
def _layout_calibration(base: Path):
    from scaledl.parallel.calibration import fit_layout_calibration

    return fit_layout_calibration(layout_slice(base / "layout-slice"))


@pytest.fixture(scope="session")
def layout_calibration(tmp_path_factory):
    """A layout calibration fitted on a slice of the committed layout dataset (unsaved)."""
    return _layout_calibration(tmp_path_factory.getbasetemp())


def save_beside(calibration, bundle: Path) -> Path:
    """Save ``calibration`` beside ``bundle`` as calibrating the bundle's (first) device.

    The committed profiles come from one host; the tiny bundle is trained on the host running
    the tests, so the calibration is relabelled to its device.
    """
    from dataclasses import replace

    from scaledl.prediction.predictor import load_predictor
    from scaledl.registry.layouts import save_layout_calibration

    device = load_predictor(bundle).devices[0]
    return save_layout_calibration(replace(calibration, device_name=device), bundle)
