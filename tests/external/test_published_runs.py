import math

import pandas as pd
import pytest

from scaledl.external.published_runs import (
    DEFAULT_PATHS,
    MOE,
    PublishedRunsError,
    read_published_runs,
)
from scaledl.workloads.training_job import TrainingJob

pytestmark = pytest.mark.skipif(
    not all(p.is_file() for p in DEFAULT_PATHS), reason="external/scale_runs not in this checkout"
)


@pytest.fixture(scope="module")
def published():
    return read_published_runs()


def test_every_row_is_accepted_or_quarantined_with_a_reason(published):
    counts = published.counts()
    assert counts["rows"] == 519
    assert counts["accepted"] + counts["quarantined"] == 519
    assert counts["rows_with_architecture"] == 315
    assert counts["accepted_share_of_rows_with_architecture"] >= 0.95
    assert counts["quarantined_by_reason"][MOE] == 204
    assert set(published.quarantine["reason"].map(lambda r: r.split(":")[0])) <= {
        MOE,
        "layout not reported (NeMo 'without CP' run)",
    }
    per = counts["per_source"]
    assert per["megatron_lm"]["accepted"] == per["megatron_lm"]["rows"] == 44
    assert per["automodel_perf"]["accepted"] == 13  # 10 MoE rows refused
    assert all(isinstance(j, TrainingJob) for j in published.runs["job"])


def test_rows_map_to_the_published_layouts(published):
    runs = published.runs.set_index(["source", "row"])
    llama405 = runs.loc[("megatron_lm", 44), "job"]  # Megatron-LM examples/llama FP8 405B
    assert (llama405.tp_size, llama405.pp_size, llama405.cp_size, llama405.vp_size) == (8, 8, 2, 8)
    assert (llama405.dp_size, llama405.grad_accum, llama405.precision) == (8, 64, "fp8")
    assert llama405.stage_layers[:2] == (1, 2) and sum(llama405.stage_layers) == 126
    assert runs.loc[("megatron_lm", 44), "gpu_generation"] == "hopper"
    rowwise = runs.loc[("torchtitan", 34), "job"]  # "float8 rowwise": torchao's row-wise recipe
    assert rowwise.precision == "fp8_rowwise"
    gb = runs.loc[("megatron_bridge_perf", 34), "job"]  # 256 GPUs: four racks
    assert gb.gpu == "NVIDIA GB300" and gb.nvlink_domain_size == 64 and gb.gpus_per_node == 4
    assert gb.precision == "mxfp8" and gb.sharding == "zero1"
    assert "nvlink_domain_size" in runs.loc[("megatron_bridge_perf", 34), "assumed"]
    one_rack = runs.loc[("megatron_bridge_perf", 75), "job"]  # 64 GPUs in one NVL72 rack
    assert (one_rack.n_gpus, one_rack.nvlink_domain_size) == (64, 72)
    hsdp = runs.loc[("pytorch_fsdp_ibm", 25), "job"]  # fms-fsdp README: HSDP
    assert (hsdp.sharding, hsdp.shard_group_size, hsdp.network_gbps) == ("hsdp", 8, 6.25)
    full = runs.loc[("megatron_lm", 23), "job"]
    selective = runs.loc[("megatron_lm", 24), "job"]  # Korthikanti Table 5: full vs selective
    assert (full.activation_checkpointing, selective.activation_checkpointing) == (
        "full",
        "selective",
    )
    assert runs.loc[("megatron_lm", 23), "iteration_s"] == pytest.approx(1.42)
    v100 = runs.loc[("megatron_lm", 1)]
    assert v100["job"].gpu == "Tesla V100-SXM3-32GB" and v100["gpu_generation"] == "volta"


def test_each_stack_runs_its_attention_kernel(published):
    kernels = (
        published.runs.assign(kernel=published.runs["job"].map(lambda j: j.attention_kernel))
        .groupby("source")["kernel"]
        .unique()
    )
    assert {s: sorted(k) for s, k in kernels.items()} == {
        "automodel_perf": ["flash_attention_2"],  # Hugging Face attention
        "megatron_bridge_perf": ["cudnn"],
        "megatron_lm": ["cudnn", "unfused"],
        "nemo_perf": ["cudnn"],
        "pytorch_fsdp_ibm": ["flash_attention_2"],
        "torchtitan": ["flash_attention_2"],
    }
    megatron = published.runs[published.runs["source"] == "megatron_lm"].set_index("row")
    unfused = [r for r, j in megatron["job"].items() if j.attention_kernel == "unfused"]
    assert unfused == list(range(1, 31))  # the 2020 README, SC21 and Korthikanti et al. 2022


