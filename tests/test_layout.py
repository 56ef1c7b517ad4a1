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
