"""Tests of the LLM kernel models (fitted on Vidur's GEMMs, and the roofline baseline)."""

import importlib.util
import math
from pathlib import Path

import pandas as pd
import pytest

from scaledl.devices.specs import UnknownDeviceError, device_spec
from scaledl.models.llm_kernels import (
    ATTENTION_BACKWARD_FACTOR,
    evaluate_attention_model,
    evaluate_gemm_table,
    evaluate_kernel_model,
    flash_fit,
    fp8_rowwise_speedup,
    kernel_model,
    load_flash_table,
    load_vidur_gemms,
    measured_fit,
    reference_gpu,
    roofline_kernel_model,
)

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def test_roofline_gemm_is_flops_over_peak_for_a_large_square_gemm():
    model = roofline_kernel_model(H100)
    n = 8192
    expected = 2 * n**3 / (989.4e12)
    assert model.gemm_s(n, n, n, "bf16") == pytest.approx(expected, rel=1e-9)


def test_roofline_memory_and_memory_bound_gemm():
    model = roofline_kernel_model(H100)
    bandwidth = device_spec(H100).mem_bandwidth_gbps * 1e9
    assert model.memory_s(1e9) == pytest.approx(1e9 / bandwidth)
    # m = 1: a matrix-vector product is memory bound
    moved = 2 * (1 * 8192 + 8192 * 8192 + 1 * 8192)
    assert model.gemm_s(1, 8192, 8192, "bf16") == pytest.approx(moved / bandwidth)


def test_fitted_model_is_slower_than_the_roofline_and_reaches_a_realistic_efficiency():
    fitted, roof = kernel_model(H100), roofline_kernel_model(H100)
    for m, n, k in [(4096, 4096, 4096), (16384, 8192, 2048), (64, 512, 512)]:
        assert fitted.gemm_s(m, n, k, "bf16") > roof.gemm_s(m, n, k, "bf16")
    n = 8192
    efficiency = 2 * n**3 / fitted.gemm_s(n, n, n, "bf16") / 989.4e12
    assert 0.5 < efficiency < 0.95


def test_fitted_model_reproduces_vidur_gemms_within_ten_percent_on_average():
    gemms = load_vidur_gemms("a100")
    model = kernel_model(A100)
    rows = gemms[gemms["m"] >= 1024].sample(200, random_state=0)
    errors = [
        abs(model.gemm_s(int(r.m), int(r.n), int(r.k), "fp16") * 1e3 - r.time_ms) / r.time_ms
        for r in rows.itertuples()
    ]
    assert sum(errors) / len(errors) < 0.10


def test_held_out_errors_of_the_gemm_model():
    result = evaluate_kernel_model().set_index(["gpu", "protocol"])
    assert set(result.index) == {
        (g, p) for g in ("a100", "h100") for p in ("in_sample", "random", "transfer")
    }
    assert (result["mre"] < 0.15).all()
    assert result.loc[("h100", "transfer"), "fitted_on"] == "a100"


def test_fit_is_deterministic():
    first = measured_fit("h100")
    measured_fit.cache_clear()
    assert measured_fit("h100") == first


def test_transfer_rule_takes_the_closest_measured_gpu_by_tensor_peak():
    assert reference_gpu("Tesla V100-SXM2-32GB") == "a100"
    assert reference_gpu("NVIDIA H200") == "h100"
    assert reference_gpu("NVIDIA B200") == "h100"
    b200, h100 = kernel_model("NVIDIA B200"), kernel_model(H100)
    assert b200.fit == h100.fit
    assert b200.gemm_s(8192, 8192, 8192, "bf16") < h100.gemm_s(8192, 8192, 8192, "bf16")


