import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from scaledl.cli import app

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scaledl_fixtures import profiled, registry_root  # noqa: E402, F401  (session fixtures)

pytestmark = pytest.mark.slow
runner = CliRunner()
INLINE = [
    "--family",
    "bert",
    "--set",
    "hidden_size=64",
    "--set",
    "num_layers=1",
    "--set",
    "num_heads=2",
    "--set",
    "intermediate_size=128",
    "--set",
    "vocab_size=100",
    "--set",
    "seq_len=16",
    "--set",
    "batch_size=2",
]
ROWS = [
    {
        "family": "bert",
        "hidden_size": 32,
        "num_layers": 1,
        "num_heads": 2,
        "intermediate_size": 64,
        "vocab_size": 100,
        "seq_len": 16,
        "batch_size": 2,
    },
    {
        "family": "vit",
        "hidden_size": 32,
        "num_layers": 1,
        "num_heads": 2,
        "intermediate_size": 64,
        "image_size": 32,
        "patch_size": 16,
        "batch_size": 4,
    },
]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_predict_from_csv(registry_root, tmp_path):  # noqa: F811
    csv = tmp_path / "workloads.csv"
    pd.DataFrame(ROWS).to_csv(csv, index=False)
    out = tmp_path / "pred.csv"
    result = invoke(
        "predict", "--predictor", registry_root / "scaledl", "--workloads", csv, "--out", out
    )
    assert result.exit_code == 0, result.output
    assert "iteration_s" in result.output and "epoch_s" in result.output
    written = pd.read_csv(out)
    assert list(written["family"]) == ["bert", "vit"]
    assert (written["iteration_s"] > 0).all()
    assert set(written["predictor_version"]) == {"v2"}


def test_predict_from_yaml_with_detail(registry_root, tmp_path):  # noqa: F811
    import yaml

    path = tmp_path / "workloads.yaml"
    path.write_text(yaml.safe_dump({"workloads": ROWS[:1]}))
    result = invoke(
        "predict", "--predictor", registry_root / "scaledl" / "v1", "--workloads", path, "--detail"
    )
    assert result.exit_code == 0, result.output
    assert "iteration_s" in result.output and "layer_type" in result.output
    assert "attention" in result.output


def test_predict_inline(registry_root):  # noqa: F811
    result = invoke("predict", "--predictor", registry_root / "scaledl", *INLINE)
    assert result.exit_code == 0, result.output
    header, row = result.stdout.strip().splitlines()[:2]
    assert "iteration_s" in header.split()
    values = dict(zip(header.split(), row.split(), strict=True))
    assert values["family"] == "bert" and float(values["iteration_s"]) > 0


def test_bad_file_suffix_exits_2_naming_the_file(registry_root, tmp_path):  # noqa: F811
    path = tmp_path / "workloads.txt"
    path.write_text("family,batch_size\nbert,2\n")
    result = invoke("predict", "--predictor", registry_root / "scaledl", "--workloads", path)
    assert result.exit_code == 2
    assert str(path) in result.output and "'.txt'" in result.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--set", "hidden_size=64"], "--family"),
        (["--family", "bert", "--set", "hidden_size"], "field=value"),
        (
            [
                "--family",
                "bert",
                "--set",
                "hidden_size=63",
                "--set",
                "num_layers=1",
                "--set",
                "num_heads=2",
                "--set",
                "intermediate_size=8",
                "--set",
                "seq_len=4",
                "--set",
                "batch_size=1",
            ],
            "num_heads=2 must divide hidden_size=63",
        ),
    ],
)
def test_bad_inline_input_exits_2(registry_root, args, expected):  # noqa: F811
    result = invoke("predict", "--predictor", registry_root / "scaledl", *args)
    assert result.exit_code == 2, result.output
    assert expected in result.output


def test_bad_predictor_path_exits_2(tmp_path):
    result = invoke("predict", "--predictor", tmp_path / "none", *INLINE)
    assert result.exit_code == 2
    assert str(tmp_path / "none") in result.output


def test_list_predictors(registry_root, tmp_path):  # noqa: F811
    empty = invoke("list-predictors", "--registry", tmp_path)
    assert empty.exit_code == 0
    assert "no predictor" in empty.output and str(tmp_path) in empty.output
    listed = invoke("list-predictors", "--registry", registry_root)
    assert listed.exit_code == 0
    lines = listed.output.strip().splitlines()
    assert "version" in lines[0] and "latest" in lines[0]
    assert any(" v1 " in f" {line} " and "False" in line for line in lines[1:])
    assert any(" v2 " in f" {line} " and "True" in line for line in lines[1:])
