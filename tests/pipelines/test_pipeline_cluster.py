"""The cluster deployments (``deploy/``) load: instance configs, run tags, Slurm scripts.

Dagster's own instance schema validates both ``dagster.yaml`` files here; the Kubernetes run
launcher's own config and the ``dagster-k8s/config`` tag are checked against dagster-k8s's
schema when it is installed (the ``cluster`` extra), and otherwise against its field names,
recorded below from dagster-k8s 0.29 (``DagsterK8sJobConfig.config_type_run_launcher`` and
``USER_DEFINED_K8S_CONFIG_SCHEMA``).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dagster._core.errors import DagsterInvalidConfigError
from dagster._core.instance.config import dagster_instance_config

from pipelines.defs.jobs import SHARD_RUN_TAGS_ENV, shard_run_tags
from scaledl.profiling.shards import DEFAULT_SHARDS, parse_shard_key

REPO = Path(__file__).resolve().parents[2]
K8S, SLURM = REPO / "deploy" / "k8s", REPO / "deploy" / "slurm"
PG_ENV = {f"DAGSTER_PG_{k}": "x" for k in ("USERNAME", "PASSWORD", "HOST", "DB")}

K8S_RUN_LAUNCHER_FIELDS = {
    "job_image", "image_pull_policy", "image_pull_secrets", "service_account_name",
    "env_config_maps", "env_secrets", "env_vars", "volume_mounts", "volumes", "labels",
    "resources", "scheduler_name", "security_context", "instance_config_map",
    "postgres_password_secret", "dagster_home", "load_incluster_config", "kubeconfig_file",
    "fail_pod_on_run_failure", "run_k8s_config", "job_namespace",
    "only_allow_user_defined_k8s_config_fields", "only_allow_user_defined_env_vars",
}  # fmt: skip
RUN_K8S_CONFIG_FIELDS = {
    "container_config", "pod_template_spec_metadata", "pod_spec_config", "job_config",
    "job_metadata", "job_spec_config",
}  # fmt: skip
K8S_CONFIG_TAG_FIELDS = RUN_K8S_CONFIG_FIELDS | {
    "deployment_metadata", "service_metadata", "merge_behavior",
}  # fmt: skip


@pytest.fixture
def pg_env(monkeypatch):
    for name, value in PG_ENV.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("folder", [K8S, SLURM])
def test_instance_configs_pass_dagster_s_schema(folder, pg_env):
    config, _ = dagster_instance_config(str(folder))
    assert "postgres" in config["storage"]  # one instance shared by every node
    limits = config["concurrency"]["runs"]["tag_concurrency_limits"]
    assert any(limit["key"] == "scaledl/profiling" for limit in limits)
    assert config["concurrency"]["pools"]["default_limit"] >= 1


def test_dagster_s_schema_check_is_real(tmp_path, pg_env):
    """A misspelt key in a deployment's instance config is refused (the check above can fail)."""
    config = yaml.safe_load((K8S / "dagster.yaml").read_text())
    config["concurrency"]["runz"] = config["concurrency"].pop("runs")
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(DagsterInvalidConfigError):
        dagster_instance_config(str(tmp_path))


def test_k8s_run_launcher_config_has_dagster_k8s_fields():
    launcher = yaml.safe_load((K8S / "dagster.yaml").read_text())["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster_k8s", "K8sRunLauncher")
    config = launcher["config"]
    assert set(config) <= K8S_RUN_LAUNCHER_FIELDS, set(config) - K8S_RUN_LAUNCHER_FIELDS
    assert config["instance_config_map"]  # the one required field
    assert set(config["run_k8s_config"]) <= RUN_K8S_CONFIG_FIELDS
    env = dict(v.split("=", 1) for v in config["env_vars"])
    assert env["SCALEDL_SHARD_DIRECTORIES"] == "1"
    assert int(env["SCALEDL_PROFILING_SHARDS"]) >= 1
    assert env[SHARD_RUN_TAGS_ENV].endswith("deploy/k8s/shard_run_tags.yaml")


def test_k8s_run_launcher_config_validates_with_dagster_k8s():
    dagster_k8s = pytest.importorskip("dagster_k8s", reason="the cluster extra is not installed")
    from dagster._config import validate_config

    config = yaml.safe_load((K8S / "dagster.yaml").read_text())["run_launcher"]["config"]
    result = validate_config(dagster_k8s.K8sRunLauncher.config_type(), config)
    assert result.success, result.errors


