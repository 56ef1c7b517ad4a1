import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from pipelines.definitions import defs as load_defs
from pipelines.defs.config import DEFAULT_DATA_DIR, ScaledlSettings, settings_from_env
from pipelines.defs.executor import stop_aware_in_process_executor
from pipelines.defs.resources import DvcResource, LocalPredictorStore, LocalTorchrunLauncher

REPO_ROOT = Path(__file__).resolve().parents[2]
defs = load_defs()

EXPECTED_ASSETS = {
    "search_space",
    "workload_design",
    "profiling_shard",
    "profiling_runs",
    "validated_profiles",
    "imported_profiles",
    "layerwise_models",
    "runtime_gnn",
    "evaluation_report",
    "predictor_bundle",
    "gpu_predictor",
    "data_version",
    "published_runs_evaluation",
}


def test_definitions_are_loadable():
    dg.Definitions.validate_loadable(defs)
    # Dagster's in-process executor whose wait for a pool slot a stop signal ends
    # (tests/pipelines/test_backfill.py).
    assert defs.executor is stop_aware_in_process_executor


@pytest.mark.slow
def test_bare_dagster_commands_find_the_code_location(tmp_path):
    """`dagster definitions validate` with no target works in the root ([tool.dg])."""
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    dagster = Path(sys.executable).parent / "dagster"
    run = subprocess.run(
        [str(dagster), "definitions", "validate"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Validation successful for code location scaledl" in run.stdout + run.stderr


def test_asset_graph_has_the_pipeline_stages_in_order():
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == EXPECTED_ASSETS
    parents = {
        key.to_user_string(): {p.to_user_string() for p in graph.get(key).parent_keys}
        for key in graph.get_all_asset_keys()
    }
    assert parents["workload_design"] == {"search_space"}
    assert parents["profiling_shard"] == {"search_space", "workload_design"}
    assert parents["profiling_runs"] == {"profiling_shard"}
    assert parents["validated_profiles"] == {"profiling_runs"}
    assert parents["layerwise_models"] == {"validated_profiles"}
    assert parents["runtime_gnn"] == {"validated_profiles", "layerwise_models"}
    assert parents["predictor_bundle"] == {"runtime_gnn", "evaluation_report"}
    assert parents["imported_profiles"] == {"search_space"}
    assert {"validated_profiles", "imported_profiles"} <= parents["evaluation_report"]
    assert "predictor_bundle" in parents["data_version"]
    assert parents["gpu_predictor"] == {"imported_profiles", "evaluation_report"}
    assert "gpu_predictor" in parents["data_version"]


def test_every_asset_has_a_group_and_a_description():
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.group_name != "default", key
        assert node.description, key


def test_blocking_checks_guard_profiles_and_bundle():
    graph = defs.resolve_asset_graph()
    blocking = {
        (k.asset_key.to_user_string(), k.name)
        for k in graph.asset_check_keys
        if graph.get_check_spec(k).blocking
    }
    assert ("profiling_runs", "profiling_runs_succeeded") in blocking
    assert ("validated_profiles", "validated_profiles_usable") in blocking
    assert ("predictor_bundle", "predictor_bundle_predicts") in blocking


def _job_assets(name: str) -> set[str]:
    job = defs.resolve_job_def(name)
    return {k.to_user_string() for k in job.asset_layer.executable_asset_keys}


def test_jobs_and_stopped_weekly_schedule():
    pipeline = defs.resolve_job_def("scaledl_pipeline")
    retrain = defs.resolve_job_def("retrain_job")
    shards = defs.resolve_job_def("profile_design")
    for job in (pipeline, retrain, shards):
        assert job.tags["scaledl/profiling"] == "true"
    # make run's three jobs cover every asset once, in order; only the shard job is partitioned.
    design, profile, rest = (
        _job_assets(n) for n in ("design_job", "profile_design", "scaledl_pipeline")
    )
    assert design == {"search_space", "workload_design"} and profile == {"profiling_shard"}
    # The published-runs evaluation reads committed inputs: in no job of make run.
    in_make_run = EXPECTED_ASSETS - {"published_runs_evaluation"}
    assert design | profile | rest == in_make_run and not (design | profile) & rest
    assert shards.partitions_def is not None and pipeline.partitions_def is None
    assert _job_assets("retrain_job") == in_make_run - {"profiling_shard"}
    schedule = defs.resolve_schedule_def("weekly_retrain")
    assert schedule.job_name == "retrain_job"
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert schedule.cron_schedule == "0 3 * * 1"


def test_retrain_job_augments_and_gates_registration():
    ops = defs.resolve_job_def("retrain_job").run_config["ops"]
    assert ops["workload_design"]["config"]["augment_k"] > 0
    assert ops["predictor_bundle"]["config"]["policy"] == "if_not_worse"
    # One run: the augmentation's workloads are profiled in profiling_runs, not in shards.
    assert ops["profiling_runs"]["config"]["profile_missing"] is True
    assert "paired" in defs.resolve_job_def("retrain_job").description
    assert defs.resolve_job_def("scaledl_pipeline").run_config is None


def test_default_resources():
    resources = defs.resources
    assert isinstance(resources["launcher"], LocalTorchrunLauncher)
    assert isinstance(resources["predictor_store"], LocalPredictorStore)
    assert isinstance(resources["dvc"], DvcResource)
    assert isinstance(resources["settings"], ScaledlSettings)


def test_settings_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path):
    for name in ("SCALEDL_PRESET", "SCALEDL_DATA_DIR", "SCALEDL_FORCE_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    plain = settings_from_env()
    assert plain.preset == "quick"
    assert plain.root == DEFAULT_DATA_DIR
    assert plain.force_profile is False

    monkeypatch.setenv("SCALEDL_PRESET", "smoke")
    monkeypatch.setenv("SCALEDL_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("SCALEDL_FORCE_PROFILE", "1")
    with dg.build_resources({"settings": settings_from_env()}) as resources:
        settings = resources.settings
    assert settings.preset == "smoke"
    assert settings.root == tmp_path.resolve()
    assert settings.force_profile is True
    assert settings.layout.predictors_dir == tmp_path.resolve() / "predictors"


def test_profiling_failure_reasons_say_why_and_what_to_do(tmp_path):
    from pipelines.defs.checks import profiling_failure_reasons

    assert profiling_failure_reasons(10, 9, 1, 0, 0.5, tmp_path) == []
    (busy,) = profiling_failure_reasons(10, 0, 10, 0, 0.5, tmp_path)
    assert "no workload of 10 was measured undisturbed" in busy
    assert "10 disturbed by other processes" in busy and "run again when nothing else" in busy
    (failing,) = profiling_failure_reasons(10, 4, 0, 6, 0.5, tmp_path)
    assert "6 of 10 workloads failed (60% > max_failed_fraction 50%)" in failing
    assert str(tmp_path) in failing
    assert len(profiling_failure_reasons(2, 0, 0, 2, 0.5, tmp_path)) == 2


def test_unmeasured_shards_block_the_profile_naming_them(tmp_path):
    from types import SimpleNamespace

    from pipelines.defs.assets.profiling import unmeasured_by_shard
    from pipelines.defs.checks import profiling_failure_reasons
    from scaledl.profiling.shards import shard_of

    design = [SimpleNamespace(workload_id=f"{i:016x}") for i in range(40)]
    in_shard = {k: [w.workload_id for w in design if shard_of(w.workload_id, 4) == k]
                for k in range(4)}  # fmt: skip
    measured = set(in_shard[0]) | set(in_shard[2])
    missing = unmeasured_by_shard(design, measured, 4)
    assert missing == {"1-of-4": in_shard[1], "3-of-4": in_shard[3]}
    assert unmeasured_by_shard(design, {w.workload_id for w in design}, 4) == {}
    (reason,) = profiling_failure_reasons(40, 20, 0, 0, 0.5, tmp_path, missing)
    count = len(in_shard[1]) + len(in_shard[3])
    assert f"{count} of 40 workloads were never measured, in shards 1-of-4, 3-of-4" in reason
    assert "profile_design backfill" in reason
