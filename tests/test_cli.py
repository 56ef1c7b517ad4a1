import errno
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from faults import tmpfs
from metrics_factory import make_metrics, metrics_dict
from tiny_specs import tiny_spec
from typer.testing import CliRunner

import scaledl
from scaledl.cli import app, output_path, read_workloads_file
from scaledl.evaluation.results import Metrics
from scaledl.report.blocks.markers import BEGIN, END, markers, read_block
from scaledl.report.summary import results_markdown

PRESETS = Path(scaledl.__file__).parent / "presets"

pytestmark = pytest.mark.slow
runner = CliRunner()
INLINE = [
    "--family",
    "bert",
    *(x for k, v in tiny_spec("bert").items() if k != "family" for x in ("--set", f"{k}={v}")),
]
ROWS = [tiny_spec("bert"), tiny_spec("vit", batch_size=4)]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_predict_from_csv(registry_root, tmp_path):
    csv = tmp_path / "workloads.csv"
    pd.DataFrame(ROWS).to_csv(csv, index=False)
    out = tmp_path / "pred.csv"
    result = invoke(
        "predict", "--predictor", registry_root / "scaledl", "--workloads", csv, "--out", out
    )
    assert result.exit_code == 0, result.output
    assert "iteration_s" in result.output and "epoch_s" in result.output
    assert f"2 predictions: {out}" in result.output.replace("\n", "")  # streamed
    written = pd.read_csv(out)
    assert list(written["family"]) == ["bert", "vit"]
    assert (written["iteration_s"] > 0).all()
    assert set(written["predictor_version"]) == {"v2"}


def test_predict_output_folder_is_created_and_a_bad_suffix_exits_2(registry_root, tmp_path):
    out = tmp_path / "new" / "folder" / "pred.parquet"
    result = invoke("predict", "--predictor", registry_root / "scaledl", *INLINE, "--out", out)
    assert result.exit_code == 0, result.output
    assert len(pd.read_parquet(out)) == 1
    bad = tmp_path / "pred.txt"
    result = invoke("predict", "--predictor", registry_root / "scaledl", *INLINE, "--out", bad)
    assert result.exit_code == 2 and not bad.exists()
    assert f"--out {bad}: unknown suffix '.txt'" in result.output.replace("\n", "")


def test_an_output_folder_that_cannot_be_created_exits_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="--png .*cannot create its folder"):
        output_path(blocker / "sub" / "front.png", (".png",), "--png")
    assert output_path(None, (".png",), "--png") is None


def test_predict_from_yaml_with_detail(registry_root, tmp_path):
    path = tmp_path / "workloads.yaml"
    path.write_text(yaml.safe_dump({"workloads": ROWS[:1]}))
    result = invoke(
        "predict", "--predictor", registry_root / "scaledl" / "v1", "--workloads", path, "--detail"
    )
    assert result.exit_code == 0, result.output
    assert "iteration_s" in result.output and "layer_type" in result.output
    assert "attention" in result.output


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_predict_detail_out_writes_the_per_layer_table_beside_the_workload_table(
    registry_root, tmp_path, suffix
):
    out = tmp_path / f"pred{suffix}"
    result = invoke(
        "predict", "--predictor", registry_root / "scaledl", *INLINE, "--detail", "--out", out
    )
    assert result.exit_code == 0, result.output
    layers = tmp_path / f"pred.layers{suffix}"
    read = pd.read_parquet if suffix == ".parquet" else pd.read_csv
    table, nodes = read(out), read(layers)
    assert len(table) == 1 and {"layer_type", "total_ms", "workload_id"} <= set(nodes.columns)
    assert len(nodes) > 1 and set(nodes["workload_id"]) == set(table["workload_id"])
    assert f"per-layer predictions: {layers}" in result.output.replace("\n", "")


def test_predict_inline(registry_root):
    result = invoke("predict", "--predictor", registry_root / "scaledl", *INLINE)
    assert result.exit_code == 0, result.output
    header, row = result.stdout.strip().splitlines()[:2]
    assert "iteration_s" in header.split()
    values = dict(zip(header.split(), row.split(), strict=True))
    assert values["family"] == "bert" and float(values["iteration_s"]) > 0