def test_shard_pods_ask_for_a_whole_gpu_node():
    tags = shard_run_tags({SHARD_RUN_TAGS_ENV: str(K8S / "shard_run_tags.yaml")})
    k8s = tags["dagster-k8s/config"]
    assert set(k8s) <= K8S_CONFIG_TAG_FIELDS
    resources = k8s["container_config"]["resources"]
    gpus = resources["limits"]["nvidia.com/gpu"]
    assert isinstance(gpus, int) and gpus >= 1
    assert resources["requests"]["nvidia.com/gpu"] == gpus  # a GPU is never shared


def test_shard_run_tags_reach_the_profile_design_job():
    """The definitions loaded as a pod loads them carry the tag on the shard job only."""
    code = (
        "import json; from pipelines.definitions import defs; d = defs(); print(json.dumps("
        "[d.resolve_job_def(j).tags for j in ('profile_design', 'scaledl_pipeline')]))"
    )
    env = {**os.environ, SHARD_RUN_TAGS_ENV: str(K8S / "shard_run_tags.yaml")}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    shard_tags, pipeline_tags = json.loads(out.stdout.strip().splitlines()[-1])
    assert shard_tags["scaledl/profiling"] == "true"
    k8s = shard_tags["dagster-k8s/config"]
    k8s = json.loads(k8s) if isinstance(k8s, str) else k8s
    assert k8s["container_config"]["resources"]["limits"]["nvidia.com/gpu"] >= 1
    assert "dagster-k8s/config" not in pipeline_tags


def test_k8s_config_tag_validates_with_dagster_k8s():
    job = pytest.importorskip("dagster_k8s.job", reason="the cluster extra is not installed")

    tags = shard_run_tags({SHARD_RUN_TAGS_ENV: str(K8S / "shard_run_tags.yaml")})
    config = job.get_user_defined_k8s_config(
        {"dagster-k8s/config": json.dumps(tags["dagster-k8s/config"])}
    )
    assert config.container_config["resources"]["limits"]["nvidia.com/gpu"] >= 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("- a\n- b\n", "mapping of tag names"),
        ("gpus: 8\n", "not a string or mapping"),
        ("scaledl/profiling: 'false'\n", "kept as is"),
        ("a: [\n", "unreadable run tags"),
    ],
)
def test_bad_shard_run_tags_name_the_file(tmp_path, content, message):
    path = tmp_path / "tags.yaml"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as info:
        shard_run_tags({SHARD_RUN_TAGS_ENV: str(path)})
    assert str(path) in str(info.value)
    assert shard_run_tags({}) == {}


def _sbatch_options(script: Path) -> dict[str, str]:
    options = {}
    for line in script.read_text().splitlines():
        if line.startswith("#SBATCH "):
            key, _, value = line.removeprefix("#SBATCH ").partition("=")
            options[key] = value
    return options


@pytest.mark.parametrize("script", sorted(SLURM.glob("*.sbatch")), ids=lambda p: p.name)
def test_slurm_scripts_parse(script):
    subprocess.run(["bash", "-n", str(script)], check=True)
    options = _sbatch_options(script)
    assert options["--nodes"] and options["--job-name"].startswith("scaledl")
    if "profile" in script.name:
        assert "--exclusive" in options  # no other job's load on a profiling node


def test_slurm_array_task_runs_its_shard_as_a_dagster_run(tmp_path):
    """An array task runs profile_design for partition <task>-of-<N> (a fake dagster records)."""
    options = _sbatch_options(SLURM / "profile_design.sbatch")
    first, last = map(int, options["--array"].split("%")[0].split("-"))
    assert (first, last + 1) == (0, DEFAULT_SHARDS)
    repo = tmp_path / "repo"
    (repo / ".venv" / "bin").mkdir(parents=True)
    fake = repo / ".venv" / "bin" / "dagster"
    fake.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$CALLS"\n')
    fake.chmod(0o755)
    env = {**os.environ, "SCALEDL_REPO": str(repo), "DAGSTER_HOME": str(tmp_path),
           "SCALEDL_DATA_DIR": str(tmp_path / "data"), "SLURM_ARRAY_TASK_ID": "2",
           "SLURM_JOB_ID": "77", "CALLS": str(tmp_path / "calls")}  # fmt: skip
    env.pop("SCALEDL_PROFILING_SHARDS", None)
    subprocess.run(["bash", str(SLURM / "profile_design.sbatch")], env=env, check=True)
    args = (tmp_path / "calls").read_text().splitlines()
    assert args[:5] == ["job", "execute", "-m", "pipelines.definitions", "-j"]
    assert args[5] == "profile_design" and args[6] == "--tags"
    tags = json.loads(args[7])
    assert parse_shard_key(tags["dagster/partition"]) == (2, DEFAULT_SHARDS)
