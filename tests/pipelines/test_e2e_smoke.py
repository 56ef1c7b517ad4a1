"""End-to-end: every asset of the pipeline materialised in-process on the ``smoke`` preset.

As ``make run`` does: the design, then every shard of ``profiling_shard`` one after another,
then the rest (consolidation to data version); with the suite's shard count (``N_SHARDS``: one,
``tests/conftest.py``), not ``make run``'s four.

The preset's interference guard is relaxed (no retry, any foreign load accepted): this test
checks the pipeline's plumbing and runs in ``make test``'s parallel phase beside other tests;
the guard is tested on its own, on an idle host, in ``tests/profiling/test_interference.py``.
"""

from pathlib import Path

import dagster as dg
import pytest
import yaml
from smoke_presets import smoke_without_guard

from pipelines.definitions import defs as load_defs
from pipelines.defs.assets.profiling import N_SHARDS, design_workloads
from pipelines.defs.config import ScaledlSettings
from pipelines.defs.jobs import DESIGN_ASSETS, PUBLISHED_RUNS_ASSETS, SHARD_ASSETS
from pipelines.defs.resources import (
    DvcResource,
    LocalPredictorStore,
    LocalTorchrunLauncher,
    read_dvc_file,
)
from scaledl.profiling.shards import shard_keys

RETRAIN = {"ops": {"predictor_bundle": {"config": {"policy": "if_not_worse"}}}}


def _preset(directory: Path) -> Path:
    """The guard-relaxed smoke preset evaluated with one GNN seed and at most 20 epochs.

    The test checks that the evaluation's metrics reach the report, the bundle and the data
    version, not their values: seeds and epochs are evaluated in tests/evaluation.
    """
    path = smoke_without_guard(directory)
    preset = yaml.safe_load(path.read_text())
    preset["evaluation"].update(seeds=1, gnn_max_epochs=20, gnn_patience=5)
    path.write_text(yaml.safe_dump(preset))
    return path


def _resources(repo: Path, dvc_exe: Path) -> dict:
    return {
        # Half the ten smoke workloads held out, so that retraining has some to compare on.
        "settings": ScaledlSettings(
            preset=str(_preset(repo.parent)),
            data_dir=str(repo / "data"),
            holdout_fraction=0.5,
        ),
        "launcher": LocalTorchrunLauncher(),
        "predictor_store": LocalPredictorStore(),
        "dvc": DvcResource(dvc_executable=str(dvc_exe), repo_root=str(repo)),
    }


def _metadata(result: dg.ExecuteInProcessResult, node: str, asset: str | None = None) -> dict:
    """The metadata values of the materialisation of ``asset`` (default: ``node``)."""
    for event in result.asset_materializations_for_node(node):
        if event.asset_key.to_user_string() == (asset or node):
            return {k: v.value for k, v in event.metadata.items()}
    raise AssertionError(f"no materialisation of {asset or node} in {node}")


def _make_run(assets: list, resources: dict, instance) -> list[dg.ExecuteInProcessResult]:
    """``make run``'s three steps: the design, each shard in turn, the rest of the pipeline."""
    design = dg.materialize(assets, selection=DESIGN_ASSETS, resources=resources,
                            instance=instance)  # fmt: skip
    shards = [
        dg.materialize(
            assets,
            selection=SHARD_ASSETS,
            partition_key=key,
            resources=resources,
            instance=instance,
        )  # fmt: skip
        for key in shard_keys(N_SHARDS)
    ]
    rest = dg.materialize(
        assets,
        # as scaledl_pipeline: the published-runs evaluation is in no job of make run
        selection=dg.AssetSelection.all() - DESIGN_ASSETS - SHARD_ASSETS - PUBLISHED_RUNS_ASSETS,
        resources=resources,
        instance=instance,
    )
    return [design, *shards, rest]


def _pickles(storage: Path) -> list[Path]:
    """Files under Dagster's storage that are Python pickles (protocol 2+ starts 0x80)."""
    return [p for p in storage.rglob("*") if p.is_file() and p.read_bytes()[:1] == b"\x80"]


