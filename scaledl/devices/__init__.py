"""Device specs (peak FLOP/s per precision, bandwidth, SMs, L2, clock, memory) for GPUs and CPUs."""

from scaledl.devices.specs import (
    PRECISIONS,
    DeviceSpec,
    UnknownDeviceError,
    device_spec,
    known_devices,
    normalise_name,
)

__all__ = [
    "PRECISIONS",
    "DeviceSpec",
    "UnknownDeviceError",
    "device_spec",
    "known_devices",
    "normalise_name",
]