def test_torchtitan_and_ibm_rows_run_eager_unless_they_name_torch_compile(published):
    runs = published.runs.assign(elementwise=published.runs["job"].map(lambda j: j.elementwise))
    eager = runs[runs["elementwise"] == "eager"]
    assert set(eager["source"]) == {"torchtitan", "pytorch_fsdp_ibm", "automodel_perf"}
    titan = sorted(eager.loc[eager["source"] == "torchtitan", "row"])
    assert titan == [*range(1, 13), 19]  # 2024 A100 and 405B tables, the "FSDP" rows
    ibm = sorted(eager.loc[eager["source"] == "pytorch_fsdp_ibm", "row"])
    assert ibm == [*range(1, 9), *range(9, 24, 2), *range(25, 29)]  # blog 1, "no-compile"


def test_automodel_rows_follow_their_benchmark_recipes(published):
    runs = published.runs[published.runs["source"] == "automodel_perf"].set_index("row")
    facts = {r: (j.activation_checkpointing, j.elementwise) for r, j in runs["job"].items()}
    assert facts[10] == ("full", "fused")  # 70B pre-training recipe: checkpointing, compile
    assert facts[11] == facts[12] == ("none", "eager")  # single-GPU LoRA: force_hf, defaults
    assert {facts[r] for r in (13, 14, 15, 16)} == {("full", "fused")}  # June 2026 TP2 + FSDP
    assert {facts[r] for r in range(17, 23)} == {("full", "eager")}  # earlier PP recipes
    assert "custom_llama3_3_70b_instruct_peft_benchmark.yaml at cb97654" in runs.loc[13, "notes"]
    assert "activation_checkpointing" not in runs.loc[13, "assumed"]
    # a republication of one recipe keeps one configuration key
    assert runs.loc[17, "config_key"] == runs.loc[21, "config_key"]


def test_an_automodel_row_without_a_known_recipe_keeps_the_defaults(tmp_path):
    frame = pd.read_csv(
        [p for p in DEFAULT_PATHS if p.stem == "automodel_perf"][0],
        dtype=str,
        keep_default_na=False,
    )
    frame = frame[frame["model"] == "Llama3 8B"].assign(source_commit="f" * 40)
    path = tmp_path / "automodel_perf.csv"  # the source's rules by its name
    frame.to_csv(path, index=False)
    row = read_published_runs([path]).runs.iloc[0]
    assert (row["job"].activation_checkpointing, row["job"].elementwise) == ("none", "fused")
    assert {"activation_checkpointing", "elementwise"} <= set(row["assumed"])
    assert "no AutoModel recipe known for this row" in row["notes"]


def test_assumed_defaults_are_recorded(published):
    runs = published.runs.set_index(["source", "row"])
    row = runs.loc[("megatron_lm", 31)]  # 2024 H100 weak scaling: micro-batch not reported
    assert {"micro_batch", "activation_checkpointing", "vp_size"} <= set(row["assumed"])
    assert "micro-batch not reported: 1" in row["notes"]
    lora = runs.loc[("automodel_perf", 17)]  # reported GA 4 vs GBS 32 / (1 x 1)
    assert lora["job"].grad_accum == 32 and "reported GA=4" in lora["notes"]


def test_republished_configurations_share_a_config_key(published):
    nemo = published.runs[published.runs["source"] == "nemo_perf"]
    pretrain = nemo[nemo["iteration_s"].notna()]
    sizes = pretrain.groupby("config_key").size()
    assert (sizes == 3).all() and len(sizes) == 18  # NeMo 24.07's three published versions
    titan = published.runs[published.runs["source"] == "torchtitan"].set_index("row")
    # with and without torch.compile: jobs that differ only in their elementwise operators
    eager, compiled = titan.loc[19, "job"], titan.loc[20, "job"]
    assert (eager.elementwise, compiled.elementwise) == ("eager", "fused")
    assert eager.model_copy(update={"elementwise": "fused"}) == compiled
    assert titan.loc[19, "config_key"] != titan.loc[20, "config_key"]


