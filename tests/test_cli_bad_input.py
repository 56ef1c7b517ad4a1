"""Bad input never passes silently (issue 28): NaN, empty and repeated values, separators, plans.

Each case is a file or option a new user would write; the CLI must exit 2 naming the file (or
option), the row, the field and the value, or give a correct answer.
"""

import json

import pandas as pd
import pytest
import yaml
from tiny_specs import tiny_spec
from typer.testing import CliRunner

import scaledl
from scaledl.cli import app
from scaledl.workloads.fields import WorkloadError

pytestmark = pytest.mark.slow
BERT = tiny_spec("bert")
INLINE = [x for k, v in BERT.items() if k != "family" for x in ("--set", f"{k}={v}")]


def inline_without(field: str) -> list[str]:
    """``--set`` options of :data:`BERT` without ``field``."""
    return [x for k, v in BERT.items() if k not in ("family", field) for x in ("--set", f"{k}={v}")]


def invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result, " ".join(result.output.split())  # one line: messages wrap at the width


def predict(registry_root, *args):
    return invoke("predict", "--predictor", registry_root / "scaledl", *args)


@pytest.mark.parametrize("field", ["world_size", "dataset_size"])
@pytest.mark.parametrize("value", ["nan", ".nan", "inf", ""])
def test_set_nan_inf_or_empty_is_an_error_not_a_default(registry_root, field, value):
    set_ = ("--set", f"{field}={value}")
    result, text = predict(registry_root, "--family", "bert", *inline_without(field), *set_)
    assert result.exit_code == 2, text
    assert f"--set: row 1: invalid workload: field '{field}'" in text


def test_set_the_same_field_twice_is_an_error(registry_root):
    result, text = predict(registry_root, "--family", "bert", *INLINE, "--set", "batch_size=64")
    assert result.exit_code == 2 and "field 'batch_size' given twice" in text


@pytest.mark.parametrize(
    ("line", "value"), [("world_size: .nan", "nan"), ("dataset_size:", "None")]
)
def test_yaml_nan_or_empty_value_is_an_error(registry_root, tmp_path, line, value):
    path = tmp_path / "w.yaml"
    field = line.split(":")[0]
    path.write_text(yaml.safe_dump([{k: v for k, v in BERT.items() if k != field}]) + f"  {line}\n")
    result, text = predict(registry_root, "--workloads", path)
    assert result.exit_code == 2, text
    assert f"{path}: row 1: invalid workload: field '{field}' (value {value})" in text


