"""End-to-end: every asset of the pipeline materialised in-process on the ``smoke`` preset."""

from pathlib import Path

import dagster as dg
import pytest

from pipelines.defs.assets import ALL_ASSETS
from pipelines.defs.assets.profiling import design_workloads
from pipelines.defs.checks import ALL_CHECKS
from pipelines.defs.config import ScaledlSettings
from pipelines.defs.resources import (
    DvcResource,
    LocalPredictorStore,
    LocalTorchrunLauncher,
    read_dvc_file,
)


def _resources(repo: Path, dvc_exe: Path) -> dict:
    return {
        "settings": ScaledlSettings(preset="smoke", data_dir=str(repo / "data")),
        "launcher": LocalTorchrunLauncher(),
        "predictor_store": LocalPredictorStore(),
        "dvc": DvcResource(dvc_executable=str(dvc_exe), repo_root=str(repo)),
    }


@pytest.mark.slow
def test_smoke_pipeline_end_to_end(dvc_repo, dvc_exe, tmp_path, run_cmd):
    from scaledl.registry import load_predictor

    repo, remote = dvc_repo
    data = repo / "data"
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [*ALL_ASSETS, *ALL_CHECKS], resources=_resources(repo, dvc_exe), instance=instance
        )
        assert result.success
        for evaluation in result.get_asset_check_evaluations():
            if evaluation.severity == dg.AssetCheckSeverity.ERROR:
                assert evaluation.passed, evaluation.check_name

        bundle = result.output_for_node("predictor_bundle")
        assert bundle["registered"]
        assert Path(bundle["path"]).is_dir()
        assert Path(bundle["path"]).is_relative_to(data / "predictors")
        assert (data / "reports" / "metrics.json").is_file()
        assert (data / "reports" / "report.html").is_file()
        assert (data / "reports" / "validation" / "index.html").is_file()

        design = result.output_for_node("workload_design")
        predictor = load_predictor(Path(bundle["latest"]))
        predictions = predictor.predict(design_workloads(design)[:3])
        assert len(predictions) == 3
        assert (predictions["iteration_s"] > 0).all()

        version = result.output_for_node("data_version")
        assert version["md5"] == read_dvc_file(repo / "data.dvc")["md5"]

        # A second run of the profiling stage reuses every complete (workload, repeat) part (a
        # part the interference guard flagged, or a failed one, is measured again).
        again = dg.materialize(
            [*ALL_ASSETS],
            selection=["profiling_runs"],
            resources=_resources(repo, dvc_exe),
            instance=instance,
        )
        first = result.output_for_node("profiling_runs")
        runs = again.output_for_node("profiling_runs")
        assert runs["reused"] == first["complete_parts"]
        assert runs["requested"] == first["requested"]
        assert runs["profiled"] <= first["requested"] - first["complete_parts"]

        # A consumer: clone the repository, pull the data version from the same remote, load
        # the predictor from the clone and predict, without profiling or training anything.
        run_cmd("git", "add", "-A", cwd=repo)
        run_cmd("git", "commit", "-qm", "data version", cwd=repo)
        clone = tmp_path / "consumer"
        run_cmd("git", "clone", "-q", repo, clone, cwd=tmp_path)
        run_cmd(dvc_exe, "remote", "add", "-f", "-d", "local", remote, cwd=clone)
        run_cmd(dvc_exe, "pull", "-q", cwd=clone)
        relative = Path(bundle["latest"]).relative_to(repo)
        pulled = load_predictor(clone / relative)
        assert pulled.version == predictor.version
        again = pulled.predict(design_workloads(design)[:3])
        assert again["iteration_s"].tolist() == predictions["iteration_s"].tolist()
