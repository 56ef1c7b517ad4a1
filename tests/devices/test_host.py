import math

import pytest

from scaledl.devices import UnknownDeviceError, device_spec, known_devices
from scaledl.devices.host import probe_host, store_host_spec
from scaledl.devices.specs import host_spec_path


def test_cpu_host_is_measured_once_then_looked_up(tmp_path):
    name = "cpu:Test CPU 9000"
    with pytest.raises(UnknownDeviceError, match="no measured host spec.*--probe"):
        device_spec(name, hosts_dir=tmp_path)
    spec = probe_host(gemm_size=64, copy_mib=1, repeats=2, device_name=name)
    assert spec.measured and spec.peak_tflops["fp32"] > 0 and spec.mem_bandwidth_gbps > 0
    assert math.isnan(spec.peak_tflops["fp16"])
    path = store_host_spec(spec, tmp_path)
    assert path == host_spec_path(name, tmp_path) and path.is_file()
    again = device_spec(name, hosts_dir=tmp_path)
    assert again.peak_tflops["fp32"] == pytest.approx(spec.peak_tflops["fp32"])
    assert "measured on host" in again.source
    assert name in set(known_devices(tmp_path)["device_name"])