def _bad_file(tmp_path, published):
    good = pd.read_csv(DEFAULT_PATHS[0], dtype=str, keep_default_na=False).iloc[[12]]
    rows = []
    for change in (
        {},
        {"precision": "fp6"},
        {"grad_accum": "2.5"},
        {"ep": "8", "model": "Mixtral 8x7B"},
        {"seq_len": ""},
        {"global_batch_samples": "100"},
        {"n_gpus": "many"},
        {"gpu": "H101"},
        {"hidden_size": "", "num_layers": "", "num_heads": "", "num_kv_heads": "",
         "ffn_size": "", "vocab_size": "", "model": "DeepSeekV3"},
    ):  # fmt: skip
        row = good.copy()
        for key, value in change.items():
            row[key] = value
        rows.append(row)
    path = tmp_path / "bad_rows.csv"
    pd.concat(rows).to_csv(path, index=False)
    return path


def test_bad_rows_are_quarantined_naming_file_row_field_and_value(tmp_path, published):
    result = read_published_runs([_bad_file(tmp_path, published)])
    assert list(result.runs["row"]) == [1]
    q = result.quarantine.set_index("row")
    assert set(q["source"]) == {"bad_rows"} and list(q.index) == list(range(2, 10))
    assert (q.loc[2, "field"], q.loc[2, "value"]) == ("precision", "fp6")
    assert "unknown precision" in q.loc[2, "reason"]
    assert (q.loc[3, "field"], q.loc[3, "value"]) == ("grad_accum", "2.5")
    assert q.loc[3, "reason"] == "must be a whole number (got 2.5)"
    assert (q.loc[4, "field"], q.loc[4, "value"], q.loc[4, "reason"]) == ("ep", "8", MOE)
    assert (q.loc[5, "field"], q.loc[5, "reason"]) == ("seq_len", "missing (blank cell)")
    assert q.loc[6, "field"] == "grad_accum" and "non-integer grad accum" in q.loc[6, "reason"]
    assert "100" in q.loc[6, "reason"]
    assert (q.loc[7, "field"], q.loc[7, "value"], q.loc[7, "reason"]) == (
        "n_gpus",
        "many",
        "not a number",
    )
    assert (q.loc[8, "field"], q.loc[8, "value"]) == ("gpu", "H101")
    assert (q.loc[9, "field"], q.loc[9, "reason"]) == ("model", MOE)
    assert math.isclose(result.runs["iteration_s"].iloc[0], 3.52802)


def test_optional_kernel_columns_win_over_the_source_rules(tmp_path):
    frame = pd.read_csv(DEFAULT_PATHS[0], dtype=str, keep_default_na=False).head(3)
    frame["attention_kernel"] = ["flash_attention_2", "", "xformers"]
    frame["elementwise"] = ["eager", "", ""]
    path = tmp_path / "megatron_lm.csv"  # the source's rules by its name
    frame.to_csv(path, index=False)
    result = read_published_runs([path])
    runs = result.runs.set_index("row")
    assert runs.loc[1, "job"].attention_kernel == "flash_attention_2"
    assert runs.loc[1, "job"].elementwise == "eager"
    assert runs.loc[2, "job"].attention_kernel == "unfused"  # Megatron-LM's 2020 README
    assert runs.loc[2, "job"].elementwise == "fused"
    assert {"attention_kernel", "elementwise"} <= set(runs.loc[2, "assumed"])
    q = result.quarantine.set_index("row")
    assert (q.loc[3, "field"], q.loc[3, "value"]) == ("attention_kernel", "xformers")
    assert "unknown attention_kernel" in q.loc[3, "reason"]