def test_fp8_uses_the_fp8_peak_and_pays_the_activation_cast():
    model = kernel_model(H100)
    m = n = k = 8192
    bf16, fp8 = model.gemm_s(m, n, k, "bf16"), model.gemm_s(m, n, k, "fp8")
    assert 0.45 * bf16 < fp8 < 0.75 * bf16
    assert model.gemm_s(m, n, k, "mxfp8") == fp8
    with pytest.raises(ValueError, match="fp4"):
        model.gemm_s(m, n, k, "nvfp4")  # H100 has no FP4 peak
    assert kernel_model("NVIDIA B200").gemm_s(m, n, k, "nvfp4") > 0


def test_fp8_rowwise_speedup_reads_torchaos_grid_and_interpolates_between_its_points():
    assert fp8_rowwise_speedup(1024, 1024, 1024) == pytest.approx(0.42)
    assert fp8_rowwise_speedup(32768, 16384, 32768) == pytest.approx(1.73)
    assert fp8_rowwise_speedup(8192, 8192, 16384) == pytest.approx(1.31)
    # halfway in log2 between m = 8192 (1.20) and 16384 (1.33) at k = n = 8192: geometric mean
    assert fp8_rowwise_speedup(11585, 8192, 8192) == pytest.approx(math.sqrt(1.20 * 1.33), rel=1e-3)
    # outside the grid the nearest edge holds (no extrapolation)
    assert fp8_rowwise_speedup(131072, 8192, 8192) == pytest.approx(1.41)
    assert fp8_rowwise_speedup(64, 64, 64) == pytest.approx(0.42)
    with pytest.raises(ValueError, match="k"):
        fp8_rowwise_speedup(1024, 0, 1024)


def test_only_the_fitted_model_composes_fp8_rowwise_per_linear():
    assert kernel_model(H100).linear_speedup(8192, 8192, 8192, "fp8_rowwise") == pytest.approx(1.20)
    assert kernel_model(H100).linear_speedup(8192, 8192, 8192, "fp8") is None
    assert roofline_kernel_model(H100).linear_speedup(8192, 8192, 8192, "fp8_rowwise") is None


def test_bad_rowwise_table_names_file_row_and_column(tmp_path):
    bad = tmp_path / "rowwise.csv"
    bad.write_text("m,k,n,speedup_vs_bf16\n1024,1024,1024,0.4\n1024,1024,2048,-1\n")
    with pytest.raises(ValueError, match=r"rowwise.csv: row 2, column 'speedup_vs_bf16'"):
        fp8_rowwise_speedup(1024, 1024, 1024, path=bad)
    holes = tmp_path / "holes.csv"
    holes.write_text("m,k,n,speedup_vs_bf16\n1024,1024,1024,0.4\n2048,2048,2048,0.5\n")
    with pytest.raises(ValueError, match="full m x k x n grid"):
        fp8_rowwise_speedup(1024, 1024, 1024, path=holes)


def test_attention_causal_halves_the_work_and_backward_costs_more():
    model = kernel_model(H100)
    full = model.attention_s(2, 32, 4096, 4096, 128, False, False)
    causal = model.attention_s(2, 32, 4096, 4096, 128, True, False)
    backward = model.attention_s(2, 32, 4096, 4096, 128, True, True)
    assert 0.4 * full < causal < 0.7 * full
    t0 = model.fit.t0_s
    assert ATTENTION_BACKWARD_FACTOR * (causal - t0) < backward - t0 < 4 * (causal - t0)
    roof = roofline_kernel_model(H100).attention_s(2, 32, 4096, 4096, 128, True, False)
    assert roof == pytest.approx(4 * 2 * 32 * 4096 * 2048 * 128 / 989.4e12)
    assert causal > roof