def test_bad_file_suffix_exits_2_naming_the_file(registry_root, tmp_path):
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
def test_bad_inline_input_exits_2(registry_root, args, expected):
    result = invoke("predict", "--predictor", registry_root / "scaledl", *args)
    assert result.exit_code == 2, result.output
    assert expected in result.output


def test_bad_predictor_path_exits_2(tmp_path):
    result = invoke("predict", "--predictor", tmp_path / "none", *INLINE)
    assert result.exit_code == 2
    assert str(tmp_path / "none") in result.output


def test_list_predictors(registry_root, tmp_path):
    empty = invoke("list-predictors", "--registry", tmp_path)
    assert empty.exit_code == 0
    assert "no predictor" in empty.output and str(tmp_path) in empty.output
    listed = invoke("list-predictors", "--registry", registry_root)
    assert listed.exit_code == 0
    lines = listed.output.strip().splitlines()
    assert "version" in lines[0] and "latest" in lines[0]
    assert any(" v1 " in f" {line} " and "False" in line for line in lines[1:])
    assert any(" v2 " in f" {line} " and "True" in line for line in lines[1:])


# --------------------------------------------------------------- bad input (issue 15)
REPO = Path(__file__).resolve().parents[1]
BAD = Path("tests/fixtures/bad_inputs")  # config paths in the fixtures are relative to REPO


@pytest.fixture
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


def predict_file(registry_root, name, *extra):
    return invoke("predict", "--predictor", registry_root / "scaledl", "--workloads",
                  BAD / "workloads" / name, *extra)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "named"),
    [
        # case 1: a sequence longer than the config's position table
        ("gpt2_seq_len_512.csv", ["row 2", "field 'seq_len'", "seq_len=512", "n_positions=128",
                                  "gpt2_n_positions_128.json"]),
        # case 2: invalid attention geometry, refused before anything is built
        ("llama_kv3_heads8.yaml", ["row 2", "field 'num_key_value_heads'",
                                   "num_key_value_heads=3 must divide num_attention_heads=8",
                                   "llama_kv3_heads8.json"]),
        ("bert_hidden250_heads8.csv", ["row 1", "field 'num_attention_heads'",
                                       "num_attention_heads=8 must divide hidden_size=250",
                                       "bert_hidden250_heads8.json"]),
    ],
)  # fmt: skip
def test_predict_refuses_a_workload_its_config_cannot_run(registry_root, in_repo, name, named):
    result = predict_file(registry_root, name)
    assert result.exit_code == 2, result.output
    assert str(BAD / "workloads" / name) in result.output
    for text in named:
        assert text in result.output, (text, result.output)
    assert "Traceback" not in result.output


def test_predict_names_a_model_that_cannot_be_built(registry_root, tmp_path):
    config = tmp_path / "gpt2.json"
    config.write_text(
        '{"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 100, '
        '"activation_function": "no_such_activation"}'
    )
    path = tmp_path / "w.csv"
    path.write_text(f"family,config_path,seq_len,batch_size\nhf,{config},16,2\n")
    result = invoke("predict", "--predictor", registry_root / "scaledl", "--workloads", path)
    assert result.exit_code == 2, result.output
    for text in (f"{path}: row 1", f"config {config}", "hidden_size=32", "no_such_activation"):
        assert text in result.output, text


def test_hf_llama_causal_lm_predicts_like_the_builtin_llama(registry_root, in_repo):
    """Case 3: 0.8-1.25x asked; the two rows have equal layer graphs and fields."""
    rows = read_workloads_file(BAD / "workloads" / "llama_builtin_and_hf.yaml")
    predictions = scaledl.load_predictor(registry_root / "scaledl").predict(rows)
    builtin, hf = predictions["iteration_s"]
    assert 0.8 <= hf / builtin <= 1.25
    # Equal graphs: equal up to float32 rounding (a graph's position in the GNN's batch changes
    # the last bits of its prediction; each alone they are bit-identical).
    assert hf == pytest.approx(builtin, rel=1e-6)
    result = predict_file(registry_root, "llama_builtin_and_hf.yaml")
    assert result.exit_code == 0, result.output


def test_predict_hf_vision_config(registry_root, in_repo):
    """Case 4: an HF ViT config with image_size in the workload predicts like a text one."""
    result = predict_file(registry_root, "vit_hf_image_size.yaml", "--detail")
    assert result.exit_code == 0, result.output
    assert "patch-embed" in result.output and "iteration_s" in result.output