def test_yaml_key_given_twice_is_an_error_naming_both_lines(registry_root, tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("- family: bert\n  batch_size: 8\n  seq_len: 16\n  batch_size: 64\n")
    result, text = predict(registry_root, "--workloads", path)
    assert result.exit_code == 2
    assert (
        f"{path}: cannot read workloads" in text
        and "key 'batch_size' given twice (lines 2 and 4)" in text
    )


def test_python_dicts_and_dataframes_refuse_nan(registry_root):
    model = scaledl.load_predictor(registry_root / "scaledl")
    with pytest.raises(
        WorkloadError, match=r"row 1: .*field 'world_size' \(value nan\): not a finite"
    ):
        model.predict([{**BERT, "world_size": float("nan")}])
    with pytest.raises(
        WorkloadError, match=r"row 2: .*field 'dataset_size' \(value nan\): empty cell"
    ):
        model.predict(pd.DataFrame([BERT, {**BERT, "dataset_size": float("nan")}]))
    twice = pd.DataFrame([[*BERT.values(), 64]], columns=[*BERT, "batch_size"])
    with pytest.raises(WorkloadError, match=r"column\(s\) \['batch_size'\] given twice"):
        model.predict(twice)
    # Other families' empty cells of a mixed table are fields not given.
    mixed = pd.DataFrame([BERT, tiny_spec("vit")])
    assert model.predict(mixed)["family"].tolist() == ["bert", "vit"]


@pytest.mark.parametrize("sep", [";", "\t", "|"])
def test_csv_separator_is_sniffed(registry_root, tmp_path, sep):
    path = tmp_path / "w.csv"
    pd.DataFrame([BERT, {**BERT, "batch_size": 4}]).to_csv(path, sep=sep, index=False)
    result, text = predict(registry_root, "--workloads", path)
    assert result.exit_code == 0, text
    assert result.stdout.count("bert") == 2


def test_csv_column_given_twice_or_a_written_nan_is_an_error(registry_root, tmp_path):
    path = tmp_path / "w.csv"
    header = ",".join(BERT) + ",batch_size"
    path.write_text(header + "\n" + ",".join(str(v) for v in BERT.values()) + ",64\n")
    result, text = predict(registry_root, "--workloads", path)
    assert (
        result.exit_code == 2
        and "column(s) ['batch_size'] given twice" in text
        and str(path) in text
    )
    pd.DataFrame([{**BERT, "world_size": "nan"}]).to_csv(path, index=False)
    result, text = predict(registry_root, "--workloads", path)
    assert (
        result.exit_code == 2
        and f"{path}: row 1: invalid workload: field 'world_size' (value 'nan')" in text
    )


def test_profile_workload_json_key_given_twice_is_an_error():
    spec = json.dumps(BERT)[:-1] + ', "batch_size": 64}'
    result, text = invoke("profile", "--workload", spec)
    assert (
        result.exit_code == 2 and "--workload: invalid JSON: key 'batch_size' given twice" in text
    )


MODEL = [x for k, v in BERT.items() if k not in ("family", "batch_size", "dataset_size")
         for x in ("--set", f"{k}={v}")]  # fmt: skip


def plan(registry_root, *args, flags=()):
    base = {"--dataset-size": 256, "--epochs": 2, "--price-per-device-hour": 3,
            "--device-memory-gb": 1, "--world-sizes": "1,2", "--batch-sizes": "2,4"}  # fmt: skip
    given = [(k, v) for k, v in zip(args[::2], args[1::2], strict=True)]
    repeated = [(k, v) for k, v in given if k == "--layout-set"]  # a repeatable option
    options = [x for k, v in {**base, **dict(given)}.items() if k != "--layout-set"
               for x in (k, v)] + [x for pair in repeated for x in pair]  # fmt: skip
    return invoke("plan", "--predictor", registry_root / "scaledl", "--family", "bert", *MODEL,
                  "--coverage", 0, *options, *flags)  # fmt: skip


@pytest.mark.parametrize("option", ["--epochs", "--price-per-device-hour", "--deadline-h"])
def test_plan_refuses_infinite_numbers(registry_root, option):
    result, text = plan(registry_root, option, "inf")
    assert result.exit_code == 2, text
    assert "(value inf): must be a finite number > 0" in text and "Empty DataFrame" not in text


def test_plan_when_nothing_fits_says_what_a_rank_needs_and_has(registry_root):
    result, text = plan(registry_root, "--device-memory-gb", "0.000001")
    assert result.exit_code == 0, text
    assert "Empty DataFrame" not in text
    assert "no candidate fits in memory: the closest (batch 2 per rank) needs" in text
    assert "and has 1e-06 GB" in text and "even batch 1 needs" in text


def test_plan_questions_a_deadline_typed_in_seconds(registry_root):
    result, text = plan(registry_root, "--deadline-h", 43200)
    assert result.exit_code == 0, text
    assert "43200 s would be 12 h" in text


def test_plan_refuses_a_layout_set_without_layouts(registry_root):
    result, text = plan(registry_root, "--layout-set", "tp_sizes=1,2")
    assert result.exit_code == 2, text
    assert "--layout-set 'tp_sizes=1,2': needs --layouts" in text


def test_plan_refuses_a_search_past_its_limits_naming_the_count(registry_root):
    result, text = plan(registry_root, "--world-sizes", "1-4096", flags=["--layouts"])
    assert result.exit_code == 2, text
    assert (
        "argument 'layouts': 2,621,440 combinations (4,096 world size(s) x 1 node count(s) x "
        "2 batch size(s) x 320 layout(s) of the space), over the limit of 1,000,000" in text
    )
    result, text = plan(registry_root, "--layout-set", "tp_sizes=1-10000000", flags=["--layouts"])
    assert result.exit_code == 2, text
    assert (
        "--layout-set tp_sizes '1-10000000': 10,000,000 values, over the limit of 262,144" in text
    )
    result, text = plan(registry_root, "--world-sizes", "1-1024", "--batch-sizes", "1-1024")
    assert result.exit_code == 2, text
    assert "1,048,576 candidates" in text and "over the limit of 262,144 per plan" in text


def test_plan_layout_set_takes_the_workloads_sharding_alias(registry_root):
    result, text = plan(registry_root, "--layout-set", "shardings=zero3", flags=["--layouts"])
    assert result.exit_code == 0, text
    assert "dp2-fsdp" in text and "searched " in text and " candidates predicted in " in text


def test_plan_layout_set_field_given_twice_is_an_error(registry_root):
    result, text = plan(registry_root, "--layout-set", "tp_sizes=1", "--layout-set", "tp_sizes=2",
                        flags=["--layouts"])  # fmt: skip
    assert result.exit_code == 2, text
    assert "--layout-set 'tp_sizes=2': field 'tp_sizes' given twice" in text


def test_plan_with_no_valid_layout_says_why_with_counts(registry_root):
    result, text = plan(registry_root, "--layout-set", "pp_sizes=2", "--layout-set",
                        "micro_batches=1", "--layout-set", "schedules=1f1b", "--layout-set",
                        "tp_sizes=1", "--layout-set", "shardings=none",
                        flags=["--layouts"])  # fmt: skip
    assert result.exit_code == 2, text
    assert "no valid layout among the 4 combinations" in text
    assert "refused: 4 as pipeline_schedule='1f1b' needs micro_batches >= pp_size" in text


def test_yaml_boolean_layout_field_is_an_error_not_data_parallelism(registry_root, tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump([BERT]) + "  tp_size: true\n")
    result, text = predict(registry_root, "--workloads", path)
    assert result.exit_code == 2, text
    assert f"{path}: row 1: invalid workload: field 'tp_size' (value True): a boolean" in text


@pytest.mark.parametrize(("text", "value"), [("true", "True"), ("2.5", "2.5"), ("NaN", "nan")])
def test_profile_json_workload_refuses_a_boolean_fraction_or_nan(text, value):
    spec = json.dumps({**BERT, "batch_size": "X"}).replace('"X"', text)
    result, out = invoke("profile", "--workload", spec)
    assert result.exit_code == 2, out
    assert f"--workload: row 1: invalid workload: field 'batch_size' (value {value})" in out
