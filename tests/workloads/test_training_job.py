import math

import pytest

from scaledl.workloads.training_job import ModelShape, TrainingJob, TrainingJobError

LLAMA3_8B = {
    "hidden_size": 4096,
    "num_layers": 32,
    "num_heads": 32,
    "num_kv_heads": 8,
    "ffn_size": 14336,
    "vocab_size": 128256,
}
LLAMA3_405B = {
    "hidden_size": 16384,
    "num_layers": 126,
    "num_heads": 128,
    "num_kv_heads": 8,
    "ffn_size": 53248,
    "vocab_size": 128256,
}


def job(**over):
    data = {
        "model": LLAMA3_8B,
        "seq_len": 8192,
        "gpu": "H100-SXM-80GB (DGX-H100)",
        "n_gpus": 64,
        "tp_size": 2,
        "pp_size": 2,
        "global_batch": 128,
    }
    data.update(over)
    return TrainingJob.from_mapping(data, "job.yaml")


def test_llama3_8b_parameter_count_is_exact():
    # Meta's published 8,030,261,248 (untied embedding and output layer).
    assert ModelShape(**LLAMA3_8B).n_params() == 8_030_261_248
    tied = ModelShape(**LLAMA3_8B, tied_embeddings=True)
    assert tied.n_params() == 8_030_261_248 - 128256 * 4096


def test_gpt_style_parameter_count_counts_biases_and_layernorm():
    gpt = ModelShape(
        hidden_size=8,
        num_layers=1,
        num_heads=2,
        num_kv_heads=2,
        ffn_size=32,
        vocab_size=10,
        gated_mlp=False,
        tied_embeddings=True,
        linear_bias=True,
        norm="layernorm",
    )
    # qkv 8*24+24, o 8*8+8, mlp 8*32+32 + 32*8+8, two layernorms 2*16, final 16, embedding 80
    assert gpt.n_params() == (192 + 24) + (64 + 8) + (256 + 32 + 256 + 8) + 32 + 16 + 80


def test_derived_sizes_and_device_defaults():
    j = job()
    assert j.gpu == "NVIDIA H100 80GB HBM3"  # the alias resolved to the device table's name
    assert (j.dp_size, j.grad_accum, j.micro_batch) == (16, 8, 1)
    assert j.sequence_parallel is True  # tp > 1: Megatron's default
    assert j.nvlink_domain_size == 8 and j.network_gbps == 50
    assert (j.n_nodes, j.is_multi_node, j.n_nvlink_domains) == (8, True, 8)
    assert j.tokens_per_step == 128 * 8192
    assert j.shard_group_size == 16 and j.sharding == "zero1"
    assert j.stage_layers == (16, 16) and j.rank_layers == (16, 16)
    assert j.label() == "dp16-zero1-tp2-pp2-mb1-ga8"


def test_nvl72_domain_and_trays():
    j = job(gpu="GB200 (NVL72)", n_gpus=128, gpus_per_node=4, tp_size=1, pp_size=1)
    assert j.nvlink_domain_size == 72 and j.n_nodes == 32 and j.n_nvlink_domains == 2
    assert j.sequence_parallel is False and j.peak_precision == "bf16"
    assert job(precision="nvfp4", gpu="GB300 (NVL72)", gpus_per_node=4).peak_precision == "fp4"
    with pytest.raises(TrainingJobError, match="nvlink_domain_size is required.*PCIe"):
        job(gpu="NVIDIA A100-PCIE-40GB", n_gpus=8, tp_size=1, pp_size=1, global_batch=8)
    assert job(gpu="NVIDIA A100-PCIE-40GB", nvlink_domain_size=1).nvlink_domain_size == 1


