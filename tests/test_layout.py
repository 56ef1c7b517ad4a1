from pathlib import Path

from scaledl.layout import (
    CHECKOUT_EXTERNAL_DIR,
    DataLayout,
    ValidationOutputs,
    external_root,
    neusight_root,
    vidur_network_root,
)


def test_the_root_is_the_argument_else_the_environment_else_data(monkeypatch, tmp_path):
    monkeypatch.delenv("SCALEDL_DATA_DIR", raising=False)
    assert DataLayout.from_env().root == Path("data")
    monkeypatch.setenv("SCALEDL_DATA_DIR", str(tmp_path))
    assert DataLayout.from_env().root == tmp_path
    assert DataLayout.from_env().metrics_path == tmp_path / "reports" / "metrics.json"
    assert DataLayout.from_env(tmp_path / "other").root == tmp_path / "other"


def test_profiles_validate_beside_themselves(tmp_path):
    outputs = DataLayout(tmp_path).validation_outputs(tmp_path / "scratch" / "profiles")
    assert outputs == ValidationOutputs(
        validated=tmp_path / "scratch" / "validated",
        quarantine=tmp_path / "scratch" / "quarantine",
        report=tmp_path / "scratch" / "reports" / "validation",
    )


def test_an_import_validates_where_the_pipeline_and_evaluate_gpu_read_it(tmp_path):
    layout = DataLayout(tmp_path)
    outputs = layout.validation_outputs(layout.imported_dir("neusight"))
    assert outputs == ValidationOutputs(
        validated=tmp_path / "imported" / "validated" / "neusight",
        quarantine=tmp_path / "imported" / "quarantine" / "neusight",
        report=tmp_path / "reports" / "validation" / "imported" / "neusight",
    )
    assert layout.imported_validated_dir() == outputs.validated
    assert layout.imported_parallel_labels() == (
        tmp_path / "imported" / "neusight" / "parallel_labels.parquet"
    )


def test_external_data_comes_from_the_configured_root_else_the_checkout(monkeypatch, tmp_path):
    monkeypatch.delenv("SCALEDL_EXTERNAL_DIR", raising=False)
    assert external_root() == CHECKOUT_EXTERNAL_DIR
    assert (neusight_root() / "label").is_dir()
    assert sorted(vidur_network_root().glob("*/all_reduce.csv"))
    monkeypatch.setenv("SCALEDL_EXTERNAL_DIR", str(tmp_path))
    assert neusight_root() == tmp_path / "neusight"
    assert vidur_network_root() == tmp_path / "vidur" / "network"


def test_the_readme_gpu_commands_write_where_evaluate_gpu_reads(tmp_path, monkeypatch):
    """`scaledl validate data/imported/neusight`, then the defaults of `scaledl evaluate-gpu`."""
    from profile_tables import make_profiles, write_profiles
    from typer.testing import CliRunner

    from scaledl.cli import app

    monkeypatch.setenv("SCALEDL_DATA_DIR", str(tmp_path / "data"))
    layout = DataLayout.from_env()
    missing = CliRunner().invoke(app, ["evaluate-gpu"])
    assert missing.exit_code == 2
    assert f"{layout.imported_validated_dir()}: validated GPU profiles not found" in (
        missing.output.replace("\n", "")
    )
    write_profiles(layout.imported_dir("neusight"), make_profiles())
    result = CliRunner().invoke(app, ["validate", str(layout.imported_dir("neusight"))])
    assert result.exit_code == 0, result.output
    validated = layout.imported_validated_dir().resolve()
    assert sorted(p.name for p in validated.glob("*.parquet"))[:2] == [
        "allreduce_timings.parquet",
        "epochs.parquet",
    ]
    assert (layout.imported_report_dir().resolve() / "index.html").is_file()
    assert not (layout.root / "imported" / "validated" / "workloads.parquet").exists()
