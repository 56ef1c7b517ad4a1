"""The device table's columns that the operator and kernel models read, per (device, precision).

Apart from :mod:`scaledl.models.operators` (scikit-learn) so that composing a layout from a
loaded predictor does not import scikit-learn.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from scaledl.devices.specs import DeviceSpec, device_spec

#: Device columns the features read (:func:`device_columns`).
DEVICE_COLUMNS = ("peak_tflops", "mem_bandwidth_gbps", "num_sms", "l2_mb", "clock_mhz")


def device_columns(device_names: Iterable[str], precisions: Iterable[str]) -> pd.DataFrame:
    """Device columns (:data:`DEVICE_COLUMNS`) for each (device, precision) pair.

    Args:
        device_names: one device name per row.
        precisions: the precision of each row (the matmul peak is that precision's).

    Returns:
        DataFrame with :data:`DEVICE_COLUMNS`, one row per input row.

    Raises:
        scaledl.devices.UnknownDeviceError: a device is not in the device table.
        ValueError: a device does not support a precision.
    """
    pairs = pd.DataFrame({"device": list(device_names), "precision": list(precisions)})
    codes = pairs.groupby(["device", "precision"], sort=False).ngroup().to_numpy()
    unique = pairs.drop_duplicates().reset_index(drop=True)  # ngroup's order
    rows = []
    for name, precision in zip(unique["device"], unique["precision"], strict=True):
        spec: DeviceSpec = device_spec(str(name))
        rows.append(
            {
                "peak_tflops": spec.peak_flops_per_s(str(precision)) / 1e12,
                "mem_bandwidth_gbps": spec.mem_bandwidth_gbps,
                "num_sms": spec.num_sms,
                "l2_mb": spec.l2_mb,
                "clock_mhz": spec.clock_mhz,
            }
        )
    table = pd.DataFrame(rows, columns=list(DEVICE_COLUMNS))
    return table.iloc[codes].reset_index(drop=True)
