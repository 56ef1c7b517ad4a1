import json
from pathlib import Path

import pytest

from scaledl.devices import UnknownDeviceError, device_spec, known_devices
from scaledl.devices.specs import GPU_ALIASES, gpu_table, resolve_gpu_name

NEUSIGHT_CONFIGS = Path(__file__).resolve().parents[2] / "external" / "neusight" / "device_configs"


@pytest.mark.parametrize(
    "name", ["cuda:NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA_H100_80GB_HBM3"]
)
def test_gpu_lookup_by_any_spelling(name):
    spec = device_spec(name)
    assert spec.device_name == "NVIDIA H100 80GB HBM3" and spec.kind == "gpu"
    assert spec.peak_flops_per_s("fp32") == pytest.approx(66.908e12)
    assert spec.peak_flops_per_s("bf16") == pytest.approx(989.4e12)
    assert (spec.num_sms, spec.l2_mb, spec.mem_bandwidth_gbps) == (132, 50, 3430)
    assert "NeuSight" in spec.source and "datasheet" in spec.source


def test_unknown_gpu_is_an_error_naming_the_closest():
    with pytest.raises(UnknownDeviceError, match=r"'cuda:NVIDIA H101'.*closest.*H100"):
        device_spec("cuda:NVIDIA H101")


def test_unsupported_precision_is_an_error():
    with pytest.raises(ValueError, match="Tesla T4.*bf16"):
        device_spec("cuda:Tesla T4").peak_flops_per_s("bf16")


def test_every_row_has_a_source_and_positive_specs():
    table = gpu_table()
    assert table["source"].str.len().gt(20).all()
    assert {"NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S"} <= set(table["device_name"])
    records = known_devices(Path("/nonexistent"))
    assert (records[["peak_fp32_tflops", "mem_bandwidth_gbps", "num_sms"]] > 0).all().all()


@pytest.mark.skipif(not NEUSIGHT_CONFIGS.is_dir(), reason="no NeuSight device configs")
def test_neusight_rows_match_neusight_device_configs():
    for path in sorted(NEUSIGHT_CONFIGS.glob("*.json")):
        cfg = json.loads(path.read_text())
        spec = device_spec(cfg["Device"])
        assert spec.peak_tflops["fp32"] * 1e3 == pytest.approx(cfg["SingleFLOPs"]), path
        assert spec.mem_bandwidth_gbps == cfg["Mem_Bw"] and spec.num_sms == cfg["Num_Sm"], path
        assert spec.l2_mb == cfg["L2Cache"] and spec.clock_mhz == cfg["Freq"], path


@pytest.mark.parametrize(
    ("alias", "name", "domain"),
    [
        ("GB200 (NVL72)", "NVIDIA GB200", 72),
        ("gb300  (nvl72)", "NVIDIA GB300", 72),
        ("H100-SXM-80GB (DGX-H100)", "NVIDIA H100 80GB HBM3", 8),
        ("V100-SXM3-32GB (DGX-2)", "Tesla V100-SXM3-32GB", 16),
        ("H100 96GB HBM2e (Grand Teton, 500W limit)", "NVIDIA H100 96GB HBM2e", 8),
    ],
)
def test_published_gpu_names_resolve_through_the_alias_table(alias, name, domain):
    assert resolve_gpu_name(alias) == name
    spec = device_spec(alias)
    assert spec.device_name == name and spec.nvlink_domain == domain
    assert spec.nvlink_gbps > 0 and spec.network_gbps > 0


def test_every_alias_names_a_row_and_an_unknown_alias_is_an_error():
    names = set(gpu_table()["device_name"])
    assert set(GPU_ALIASES.values()) <= names
    with pytest.raises(UnknownDeviceError, match=r"'GB400 \(NVL144\)'.*alias"):
        resolve_gpu_name("GB400 (NVL144)")