def test_a_missing_column_refuses_the_file(tmp_path):
    frame = pd.read_csv(DEFAULT_PATHS[0], dtype=str, keep_default_na=False).drop(columns="tp")
    path = tmp_path / "no_tp.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(PublishedRunsError, match=r"no_tp.csv: column\(s\) \['tp'\] missing"):
        read_published_runs([path])
    with pytest.raises(PublishedRunsError, match="no such file"):
        read_published_runs([tmp_path / "absent.csv"])


def test_a_misspelt_or_repeated_column_refuses_the_file(tmp_path):
    frame = pd.read_csv(DEFAULT_PATHS[0], dtype=str, keep_default_na=False).head(2)
    misspelt = frame.assign(Attention_Kernel="flash_attention_2")
    path = tmp_path / "misspelt.csv"
    misspelt.to_csv(path, index=False)
    with pytest.raises(PublishedRunsError, match="'Attention_Kernel' is not 'attention_kernel'"):
        read_published_runs([path])
    spaced = frame.rename(columns={"tp": "tp "})
    spaced.to_csv(path, index=False)
    with pytest.raises(PublishedRunsError, match="'tp ' is not 'tp'"):
        read_published_runs([path])
    header = ",".join([*frame.columns, "elementwise", "elementwise"])
    body = "\n".join(",".join([*row, "eager", "fused"]) for row in frame.astype(str).values)
    path.write_text(header + "\n" + body + "\n")  # no cell holds a comma in these rows
    with pytest.raises(PublishedRunsError, match="'elementwise' appears more than once"):
        read_published_runs([path])


def test_rows_of_a_file_without_the_optional_columns_assume_nothing_of_them(tmp_path):
    frame = pd.read_csv(DEFAULT_PATHS[0], dtype=str, keep_default_na=False).head(2)
    plain, extra = tmp_path / "plain.csv", tmp_path / "extra.csv"
    frame.to_csv(plain, index=False)
    frame.assign(elementwise=["", "bogus"]).to_csv(extra, index=False)
    result = read_published_runs([plain, extra])
    runs = result.runs.set_index(["source", "row"])
    assert "elementwise" not in runs.loc[("plain", 1), "assumed"]
    assert "elementwise" in runs.loc[("extra", 1), "assumed"]
    counts = result.counts()["quarantined_by_reason"]
    assert counts == {"unknown elementwise (known: fused, eager)": 1}
    q = result.quarantine
    assert q["reason"].tolist() == ["unknown elementwise (known: fused, eager)"]


def test_range_and_value_set_failures_are_worded_and_counted_without_the_value(tmp_path):
    frame = pd.read_csv(DEFAULT_PATHS[0], dtype=str, keep_default_na=False).iloc[[12] * 5]
    frame["n_gpus"] = ["0", "8", "-8", "8", "8"]
    frame["global_batch_samples"] = ["512", "-16", "512", "512", "512"]
    frame["iteration_s"] = ["", "", "", "-1.5", ""]
    frame["task"] = ["pretrain"] * 4 + ["finetune"]
    path = tmp_path / "ranges.csv"
    frame.to_csv(path, index=False)
    result = read_published_runs([path])
    q = result.quarantine.set_index("row")
    assert q[["field", "value", "reason"]].values.tolist() == [
        ["n_gpus", "0", "must be >= 1 (got 0)"],  # an integer column, > 0 checked by the suite
        ["global_batch_samples", "-16", "must be >= 1 (got -16)"],
        ["n_gpus", "-8", "must be >= 1 (got -8)"],
        ["iteration_s", "-1.5", "must be > 0 (got -1.5)"],
        ["task", "finetune", "must be one of pretrain, sft, lora (got finetune)"],
    ]
    assert result.counts()["quarantined_by_reason"] == {
        "must be >= 1": 3, "must be > 0": 1, "must be one of pretrain, sft, lora": 1,
    }  # fmt: skip


def test_plain_precision_names_are_accepted(tmp_path):
    frame = pd.read_csv(DEFAULT_PATHS[0], dtype=str, keep_default_na=False).head(2)
    frame["precision"] = ["fp32", "fp16"]  # a user's own rows: the job's precision names
    path = tmp_path / "own.csv"
    frame.to_csv(path, index=False)
    runs = read_published_runs([path]).runs.set_index("row")
    assert [runs.loc[r, "job"].precision for r in (1, 2)] == ["fp32", "fp16"]