def copy_registry(registry_root, tmp_path):
    root = tmp_path / "registry"
    shutil.copytree(registry_root, root)
    return root


def test_bundle_file_outside_the_manifest_is_refused(registry_root, tmp_path):
    """Case 5: params.json edited and its manifest entry removed."""
    bundle = copy_registry(registry_root, tmp_path) / "scaledl" / "v2"
    params = json.loads((bundle / "params.json").read_text())
    params["epoch"]["coef"] = [100.0 * c + 1.0 for c in params["epoch"]["coef"]]
    (bundle / "params.json").write_text(json.dumps(params))
    manifest = json.loads((bundle / "manifest.json").read_text())
    del manifest["files"]["params.json"]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    result = invoke("predict", "--predictor", bundle, *INLINE)
    assert result.exit_code == 2, result.output
    assert f"{bundle / 'params.json'}: not listed in" in result.output.replace("\n", "")


def test_one_broken_version_does_not_break_the_registry(registry_root, tmp_path):
    """Case 6: v1's manifest cut to 40 bytes; v2 is listed, predicts, and v1 says why."""
    root = copy_registry(registry_root, tmp_path)
    manifest = root / "scaledl" / "v1" / "manifest.json"
    manifest.write_text(manifest.read_text()[:40])
    listed = invoke("list-predictors", "--registry", root)
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.strip().splitlines()
    assert "status" in lines[0]
    assert any(" v2 " in f" {line} " and " ok " in f" {line} " for line in lines[1:])
    assert any(" v1 " in f" {line} " and "broken" in line for line in lines[1:])
    assert f"scaledl v1: broken: {manifest}: unreadable manifest" in listed.stderr
    predicted = invoke("predict", "--predictor", root / "scaledl", *INLINE)
    assert predicted.exit_code == 0, predicted.output


def test_profile_refuses_a_bad_row_before_launching(in_repo, tmp_path):
    out = tmp_path / "profiles"
    path = BAD / "workloads" / "profile_bad_row.csv"
    result = invoke("profile", "--workloads", path, "--out", out)
    assert result.exit_code == 2, result.output
    assert f"{path}: row 2" in result.output and "num_heads=3 must divide hidden_size=32" in (
        result.output
    )
    assert not out.exists()  # nothing was launched


@pytest.mark.parametrize(
    ("device", "expected"),
    [("cuda:NVIDIA H100 80GB HBM3", "this host profiles on"), ("tpu:v5", "this host profiles on")],
)
def test_profile_refuses_another_device(tmp_path, device, expected):
    spec = {**ROWS[0], "device_name": device}
    result = invoke("profile", "--workload", json.dumps(spec), "--out", tmp_path)
    assert result.exit_code == 2, result.output
    assert "--workload: row 1: field 'device_name'" in result.output and expected in result.output


def test_profile_takes_the_workloads_files_predict_takes(in_repo, tmp_path):
    """Cases 9 and 10: one reader for CSV, YAML and parquet; the device named as everywhere."""
    from scaledl.devices.local import local_device_name
    from scaledl.workloads.spec import Workload

    csv = BAD / "workloads" / "profile_tiny.csv"
    rows = read_workloads_file(csv)
    yaml_path, parquet = tmp_path / "w.yaml", tmp_path / "w.parquet"
    yaml_path.write_text(yaml.safe_dump(rows, sort_keys=False))
    pd.DataFrame(rows).to_parquet(parquet)
    for path in (yaml_path, parquet):
        assert read_workloads_file(path) == rows
    out = tmp_path / "profiles"
    result = invoke("profile", "--workloads", csv, "--out", out, "--preset",
                    unguarded_smoke(tmp_path), "--repeats", 1, "--timeout-s", 60)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "1 (workload, repeat) parts profiled" in result.output
    recorded = pd.read_parquet(out / "workloads.parquet").iloc[0]
    record = rows[0]
    # One device naming: the CLI, the design (device_name=local_device_name()) and a spec
    # naming the old-style bare "cpu" all give this workload the same id.
    assert recorded["device_name"] == local_device_name()
    assert recorded["workload_id"] == Workload.parse(record).workload_id
    named = Workload.parse({**record, "device_name": local_device_name()})
    assert recorded["workload_id"] == named.workload_id
    if local_device_name().startswith("cpu:"):
        bare = Workload.parse({**record, "device_name": "cpu"})
        assert recorded["workload_id"] == bare.workload_id
    runs = pd.read_parquet(out / "runs.parquet")
    assert runs["status"].tolist() == ["ok"] and runs["repeat"].tolist() == [0]