def test_low_precision_peaks_and_interconnect_columns():
    h100 = device_spec("NVIDIA H100 80GB HBM3")
    assert h100.peak_flops_per_s("fp8") == pytest.approx(2 * h100.peak_flops_per_s("bf16"), 1e-3)
    with pytest.raises(ValueError, match="H100.*fp4"):
        h100.peak_flops_per_s("fp4")
    gb300 = device_spec("NVIDIA GB300")
    assert gb300.peak_flops_per_s("fp4") > gb300.peak_flops_per_s("fp8")
    pcie = device_spec("NVIDIA A100-PCIE-40GB")  # unknown interconnect: NaN and 0, not a guess
    assert pcie.nvlink_gbps != pcie.nvlink_gbps and pcie.nvlink_domain == 0
    record = h100.to_record()
    assert record["peak_fp8_tflops"] == pytest.approx(1978.9) and record["nvlink_domain"] == 8


def test_every_gpu_of_the_table_has_an_architecture():
    from scaledl.devices import GPU_ARCHITECTURES, gpu_architecture
    from scaledl.devices.specs import gpu_table

    assert set(gpu_table()["device_name"]) == set(GPU_ARCHITECTURES)
    assert gpu_architecture("H100 96GB HBM2e (Grand Teton, 500W limit)") == "hopper"
    assert gpu_architecture("GB200 (NVL72)") == "blackwell"
    assert gpu_architecture("A100-SXM-80GB") == "ampere"


def test_power_capped_h100_peaks_lie_between_the_sxm_and_nvl_datasheets():
    # torchtitan's 500 W H100 96GB: "actual peak TFLOPs between SXM and NVL" (the row's source)
    capped, sxm = device_spec("NVIDIA H100 96GB HBM2e"), device_spec("NVIDIA H100 80GB HBM3")
    nvl_dense_tflops = {"bf16": 835.5, "fp16": 835.5, "fp8": 1670.5, "fp32": 60.0}
    for precision, nvl in nvl_dense_tflops.items():
        peak = capped.peak_flops_per_s(precision) / 1e12
        assert nvl < peak < sxm.peak_flops_per_s(precision) / 1e12
        assert peak == pytest.approx((nvl + sxm.peak_flops_per_s(precision) / 1e12) / 2, rel=1e-3)
    assert "between SXM and NVL" in capped.source and "NVL datasheet" in capped.source


@pytest.mark.parametrize(
    ("name", "device"),
    [
        ("H200", "NVIDIA H200"),
        ("NVIDIA H200", "NVIDIA H200"),
        ("B200", "NVIDIA B200"),
        ("GB200", "NVIDIA GB200"),
        ("A10", "NVIDIA A10"),  # a whole word: not the A100 rows
        ("T4", "Tesla T4"),
        ("V100 SXM2", "Tesla V100-SXM2-32GB"),
        ("NVIDIA A100 SXM4 80GB", "NVIDIA A100-SXM4-80GB"),
        ("H100 PCIe", "NVIDIA H100 PCIe"),
    ],
)
def test_a_short_name_one_row_has_resolves(name, device):
    assert resolve_gpu_name(name) == device


@pytest.mark.parametrize(
    ("name", "rows"),
    [
        ("A100", ["NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-40GB", "NVIDIA A100-SXM4-40GB",
                  "NVIDIA A100-SXM4-80GB"]),
        ("NVIDIA H100", ["NVIDIA H100 80GB HBM3", "NVIDIA H100 96GB HBM2e", "NVIDIA H100 PCIe"]),
        ("a100 80gb", ["NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-80GB"]),
    ],
)  # fmt: skip
def test_an_ambiguous_short_name_lists_the_rows_it_matches(name, rows):
    with pytest.raises(UnknownDeviceError) as info:
        resolve_gpu_name(name)
    assert f"device {name!r} matches {len(rows)} GPUs of the device table" in str(info.value)
    assert f"{rows}; give one of them" in str(info.value)


def test_closest_names_put_the_same_gpu_model_first():
    def closest(name):
        with pytest.raises(UnknownDeviceError) as info:
            resolve_gpu_name(name)
        return str(info.value).split("closest: ")[1].split("]")[0]

    assert closest("H100 NVL").startswith(
        "['NVIDIA H100 80GB HBM3', 'NVIDIA H100 96GB HBM2e', 'NVIDIA H100 PCIe'"
    )
    assert closest("H20").startswith("['NVIDIA H200'")  # containing it first
    assert closest("A1000").startswith("['NVIDIA A100 80GB PCIe'")
    with pytest.raises(UnknownDeviceError, match="is not in the device table"):
        resolve_gpu_name("MI300X")  # no row of another vendor is guessed