def test_bad_input_is_refused_with_the_field_named():
    model = kernel_model(H100)
    with pytest.raises(ValueError, match="m must be"):
        model.gemm_s(0, 1, 1, "bf16")
    with pytest.raises(ValueError, match="precision"):
        model.gemm_s(1, 1, 1, "int4")
    with pytest.raises(ValueError, match="bytes_moved"):
        model.memory_s(-1.0)
    with pytest.raises(ValueError, match="causal"):
        model.attention_s(1, 1, 4096, 1024, 128, True, False)
    with pytest.raises(UnknownDeviceError):
        kernel_model("NVIDIA Z999")
    assert math.isfinite(kernel_model("A100-SXM-80GB").gemm_s(1, 1, 1, "fp16"))


def _extract_script():
    path = Path(__file__).resolve().parents[2] / "scripts" / "extract_vidur_kernels.py"
    spec = importlib.util.spec_from_file_location("extract_vidur_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_extraction_gives_per_rank_gemm_shapes_with_grouped_query_attention():
    raw = pd.DataFrame(
        {
            "n_embd": [8192],
            "n_head": [64],
            "n_kv_head": [8],
            "n_expanded_embd": [28672],
            "num_tensor_parallel_workers": [8],
            "use_gated_mlp": ["True"],
            "num_tokens": [4096],
            **{
                f"time_stats.{op}.median": [1.0]
                for op in (
                    "attn_pre_proj",
                    "attn_post_proj",
                    "mlp_up_proj",
                    "mlp_down_proj",
                    "input_layernorm",
                    "mlp_act",
                    "add",
                )
            },
        }
    )
    script = _extract_script()
    gemms = script.gemm_rows(raw, "llama-70b").set_index("op")
    assert tuple(gemms.loc["attn_pre_proj", ["m", "n", "k"]]) == (4096, (8 + 2 * 1) * 128, 8192)
    assert tuple(gemms.loc["attn_post_proj", ["n", "k"]]) == (8192, 1024)
    assert tuple(gemms.loc["mlp_up_proj", ["n", "k"]]) == (2 * 28672 // 8, 8192)
    assert tuple(gemms.loc["mlp_down_proj", ["n", "k"]]) == (8192, 28672 // 8)
    moved = script.elementwise_rows(raw, "llama-70b").set_index("op")["bytes"]
    assert moved["mlp_act"] == 3 * 4096 * (28672 // 8) * 2


def test_committed_kernel_tables_are_readable_and_cover_both_gpus():
    for gpu, shapes in (("a100", 4000), ("h100", 1000)):
        gemms = load_vidur_gemms(gpu)
        assert len(gemms) > shapes
        assert gemms["m"].min() >= 64


def test_gemm_table_evaluation_reports_ratio_and_error_per_gpu():
    model = kernel_model("NVIDIA L4")
    shapes = [(512, 1024, 1024), (4096, 4096, 1024)]
    table = pd.DataFrame(
        [
            {"gpu": "NVIDIA L4", "m": m, "n": n, "k": k, "precision": "fp32",
             "time_ms": 2e3 * model.gemm_s(m, n, k, "fp32")}
            for m, n, k in shapes
        ]
    )  # fmt: skip
    result = evaluate_gemm_table(table).iloc[0]
    assert result["reference"] == "a100"
    assert result["median_ratio"] == pytest.approx(2.0)
    assert result["mre"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="precision"):
        evaluate_gemm_table(table.drop(columns="precision"))


def test_flash_efficiency_fits_the_published_kernel_throughputs():
    fit = flash_fit()
    assert 0.5 < fit.forward_e < 0.8 and 0.4 < fit.backward_e < fit.forward_e
    assert 0.7 < fit.causal_factor < 1.0
    result = evaluate_attention_model().set_index("kernel")
    assert result.loc["cudnn", "mre_leave_one_out"] < 0.1
    # FlashAttention-2 on H100 is much slower than the cuDNN kernel the model follows
    assert result.loc["flash_attention_2", "median_vs_default"] < 0.8
    h100 = kernel_model(H100)
    flops = 4 * 1 * 16 * 16384 * 16384 * 128
    seconds = h100.attention_s(1, 16, 16384, 16384, 128, False, False)
    assert flops / seconds / 1e12 == pytest.approx(595, rel=0.1)  # cuDNN's published 16k point


def test_attention_kernel_picks_its_own_fit_on_hopper_and_the_default_on_ampere():
    args = (2, 32, 8192, 8192, 128, True)
    h100 = kernel_model(H100)
    for backward in (False, True):
        cudnn = h100.attention_s(*args, backward)
        assert h100.attention_s(*args, backward, "cudnn") == cudnn
        fa2 = h100.attention_s(*args, backward, "flash_attention_2")
        fa3 = h100.attention_s(*args, backward, "flash_attention_3")
        # published H100 throughputs: FA2 about 60% of cuDNN, FA3 about level with it
        assert 1.4 < fa2 / cudnn < 1.9
        assert 0.75 < fa3 / cudnn < 1.1
    a100 = kernel_model("NVIDIA A100-SXM4-80GB")
    assert a100.attention_s(*args, True, "flash_attention_2") == a100.attention_s(*args, True)
    b200 = kernel_model("NVIDIA B200")
    assert b200.attention_s(*args, True, "flash_attention_2") > b200.attention_s(*args, True)
    for gpu in ("NVIDIA A100-SXM4-80GB", "NVIDIA B200"):
        for model in (kernel_model(gpu), roofline_kernel_model(gpu)):
            with pytest.raises(ValueError, match="flash_attention_3 runs on Hopper"):
                model.attention_s(*args, False, "flash_attention_3")
    with pytest.raises(ValueError, match="attention kernel must be one of"):
        h100.attention_s(*args, False, "xformers")
    roof = roofline_kernel_model(H100)
    assert roof.attention_s(*args, True, "flash_attention_2") == roof.attention_s(*args, True)


def test_unfused_attention_is_two_gemms_and_the_softmax_traffic_of_full_scores():
    a100 = kernel_model("NVIDIA A100-SXM4-80GB")
    bh, s, d = 16 * 16, 1024, 96
    forward = a100.attention_s(16, 16, s, s, d, True, False, "unfused")
    gemms = a100.gemm_s(bh * s, s, d, "bf16") + a100.gemm_s(bh * s, d, s, "bf16")
    assert forward == pytest.approx(gemms + a100.memory_s(9.0 * bh * s * s))
    # the mask does not save work: causal and full cost the same
    assert forward == a100.attention_s(16, 16, s, s, d, False, False, "unfused")
    backward = a100.attention_s(16, 16, s, s, d, True, True, "unfused")
    gemms_b = 2 * a100.gemm_s(bh * s, d, s, "bf16") + a100.gemm_s(bh * s, s, d, "bf16")
    gemms_b += a100.gemm_s(bh * s, d, s, "bf16")  # dP, dV, dQ, dK (square: same shapes)
    assert backward == pytest.approx(gemms_b + a100.memory_s(11.0 * bh * s * s))
    # FlashAttention's paper: 2-4x faster than standard attention at 1-2k tokens (fwd + bwd)
    flash = a100.attention_s(16, 16, s, s, d, True, False) + a100.attention_s(
        16, 16, s, s, d, True, True
    )
    assert 2.0 < (forward + backward) / flash < 4.5
    # V100 has no bf16 tensor cores: the GEMMs run in fp16
    v100 = kernel_model("Tesla V100-SXM3-32GB")
    assert v100.attention_s(8, 16, s, s, d, True, False, "unfused") > 0


def test_bad_flash_table_names_file_row_and_column(tmp_path):
    path = tmp_path / "flash.csv"
    path.write_text(
        "kernel,direction,causal,seq_len,batch,heads,head_dim,tflops\n"
        "cudnn,forward,false,512,32,16,128,497\n"
        "cudnn,sideways,false,512,32,16,128,497\n"
    )
    with pytest.raises(ValueError, match=r"flash\.csv: row 2, column 'direction'"):
        load_flash_table(path)