def unguarded_smoke(directory: Path) -> Path:
    """The smoke preset with the interference guard measuring but never retrying or flagging
    (these tests are about the CLI; tests/profiling/test_interference.py tests the guard)."""
    preset = yaml.safe_load((PRESETS / "smoke.yaml").read_text())
    preset["profiling"].update(max_retries=0, drift_tolerance=100.0, memory_drift_tolerance=100.0,
                               allreduce_drift_tolerance=100.0, max_foreign_load_cores=64.0,
                               quiet_wait_s=0.0)  # fmt: skip
    path = Path(directory) / "smoke-unguarded.yaml"
    path.write_text(yaml.safe_dump(preset))
    return path


def test_profile_settings_come_from_the_preset(tmp_path):
    spec = {"family": "bert", "hidden_size": 32, "num_layers": 1, "num_heads": 2,
            "intermediate_size": 64, "vocab_size": 100, "seq_len": 16, "batch_size": 2}  # fmt: skip
    bad = tmp_path / "preset.yaml"
    bad.write_text(yaml.safe_dump({**yaml.safe_load((PRESETS / "smoke.yaml").read_text()),
                                   "profiling": {"repeat": 2}}))  # fmt: skip
    result = invoke("profile", "--workload", json.dumps(spec), "--out", tmp_path / "p",
                    "--preset", bad)  # fmt: skip
    assert result.exit_code == 2
    assert f"{bad}: field 'profiling.repeat' (value 2): unknown field" in result.output


def test_evaluate_gpu_without_imported_profiles_exits_2(tmp_path):
    result = runner.invoke(app, ["evaluate-gpu", "--profiles", str(tmp_path / "none")])
    assert result.exit_code == 2 and "validated GPU profiles not found" in result.output