def test_uneven_virtual_stages_in_megatron_order():
    # Llama 3.1 405B, pp 8 x vp 8: 126 blocks, the first and last virtual stage one block
    # short (embedding and loss counted as a layer each).
    stages = (1,) + (2,) * 62 + (1,)
    j = job(
        model=LLAMA3_405B,
        n_gpus=1024,
        tp_size=8,
        pp_size=8,
        cp_size=2,
        vp_size=8,
        layers_per_stage=stages,
        global_batch=1536,
    )
    assert j.dp_size == 8 and j.grad_accum == 192 and j.n_virtual_stages == 64
    # virtual stage i = chunk * pp + rank: rank 0 holds stage 0 (1 block) + 7 chunks of 2
    assert j.rank_layers == (15,) + (16,) * 6 + (15,)
    with pytest.raises(TrainingJobError, match=r"pp_size \* vp_size = 8 \* 8 = 64 must divide "
                       r"num_layers=126.*layers_per_stage"):  # fmt: skip
        job(model=LLAMA3_405B, n_gpus=512, tp_size=8, pp_size=8, vp_size=8, global_batch=64)
    with pytest.raises(TrainingJobError, match="or layers_per_stage: embedding_and_loss"):
        job(model=LLAMA3_405B, n_gpus=512, tp_size=8, pp_size=8, vp_size=8, global_batch=64)
    # the same split asked for by name (Megatron's embedding and loss accounting)
    named = job(
        model=LLAMA3_405B, n_gpus=1024, tp_size=8, pp_size=8, cp_size=2, vp_size=8,
        layers_per_stage="embedding_and_loss", global_batch=1536,
    )  # fmt: skip
    assert named == j
    with pytest.raises(TrainingJobError, match=r"must be > 1 and divide num_layers \+ 2 = 34"):
        job(layers_per_stage="embedding_and_loss", vp_size=2)  # 4 stages, 32 blocks
    with pytest.raises(TrainingJobError, match="'layers_per_stage'.*must have .* 4 entries"):
        job(layers_per_stage=[16, 16], vp_size=2)
    with pytest.raises(TrainingJobError, match="sum to num_layers=32"):
        job(layers_per_stage=[8, 8, 8, 7], vp_size=2)


def test_vp_and_cp_rules():
    with pytest.raises(TrainingJobError, match=r"field 'vp_size' \(value 2\).*pp_size > 1"):
        job(pp_size=1, vp_size=2)
    with pytest.raises(TrainingJobError, match=r"field 'cp_size' \(value 3\).*seq_len=8192"):
        job(cp_size=3, n_gpus=96, global_batch=64)
    j = job(cp_size=4, global_batch=32)
    assert j.dp_size == 4 and j.grad_accum == 8


def test_tensor_parallel_rules():
    assert job(tp_size=16, pp_size=1).tp_size == 16  # 8 KV heads < tp: replicated KV
    with pytest.raises(TrainingJobError, match=r"'tp_size' \(value 3\).*num_heads=32"):
        job(tp_size=3, n_gpus=96, global_batch=96)
    with pytest.raises(TrainingJobError, match="sequence_parallel=True needs"):
        job(tp_size=1, sequence_parallel=True)


def test_hsdp_group_and_sharding_aliases():
    j = job(tp_size=1, pp_size=1, sharding="hsdp", shard_group_size=8, global_batch=64)
    assert (j.dp_size, j.shard_group_size) == (64, 8)
    assert j.label() == "dp64-hsdp8-mb1-ga1"
    with pytest.raises(TrainingJobError, match=r"'shard_group_size' \(value 6\).*dp_size=64"):
        job(tp_size=1, pp_size=1, sharding="hsdp", shard_group_size=6, global_batch=64)
    with pytest.raises(TrainingJobError, match="shard_group_size is required"):
        job(sharding="hsdp")
    with pytest.raises(TrainingJobError, match="sharding='hsdp'"):
        job(sharding="fsdp", shard_group_size=8)
    assert job(sharding="distributed_optimizer").sharding == "zero1"
    assert job(sharding="ddp").shard_group_size == 1
    assert job(sharding="fsdp_grad_op").sharding == "zero2"


def test_grad_accum_is_derived_and_checked():
    assert job(micro_batch=2, global_batch=256).grad_accum == 8
    assert job(grad_accum=8).grad_accum == 8
    with pytest.raises(TrainingJobError, match=r"'grad_accum' \(value 4\).*= 8"):
        job(grad_accum=4)
    with pytest.raises(TrainingJobError, match=r"'global_batch' \(value 100\).*grad_accum would "
                       r"be 6.25"):  # fmt: skip
        job(global_batch=100)
    with pytest.raises(TrainingJobError, match=r"'dp_size' \(value 8\).*= 16"):
        job(dp_size=8)


