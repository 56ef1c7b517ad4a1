"""Device specs (peak FLOP/s per precision, bandwidth, SMs, L2, clock, memory) for GPUs and CPUs."""

from scaledl.devices.specs import (
    GPU_ALIASES,
    GPU_ARCHITECTURES,
    PRECISIONS,
    DeviceSpec,
    UnknownDeviceError,
    device_spec,
    gpu_architecture,
    known_devices,
    normalise_name,
    resolve_gpu_name,
)

__all__ = [
    "GPU_ALIASES",
    "GPU_ARCHITECTURES",
    "PRECISIONS",
    "DeviceSpec",
    "UnknownDeviceError",
    "device_spec",
    "gpu_architecture",
    "known_devices",
    "normalise_name",
    "resolve_gpu_name",
]