def test_devices_lists_the_gpu_table_and_a_probed_host(tmp_path):
    result = runner.invoke(app, ["devices", "--probe", "--hosts-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "NVIDIA H100 80GB HBM3" in result.output and "GB/s (one thread)" in result.output
    assert list(tmp_path.glob("*.json"))


def _summary_files(tmp_path):
    data = tmp_path / "data"
    make_metrics().write(data / "reports" / "metrics.json")
    readme = tmp_path / "README.md"
    gpu_begin, gpu_end = markers("gpu")
    readme.write_text(f"# Title\n{BEGIN}\nold numbers\n{END}\n{gpu_begin}\n{gpu_end}\ntail\n")
    return data, readme, tmp_path / "docs" / "results" / "metrics.json"


def test_summary_markdown_writes_the_results_file_and_the_readme_block(tmp_path):
    data, readme, results = _summary_files(tmp_path)
    result = invoke(
        "summary", "--markdown", "--data", data, "--readme", readme, "--results", results
    )
    assert result.exit_code == 0, result.output
    assert Metrics.read(results).to_dict() == make_metrics().to_dict()
    text = readme.read_text()
    assert read_block(text) == results_markdown(Metrics.read(results), results.as_posix())
    assert text.startswith("# Title\n") and text.endswith(f"{markers('gpu')[1]}\ntail\n")
    assert "old numbers" not in text


def test_summary_markdown_refuses_a_readme_without_a_block_before_writing(tmp_path):
    data, readme, results = _summary_files(tmp_path)
    readme.write_text(f"# Title\n{BEGIN}\nold numbers\n{END}\n")  # no gpu block
    result = invoke(
        "summary", "--markdown", "--data", data, "--readme", readme, "--results", results
    )
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "expected one generated block" in result.output and "gpu:begin" in result.output
    assert not results.exists() and "old numbers" in readme.read_text()


def test_summary_prints_the_headline(tmp_path):
    data, _, _ = _summary_files(tmp_path)
    (data / "predictors" / "scaledl" / "v1").mkdir(parents=True)
    (data / "predictors" / "scaledl" / "v1" / "manifest.json").write_text("{}")
    (data / "predictors" / "scaledl" / "latest").write_text("v1\n")
    result = invoke("summary", "--data", data)
    assert result.exit_code == 0, result.output
    assert "ood (mean) scaledl      MRE 5.0%" in result.output
    assert "the noise floor): 2.00% over 8 workloads (world size 1: 1.00%" in result.output


def test_summary_of_an_invalid_metrics_file_exits_2_naming_file_and_key(tmp_path):
    data, readme, results = _summary_files(tmp_path)
    bad = metrics_dict()
    del bad["splits"]["id"]
    path = data / "reports" / "metrics.json"
    path.write_text(json.dumps(bad))
    result = invoke(
        "summary", "--markdown", "--data", data, "--readme", readme, "--results", results
    )
    assert result.exit_code == 2
    assert str(path) in result.output and "'splits.id': missing" in result.output
    assert not results.exists() and "old numbers" in readme.read_text()


@pytest.fixture(scope="module")
def calibrated_root(registry_root, tmp_path_factory):
    """The tiny bundle registered with a synthetic interval calibration."""
    import numpy as np

    from scaledl.models.intervals import IntervalCalibration
    from scaledl.registry import register_bundle

    rng = np.random.default_rng(0)
    residuals = {t: {"in_domain": rng.normal(0, 0.1, 30), "unseen_family": rng.normal(0, 0.4, 30)}
                 for t in ("iteration", "epoch")}  # fmt: skip
    root = tmp_path_factory.mktemp("cli-calibrated")
    register_bundle(registry_root / "scaledl" / "v2", root, "scaledl",
                    calibration=IntervalCalibration(residuals))  # fmt: skip
    return root


def test_predict_flags_out_of_domain_rows_and_strict_exits_2(registry_root, tmp_path):
    csv = tmp_path / "w.csv"
    pd.DataFrame([ROWS[0], {**ROWS[0], "precision": "bf16"}]).to_csv(csv, index=False)
    args = ("predict", "--predictor", registry_root / "scaledl", "--workloads", csv)
    loose = invoke(*args)
    assert loose.exit_code == 0, loose.output
    assert "in_domain" in loose.stdout
    assert "row 2: outside the training domain: precision=bf16" in loose.output
    strict = invoke(*args, "--strict")
    assert strict.exit_code == 2
    assert f"{csv}: row 2: outside the predictor's training domain (strict)" in strict.output
    assert "field 'precision' (value bf16)" in strict.output


def test_predict_coverage(registry_root, calibrated_root):
    result = invoke("predict", "--predictor", calibrated_root / "scaledl", *INLINE,
                    "--coverage", "0.9")  # fmt: skip
    assert result.exit_code == 0, result.output
    header, row = result.stdout.strip().splitlines()[:2]
    values = dict(zip(header.split(), row.split(), strict=True))
    assert float(values["iteration_s_low"]) < float(values["iteration_s"])
    assert float(values["epoch_s"]) < float(values["epoch_s_high"])
    assert values["interval_basis"] == "in_domain"
    uncalibrated = invoke("predict", "--predictor", registry_root / "scaledl", *INLINE,
                          "--coverage", "0.9")  # fmt: skip
    assert uncalibrated.exit_code == 2 and "no interval calibration" in uncalibrated.output


def test_predict_says_why_an_older_bundles_new_family_interval_is_unbounded(
    registry_root, tmp_path
):
    import numpy as np

    from scaledl.models.intervals import IntervalCalibration
    from scaledl.registry import register_bundle

    rng = np.random.default_rng(0)
    residuals = {t: {"in_domain": rng.normal(0, 0.1, 30), "unseen_family": rng.normal(0, 0.4, 30)}
                 for t in ("iteration", "epoch")}  # fmt: skip
    families = {t: {"unseen_family": np.repeat([f"f{i}" for i in range(5)], 6)} for t in residuals}
    old = IntervalCalibration(residuals, families=families, family_rule="conformal")
    register_bundle(registry_root / "scaledl" / "v2", tmp_path / "reg", "scaledl",
                    calibration=old)  # fmt: skip
    csv = tmp_path / "w.csv"
    pd.DataFrame([ROWS[0], {**ROWS[0], "precision": "bf16"}]).to_csv(csv, index=False)
    reason = ("iteration and epoch intervals unbounded for 1 row (stratum unseen_family): 5 "
              "families, fewer than the 9 the conformal quantile needs at 90% (family rule "
              "'conformal'")  # fmt: skip
    args = ("predict", "--predictor", tmp_path / "reg" / "scaledl", "--workloads", csv,
            "--coverage", "0.9")  # fmt: skip
    for extra in ((), ("--out", tmp_path / "p.csv")):  # in memory, and streamed
        result = invoke(*args, *extra)
        assert result.exit_code == 0, result.output
        assert reason in " ".join(result.stdout.split()), result.stdout
        assert "inf" in result.stdout and "unbounded" in result.stdout


def test_plan_prints_the_front_and_writes_the_figure(calibrated_root, tmp_path):
    model = [x for k, v in tiny_spec("bert").items() if k not in ("family", "batch_size",
             "dataset_size") for x in ("--set", f"{k}={v}")]  # fmt: skip
    png, out = tmp_path / "plan.png", tmp_path / "plan.csv"
    result = invoke("plan", "--predictor", calibrated_root / "scaledl", "--family", "bert",
                    *model, "--dataset-size", 256, "--epochs", 2, "--price-per-device-hour", 3,
                    "--world-sizes", "1,2", "--batch-sizes", "2,4", "--device-memory-gb", 1,
                    "--deadline-h", 10, "--png", png, "--out", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "Pareto front" in result.output and "<- chosen" in result.output
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert len(pd.read_csv(out)) == 4
    bad = invoke("plan", "--predictor", calibrated_root / "scaledl", "--family", "bert", *model,
                 "--set", "world_size=2", "--dataset-size", 256, "--epochs", 2,
                 "--price-per-device-hour", 3, "--device-memory-gb", 1)  # fmt: skip
    assert bad.exit_code == 2 and "field 'world_size'" in bad.output
    worse = invoke("plan", "--predictor", calibrated_root / "scaledl", "--family", "bert", *model,
                   "--dataset-size", 256, "--epochs", 2, "--price-per-device-hour", 3,
                   "--world-sizes", "1,x")  # fmt: skip
    assert worse.exit_code == 2 and "--world-sizes '1,x'" in worse.output


def test_int_lists_take_ranges():
    from scaledl.cli.common import int_list as _int_list

    assert _int_list("1-3, 8,-2", "--world-sizes") == [1, 2, 3, 8, -2]
    for bad in ("4-2", "1-x", ",", "1--3"):
        with pytest.raises(ValueError, match="--world-sizes .*integers or ranges a-b"):
            _int_list(bad, "--world-sizes")


def test_int_list_refuses_a_range_bomb_before_expanding_it():
    import tracemalloc

    from scaledl.cli.common import INT_LIST_LIMIT, int_list

    tracemalloc.start()
    refusal = "10,000,000 values, over the limit of 262,144; give fewer or narrower ranges"
    with pytest.raises(ValueError, match=f"--layout-set tp_sizes '1-10000000': {refusal}"):
        int_list("1-10000000", "--layout-set tp_sizes")
    _, peak_bytes = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak_bytes < 1_000_000  # counted, never expanded (the list alone would be 80 MB)
    assert len(int_list(f"1-{INT_LIST_LIMIT}", "--world-sizes")) == INT_LIST_LIMIT
    with pytest.raises(ValueError, match="262,145 values"):
        int_list(f"1-{INT_LIST_LIMIT},7", "--world-sizes")


# --------------------------------------------------------------- hard faults (issue 23)
def test_profile_into_a_read_only_folder_exits_2_before_launching(tmp_path, monkeypatch):
    # Root writes through a chmod'd folder: the read-only file system is injected (EROFS).
    from scaledl.profiling import store

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(store.tempfile, "TemporaryFile", read_only)
    out = tmp_path / "profiles"
    result = invoke("profile", "--workload", json.dumps(ROWS[0]), "--out", out)
    assert result.exit_code == 2, result.output
    assert f"{out / 'parts'}: cannot write profiles here: Read-only file system" in (
        result.output.replace("\n", "")
    )
    assert list((out / "parts").iterdir()) == []  # nothing launched


def test_a_huge_field_is_quoted_as_a_bounded_excerpt(tmp_path):
    path = tmp_path / "w.csv"
    pd.DataFrame([{**ROWS[0], "family": "x" * 5_000_000}]).to_csv(path, index=False)
    result = invoke("profile", "--workloads", path, "--out", tmp_path / "p")
    assert result.exit_code == 2, result.output[:500]
    assert str(path) in result.output.replace("\n", "")
    assert len(result.output) < 5_000


def test_a_latest_symlinked_to_a_version_exits_2_and_is_listed(registry_root, tmp_path):
    root = copy_registry(registry_root, tmp_path)
    latest = root / "scaledl" / "latest"
    latest.unlink()
    latest.symlink_to("v2")
    predicted = invoke("predict", "--predictor", root / "scaledl", *INLINE)
    assert predicted.exit_code == 2, predicted.output
    assert f"{latest}: not a regular file (a directory)" in predicted.output.replace("\n", "")
    listed = invoke("list-predictors", "--registry", root)
    assert listed.exit_code == 0, listed.output
    assert "scaledl latest: broken:" in listed.stderr
    latest.unlink()
    latest.write_text("v9\n")  # dangling
    listed = invoke("list-predictors", "--registry", root)
    assert listed.exit_code == 0, listed.output
    assert "scaledl v9: missing:" in listed.stderr and "which does not exist" in listed.stderr


def test_profile_into_a_real_read_only_file_system_exits_2(tmp_path):
    with tmpfs(tmp_path / "ro", read_only=True) as root:
        out = root / "profiles"
        result = invoke("profile", "--workload", json.dumps(ROWS[0]), "--out", out)
    assert result.exit_code == 2, result.output
    assert f"{out / 'parts'}: cannot write profiles here: Read-only file system" in (
        result.output.replace("\n", "")
    )


def test_summary_with_a_latest_symlinked_to_a_directory_exits_2(tmp_path):
    data, _, _ = _summary_files(tmp_path)
    (data / "predictors" / "scaledl" / "v1").mkdir(parents=True)
    (data / "predictors" / "scaledl" / "latest").symlink_to("v1")
    result = invoke("summary", "--data", data)
    assert result.exit_code == 2, result.output
    assert "`latest` must be a one-line file naming a version" in result.output.replace("\n", "")


def test_profile_one_shard_keeps_its_workloads_only(in_repo, tmp_path):
    """``--shard K-of-N``: the pipeline's shard rule; ``--own-dir`` profiles into shards/K-of-N."""
    from scaledl.profiling.shards import shard_of
    from scaledl.profiling.store import completed_parts
    from scaledl.workloads.spec import Workload

    csv = BAD / "workloads" / "profile_tiny.csv"
    (row,) = read_workloads_file(csv)
    home = shard_of(Workload.from_record(row).workload_id, 2)
    out = tmp_path / "profiles"
    common = ["--workloads", csv, "--out", out, "--preset", unguarded_smoke(tmp_path),
              "--repeats", 1, "--timeout-s", 60]  # fmt: skip
    other = invoke("profile", *common, "--shard", f"{1 - home}-of-2")
    assert other.exit_code == 0, other.output
    assert f"shard {1 - home}-of-2: 0 of 1 workloads" in other.output
    assert "0 (workload, repeat) parts profiled" in other.output
    own = invoke("profile", *common, "--shard", f"{home}/2", "--own-dir")  # K/N: read alike
    assert own.exit_code == 0, own.output
    assert "1 (workload, repeat) parts profiled" in own.output
    shard = out / "shards" / f"{home}-of-2"
    assert completed_parts(shard) == completed_parts(out) and len(completed_parts(out)) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shard", "2/2"], "--shard '2/2': shard 2 not in 0..1"),
        (["--shard", "2-of-2"], "--shard '2-of-2': shard 2 not in 0..1"),
        (["--shard", "x"], "--shard 'x': expected K-of-N with 0 <= K < N, e.g. 0-of-4"),
        (["--own-dir"], "--own-dir needs --shard K-of-N"),
    ],
)
def test_profile_bad_shard_is_a_one_line_error(tmp_path, args, message):
    out = tmp_path / "profiles"
    result = invoke("profile", "--workload", json.dumps(ROWS[0]), "--out", out, *args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()) and "Traceback" not in result.output
    assert not out.exists()