@pytest.mark.slow
def test_smoke_pipeline_end_to_end(dvc_repo, dvc_exe, tmp_path, run_cmd):
    from scaledl.design import read_design
    from scaledl.evaluation.results import Metrics
    from scaledl.prediction.predictor import load_predictor
    from scaledl.registry import read_manifest

    repo, remote = dvc_repo
    data = repo / "data"
    definitions = load_defs()
    assets = [*definitions.assets, *definitions.asset_checks]
    home = tmp_path / "dagster_home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        runs = _make_run(assets, _resources(repo, dvc_exe), instance)
        result = runs[-1]
        for run in runs:
            assert run.success
            for evaluation in run.get_asset_check_evaluations():
                if evaluation.severity == dg.AssetCheckSeverity.ERROR:
                    assert evaluation.passed, evaluation.check_name
        shards = [_metadata(run, "profiling_shard") for run in runs[1:-1]]
        assert [m["shard"] for m in shards] == shard_keys(N_SHARDS)

        # Nothing of the pipeline went through Dagster's storage: no pickled model or frame.
        assert not _pickles(home), _pickles(home)
        assert not [p for p in home.rglob("*") if p.name in ("runtime_gnn", "workload_design")]

        bundle = _metadata(result, "predictor_bundle")
        assert bundle["registered"] and bundle["policy"] == "always"
        assert "no registered version" in bundle["policy_verdict"]
        bundle_dir = Path(bundle["bundle_dir"])
        assert bundle_dir.is_relative_to(data / "predictors" / "scaledl")
        assert bundle_dir.name == _metadata(result, "trained_models", "runtime_gnn")["version"]
        metrics = Metrics.read(data / "reports" / "metrics.json")
        assert read_manifest(bundle_dir)["metrics"]["id_mre"] == metrics.mre("id")
        assert (data / "reports" / "report.html").is_file()
        assert (data / "reports" / "validation" / "index.html").is_file()

        design = read_design(data / "design" / "design.parquet")
        predictor = load_predictor(data / "predictors" / "scaledl")
        predictions = predictor.predict(design_workloads(design)[:3])
        assert len(predictions) == 3
        assert (predictions["iteration_s"] > 0).all()
        # The registered predictor never saw its hold-out.
        held_out = read_manifest(bundle_dir)["training_data"]["held_out"]
        assert len(predictor.training_workload_ids) + held_out == metrics.n_workloads

        version = _metadata(result, "data_version")
        assert version["md5"] == read_dvc_file(repo / "data.dvc")["md5"]
        assert version["predictor_version"] == bundle_dir.name

        # The consolidated tables hold every shard's parts; nothing is left unmeasured.
        first = _metadata(result, "profiling_runs")
        assert first["ok_total"] >= 1 and first["unmeasured"] == 0
        assert first["requested"] == sum(m["requested_parts"] for m in shards)
        assert first["complete_parts"] == sum(m["parts_kept"] for m in shards)

        # A second backfill of the shards reuses every complete (workload, repeat) part (a
        # part the interference guard flagged, or a failed one, is measured again).
        again = [
            _metadata(
                dg.materialize(assets, selection=SHARD_ASSETS, partition_key=key,
                               resources=_resources(repo, dvc_exe), instance=instance),
                "profiling_shard",
            )
            for key in shard_keys(N_SHARDS)
        ]  # fmt: skip
        assert sum(m["reused"] for m in again) == first["complete_parts"]
        assert sum(m["requested_parts"] for m in again) == first["requested"]
        assert sum(m["profiled_now"] for m in again) <= (
            first["requested"] - first["complete_parts"]
        )

        # Retraining under the weekly policy: the new candidate and the registered version are
        # compared on the held-out workloads, and the decision follows the paired verdict.
        retrain = dg.materialize(
            assets,
            selection=["layerwise_models", "runtime_gnn", "predictor_bundle"],
            resources=_resources(repo, dvc_exe),
            instance=instance,
            run_config=RETRAIN,
        )
        decision = _metadata(retrain, "predictor_bundle")
        assert decision["policy"] == "if_not_worse" and "held-out workloads" in decision["held_out"]
        if held_out >= 2:  # half of ten: unless validation quarantined disturbed workloads
            assert decision["held_out_workloads"] == held_out
            assert decision["registered"] == (decision["verdict"] != "worse")
            assert decision["mre_difference_ci_low"] <= decision["mre_difference"]
            assert decision["mre_difference"] <= decision["mre_difference_ci_high"]
            assert decision["candidate_held_out_mre"] > 0 and decision["current_held_out_mre"] > 0
        else:
            assert not decision["registered"] and "no paired comparison" in decision["decision"]
        latest = load_predictor(data / "predictors" / "scaledl").version
        assert latest == (
            decision["candidate_version"] if decision["registered"] else bundle_dir.name
        )
        assert not _pickles(home)

        # A consumer: clone the repository, pull the data version from the same remote, load
        # the predictor from the clone and predict, without profiling or training anything.
        run_cmd("git", "add", "-A", cwd=repo)
        run_cmd("git", "commit", "-qm", "data version", cwd=repo)
        clone = tmp_path / "consumer"
        run_cmd("git", "clone", "-q", repo, clone, cwd=tmp_path)
        run_cmd(dvc_exe, "remote", "add", "-f", "-d", "local", remote, cwd=clone)
        run_cmd(dvc_exe, "pull", "-q", cwd=clone)
        pulled = load_predictor(clone / "data" / "predictors" / "scaledl" / bundle_dir.name)
        assert pulled.version == predictor.version
        again = pulled.predict(design_workloads(design)[:3])
        assert again["iteration_s"].tolist() == predictions["iteration_s"].tolist()