@pytest.mark.parametrize(
    ("over", "field", "value"),
    [
        ({"precision": "fp6"}, "precision", "'fp6'"),
        ({"gpu": "H101"}, "gpu", "'H101'"),
        ({"n_gpus": 60, "global_batch": 120}, "n_gpus", "60"),
        ({"n_gpus": 66}, "n_gpus", "66"),
        ({"n_gpus": 12, "tp_size": 1, "pp_size": 1, "global_batch": 12}, "n_gpus", "12"),
        ({"micro_batch": 1.5}, "micro_batch", "1.5"),
        ({"micro_batch": True}, "micro_batch", "True"),
        ({"n_gpus": 0}, "n_gpus", "0"),  # was a ZeroDivisionError deriving dp_size
        ({"global_batch": "32"}, "global_batch", "'32'"),  # quoted in YAML: text, refused
        ({"seq_len": "8192"}, "seq_len", "'8192'"),
        ({"activation_checkpointing": "partial"}, "activation_checkpointing", "'partial'"),
        ({"task": "rlhf"}, "task", "'rlhf'"),
        ({"attention_kernel": "xformers"}, "attention_kernel", "'xformers'"),
        ({"elementwise": "compiled"}, "elementwise", "'compiled'"),
        # FlashAttention-3 is Hopper-only; ring attention (cp) runs flash-attention chunks
        (
            {"attention_kernel": "flash_attention_3", "gpu": "A100-SXM-80GB"},
            "attention_kernel",
            "'flash_attention_3'",
        ),
        (
            {"attention_kernel": "flash_attention_3", "gpu": "B200"},
            "attention_kernel",
            "'flash_attention_3'",
        ),
        ({"attention_kernel": "unfused", "cp_size": 2}, "attention_kernel", "'unfused'"),
        ({"nvlink_domain_size": 0}, "nvlink_domain_size", "0"),
        ({"precision": "nvfp4"}, "precision", "'nvfp4'"),  # an H100 has no FP4 tensor cores
        ({"precision": "fp8", "gpu": "A100-SXM-80GB"}, "precision", "'fp8'"),
        ({"moe": True}, "moe", "True"),
        ({"model": {**LLAMA3_8B, "num_kv_heads": 5}}, "model.num_kv_heads", "5"),
        ({"model": {**LLAMA3_8B, "hidden_size": -1}}, "model.hidden_size", "-1"),
    ],
)
def test_bad_values_are_named(over, field, value):
    with pytest.raises(TrainingJobError) as info:
        job(**over)
    message = str(info.value)
    assert message.startswith("job.yaml: invalid training job")
    assert f"field {field!r} (value {value})" in message
    assert "dp_size" not in message and "grad_accum" not in message  # derived: not blamed


def test_non_finite_numbers_are_errors_not_defaults():
    with pytest.raises(TrainingJobError, match=r"'model.ffn_size' \(value nan\)"):
        job(model={**LLAMA3_8B, "ffn_size": math.nan})
    with pytest.raises(TrainingJobError, match="must be a mapping"):
        TrainingJob.from_mapping([1, 2], "x")


def test_jobs_are_frozen_and_hashable_by_value():
    a, b = job(), job(gpu="NVIDIA H100 80GB HBM3")
    assert a == b and hash(a) == hash(b)
    with pytest.raises(Exception, match="frozen"):
        a.tp_size = 4


def test_from_yaml(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(
        "job:\n  model: {hidden_size: 4096, num_layers: 32, num_heads: 32, num_kv_heads: 8,\n"
        "          ffn_size: 14336, vocab_size: 128256}\n  seq_len: 8192\n  gpu: B200\n"
        "  n_gpus: 16\n  tp_size: 2\n  global_batch: 64\n  precision: mxfp8\n"
    )
    j = TrainingJob.from_yaml(path)
    assert (j.gpu, j.dp_size, j.grad_accum, j.precision) == ("NVIDIA B200", 8, 8, "mxfp8")
    path.write_text("seq_len: 1\nseq_len: 2\n")
    with pytest.raises(TrainingJobError, match=f"{path}.*given twice"):
        TrainingJob.from_yaml(path)
    path.write_text("seq_len: 8192\n")
    with pytest.raises(TrainingJobError, match=f"{path}: invalid training job.*'model'"):
        TrainingJob.from_yaml(path)
    with pytest.raises(TrainingJobError, match="cannot read"):
        TrainingJob.from_yaml(tmp_path / "missing.yaml")
