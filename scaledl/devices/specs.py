"""Device specifications: peak FLOP/s per precision, memory bandwidth, SMs, L2, clock, memory.

One table serves every device-aware model (roofline features of the operator models, the
analytical baseline, the predictor's domain check):

* **GPUs** come from ``scaledl/devices/gpus.csv``, one row per device as
  ``torch.cuda.get_device_name`` reports it, each row with its ``source``. The nine NeuSight GPUs
  take FP32 peak, bandwidth, SMs, cores per SM, L2, clock and memory from NeuSight's
  ``device_configs`` (sitar-lab/NeuSight, MIT), so operator features match the data the models
  train on; tensor-core peaks (TF32, FP16, BF16, dense, without 2:4 sparsity) and the other
  data-centre GPUs come from the vendors' datasheets named in ``source``. A precision a device
  does not support is empty (NaN) in the table and an error when asked for.
* **Interconnect** (``nvlink_gbps``, ``network_gbps``, ``nvlink_domain``) is per GPU and one
  direction, GB/s, as in the vendor's reference system (DGX / HGX / NVL72) named in ``source``:
  ``nvlink_gbps`` the GPU's NVLink bandwidth, ``network_gbps`` its share of the scale-out NICs,
  ``nvlink_domain`` the GPUs one NVLink/NVSwitch fabric joins (8 on an HGX baseboard, 72 on
  NVL72, 16 on DGX-2). Empty (NaN, domain 0) for PCIe cards and CPUs: unknown, never guessed.
* **CPU hosts** are measured, not looked up: :mod:`scaledl.devices.host` runs a short GEMM and a
  memory-copy probe once per host and stores the spec as JSON under a hosts directory
  (``<data>/devices/hosts`` by default, ``SCALEDL_DATA_DIR`` moves it).

Names are matched after normalisation (``cuda:`` prefix dropped, case, spaces, ``_`` and ``-``
ignored), so ``cuda:NVIDIA H100 80GB HBM3``, ``NVIDIA H100 80GB HBM3`` and NeuSight's folder name
``NVIDIA_H100_80GB_HBM3`` are one device; the names published benchmarks use (``GB200 (NVL72)``,
``H100-SXM-80GB (DGX-H100)``) resolve through the one alias table :data:`GPU_ALIASES`. A short
name whose words (after an ``NVIDIA``/``Tesla`` prefix) start with a GPU model (``H200``,
``V100 SXM2``) resolves when exactly one row has all its words; when several do (``A100``,
``NVIDIA H100``) it is an :class:`UnknownDeviceError` listing them. Any other name is an
:class:`UnknownDeviceError` naming the device and the closest known names (the names containing
it first, then the most similar): never a guess.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import pandas as pd

from scaledl.layout import DataLayout

GPU_TABLE = Path(__file__).with_name("gpus.csv")
#: Precisions with a peak column in the table (``peak_<precision>_tflops``).
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4")
_NUMERIC = ("mem_bandwidth_gbps", "num_sms", "cores_per_sm", "l2_mb", "clock_mhz", "memory_gb")


class UnknownDeviceError(KeyError):
    """A device is not in the device table (and, for a CPU, has no stored probe)."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class DeviceSpec:
    """Specification of one device.

    Attributes:
        device_name: the name as the device reports it (``NVIDIA H100 80GB HBM3``,
            ``cpu:<processor model>``).
        kind: ``"gpu"`` or ``"cpu"``.
        peak_tflops: peak dense throughput per precision in TFLOP/s (NaN: unsupported).
        mem_bandwidth_gbps: peak (GPU: datasheet) or measured (CPU) memory bandwidth, GB/s.
        num_sms: streaming multiprocessors (GPU) or cores used by the probe (CPU).
        cores_per_sm: FP32 cores per SM (GPU), 1 for a CPU.
        l2_mb: L2 cache in MiB (CPU: per core as the kernel reports it).
        clock_mhz: boost (GPU) or nominal (CPU) clock in MHz.
        memory_gb: device memory in GB (CPU: host RAM).
        source: where the numbers come from (datasheet, NeuSight config, probe and date).
        measured: whether the numbers were measured on the device (CPU probe).
        nvlink_gbps: NVLink bandwidth per GPU, one direction, GB/s (NaN: none or unknown).
        network_gbps: scale-out NIC bandwidth per GPU, one direction, GB/s (NaN: unknown).
        nvlink_domain: GPUs joined by one NVLink fabric (0: none or unknown).
    """

    device_name: str
    kind: str
    peak_tflops: dict[str, float]
    mem_bandwidth_gbps: float
    num_sms: float
    cores_per_sm: float
    l2_mb: float
    clock_mhz: float
    memory_gb: float
    source: str
    measured: bool = False
    nvlink_gbps: float = math.nan
    network_gbps: float = math.nan
    nvlink_domain: int = 0

    def peak_flops_per_s(self, precision: str = "fp32") -> float:
        """Peak FLOP/s of ``precision``.

        Args:
            precision: ``fp32``, ``tf32``, ``fp16``, ``bf16``, ``fp8`` or ``fp4`` (dense).

        Returns:
            FLOP/s (the table's TFLOP/s times 1e12).

        Raises:
            ValueError: the precision is unknown or the device does not support it.
        """
        value = self.peak_tflops.get(precision, math.nan)
        if precision not in PRECISIONS or not value > 0:
            raise ValueError(
                f"device {self.device_name!r}: no peak for precision {precision!r} "
                f"(known: {sorted(k for k, v in self.peak_tflops.items() if v > 0)})"
            )
        return value * 1e12

    def to_record(self) -> dict:
        """Flat dict: ``peak_<precision>_tflops`` columns plus the other fields."""
        record = asdict(self)
        peaks = record.pop("peak_tflops")
        return {**{f"peak_{p}_tflops": peaks.get(p, math.nan) for p in PRECISIONS}, **record}

    @classmethod
    def from_record(cls, record: dict, source_file: str = "<record>") -> DeviceSpec:
        """Inverse of :meth:`to_record`.

        Raises:
            ValueError: a numeric field is missing or not positive (names the file and field).
        """
        values = {}
        for name in _NUMERIC:
            value = record.get(name)
            try:
                value = float(value)
            except (TypeError, ValueError):
                value = math.nan
            if not value > 0:
                raise ValueError(
                    f"{source_file}: device {record.get('device_name')!r}: field {name!r} must "
                    f"be > 0, got {record.get(name)!r}"
                )
            values[name] = value
        peaks = {p: _float_or_nan(record.get(f"peak_{p}_tflops")) for p in PRECISIONS}
        if not peaks["fp32"] > 0:
            raise ValueError(
                f"{source_file}: device {record.get('device_name')!r}: field "
                f"'peak_fp32_tflops' must be > 0, got {record.get('peak_fp32_tflops')!r}"
            )
        domain = _float_or_nan(record.get("nvlink_domain"))
        if domain == domain and not float(domain).is_integer():
            raise ValueError(
                f"{source_file}: device {record.get('device_name')!r}: field 'nvlink_domain' "
                f"must be a whole number of GPUs, got {record.get('nvlink_domain')!r}"
            )
        return cls(
            device_name=str(record["device_name"]),
            nvlink_gbps=_float_or_nan(record.get("nvlink_gbps")),
            network_gbps=_float_or_nan(record.get("network_gbps")),
            nvlink_domain=int(domain) if domain == domain else 0,
            kind=str(record.get("kind", "gpu")),
            peak_tflops=peaks,
            source=str(record.get("source", "")),
            measured=bool(record.get("measured", False)),
            **values,
        )


def _float_or_nan(value) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.nan
    return value if value > 0 else math.nan


def normalise_name(name: str) -> str:
    """Canonical key of a device name: no ``cuda:`` prefix, lowercase, one space separators."""
    name = re.sub(r"^cuda(:\d+)?:", "", str(name).strip(), flags=re.I)
    return re.sub(r"[\s_\-]+", " ", name).strip().lower()


@cache
def gpu_table() -> pd.DataFrame:
    """The shipped GPU table (``gpus.csv``), one row per GPU, validated.

    Raises:
        ValueError: a row has a missing or non-positive number (names the file and field).
    """
    table = pd.read_csv(GPU_TABLE)
    for record in table.to_dict("records"):
        DeviceSpec.from_record({**record, "kind": "gpu"}, str(GPU_TABLE))
    keys = table["device_name"].map(normalise_name)
    if keys.duplicated().any():
        duplicates = list(table["device_name"][keys.duplicated()])
        raise ValueError(f"{GPU_TABLE}: field 'device_name': duplicate device(s) {duplicates}")
    return table


def default_hosts_dir() -> Path:
    """Where measured CPU host specs are stored: ``<data>/devices/hosts`` (``DataLayout``)."""
    return DataLayout.from_env().hosts_dir


def host_spec_path(device_name: str, hosts_dir: Path | None = None) -> Path:
    """The JSON file holding the measured spec of a CPU device name."""
    slug = re.sub(r"[^a-z0-9]+", "-", normalise_name(device_name)).strip("-")
    return Path(hosts_dir or default_hosts_dir()) / f"{slug}.json"


#: Other names of a GPU in the table: the names published benchmarks use (system and variant
#: notes included), as ``alias -> device_name``. Matched after :func:`normalise_name`. The one
#: alias table: :func:`resolve_gpu_name`, :func:`device_spec` and the importers read it.
GPU_ALIASES = {
    # Published large-scale training tables (external/scale_runs)
    "H100-SXM-80GB": "NVIDIA H100 80GB HBM3",
    "H100-SXM-80GB (DGX-H100)": "NVIDIA H100 80GB HBM3",
    "H100-SXM-80GB (system not named; H100 FP8 example)": "NVIDIA H100 80GB HBM3",
    "H100 SXM": "NVIDIA H100 80GB HBM3",
    "H100 SXM5": "NVIDIA H100 80GB HBM3",
    "A100-SXM-80GB": "NVIDIA A100-SXM4-80GB",
    "A100-SXM-80GB (Selene)": "NVIDIA A100-SXM4-80GB",
    "A100-SXM-80GB (DGX A100, Selene)": "NVIDIA A100-SXM4-80GB",
    "A100-SXM-40GB": "NVIDIA A100-SXM4-40GB",
    "A100-SXM-40GB (DGX-A100)": "NVIDIA A100-SXM4-40GB",
    "V100-SXM3-32GB": "Tesla V100-SXM3-32GB",
    "V100-SXM3-32GB (DGX-2)": "Tesla V100-SXM3-32GB",
    "H100 96GB HBM2e (Grand Teton, 500W limit)": "NVIDIA H100 96GB HBM2e",
    "H100 (HBM2e 94-96GB, lower-TDP SXM variant)": "NVIDIA H100 96GB HBM2e",
    "H200-SXM-141GB": "NVIDIA H200",
    "H200 SXM": "NVIDIA H200",
    "H200": "NVIDIA H200",
    "B200": "NVIDIA B200",
    "B200 (DGX-B200)": "NVIDIA B200",
    "B300": "NVIDIA B300",
    "B300 (DGX-B300)": "NVIDIA B300",
    "GB200": "NVIDIA GB200",
    "GB200 (NVL72)": "NVIDIA GB200",
    "GB300": "NVIDIA GB300",
    "GB300 (NVL72)": "NVIDIA GB300",
}


#: The architecture of each GPU of the table (NVIDIA's generation names), by ``device_name``:
#: kernels written for one generation (FlashAttention-3: Hopper) and the leave-one-generation-out
#: protocol read it. Every row of ``gpus.csv`` has one (tested).
GPU_ARCHITECTURES = {
    "Tesla P4": "pascal",
    "Tesla P100-PCIE-16GB": "pascal",
    "Tesla V100-PCIE-32GB": "volta",
    "Tesla V100-SXM2-32GB": "volta",
    "Tesla V100-SXM3-32GB": "volta",
    "Tesla T4": "turing",
    "NVIDIA A10": "ampere",
    "NVIDIA A100-PCIE-40GB": "ampere",
    "NVIDIA A100-SXM4-40GB": "ampere",
    "NVIDIA A100 80GB PCIe": "ampere",
    "NVIDIA A100-SXM4-80GB": "ampere",
    "NVIDIA L4": "ada",
    "NVIDIA L40S": "ada",
    "NVIDIA H100 PCIe": "hopper",
    "NVIDIA H100 80GB HBM3": "hopper",
    "NVIDIA H100 96GB HBM2e": "hopper",
    "NVIDIA H200": "hopper",
    "NVIDIA B200": "blackwell",
    "NVIDIA B300": "blackwell",
    "NVIDIA GB200": "blackwell",
    "NVIDIA GB300": "blackwell",
}


def gpu_architecture(name: str) -> str:
    """The architecture of a GPU (:data:`GPU_ARCHITECTURES`) given by any name or alias.

    Raises:
        UnknownDeviceError: not a GPU of the table (:func:`resolve_gpu_name`).
        KeyError: a row of the table without an architecture (a table edit missed it).
    """
    device = resolve_gpu_name(name)
    try:
        return GPU_ARCHITECTURES[device]
    except KeyError:
        raise KeyError(f"{device!r} has no architecture in GPU_ARCHITECTURES") from None


def resolve_gpu_name(name: str) -> str:
    """The device table's name of a GPU given by its table name, an alias or any spelling.

    Args:
        name: ``cuda:NVIDIA H100 80GB HBM3``, ``NVIDIA_H100_80GB_HBM3``, ``GB200 (NVL72)``...

    Returns:
        The ``device_name`` of its row in ``gpus.csv``.

    A name that is neither a table name nor an alias, but whose words start with a GPU model
    (``H200``, ``V100 SXM2``; an ``NVIDIA``/``Tesla`` prefix ignored), is the one row having all
    its words (whole words: ``A10`` is not ``A100``).

    Raises:
        UnknownDeviceError: several rows have its words (``A100``: listed), or none and it is
            neither a table name nor an alias (:data:`GPU_ALIASES`): the message names the
            value and the closest known names (those containing it, then the rows of the most
            similar GPU models, then the most similar names).
    """
    key = normalise_name(name)
    names, aliases = _table_keys(), _alias_keys()
    if key in names:
        return names[key]
    if key in aliases:
        return aliases[key]
    matches = _word_matches(key)
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise UnknownDeviceError(
            f"device {name!r} matches {len(matches)} GPUs of the device table {GPU_TABLE}: "
            f"{matches}; give one of them (or an alias, scaledl.devices.specs.GPU_ALIASES)"
        )
    known = {**aliases, **names}
    contained = [known[k] for k in sorted(known) if key and key in k]
    words = _words(key)
    models = difflib.get_close_matches(words[0], sorted(_model_words()), n=2, cutoff=0.6) if (
        words) else []  # fmt: skip
    same_model = [names[k] for m in models for k in sorted(names) if _words(k)[0] == m]
    close = difflib.get_close_matches(key, list(known), n=5, cutoff=0.5)
    shown = list(dict.fromkeys([*contained, *same_model, *(known[c] for c in close)]))[:5]
    hint = f"; closest: {shown}" if shown else ""
    raise UnknownDeviceError(
        f"device {name!r} is not in the device table {GPU_TABLE} ({len(names)} GPUs) nor an "
        f"alias of one (scaledl.devices.specs.GPU_ALIASES){hint}. Add a row with its "
        "datasheet numbers and source, or an alias."
    )


_VENDOR_WORDS = ("nvidia", "tesla")


def _words(key: str) -> list[str]:
    """The words of a normalised name without a leading vendor word, brackets dropped."""
    words = re.sub(r"[()\[\],]", " ", key).split()
    return words[1:] if words and words[0] in _VENDOR_WORDS else words


@cache
def _model_words() -> frozenset[str]:
    """The GPU models of the table: each row's first word after the vendor (``h100``)."""
    return frozenset(_words(k)[0] for k in _table_keys())


def _word_matches(key: str) -> list[str]:
    """Table rows having every word of ``key``, when its first word is a GPU model.

    Matched on whole words of the table names and aliases, so ``a10`` is not ``a100``.
    """
    words = _words(key)
    if not words or words[0] not in _model_words():
        return []
    known = {**_alias_keys(), **_table_keys()}
    found = {known[k] for k in known if set(words) <= set(_words(k))}
    return sorted(found)


@cache
def _table_keys() -> dict[str, str]:
    """The table's ``device_name`` by normalised name."""
    names = gpu_table()["device_name"]
    return dict(zip(names.map(normalise_name), names, strict=True))


@cache
def _gpu_spec(name: str) -> DeviceSpec:
    """The spec of one row of the table (by its ``device_name``), built once per process."""
    table = gpu_table()
    record = table[table["device_name"] == name].iloc[0].to_dict()
    return DeviceSpec.from_record({**record, "kind": "gpu"}, str(GPU_TABLE))


@cache
def _alias_keys() -> dict[str, str]:
    """:data:`GPU_ALIASES` by normalised alias; every target must be a row of the table."""
    names = set(gpu_table()["device_name"])
    missing = sorted({v for v in GPU_ALIASES.values() if v not in names})
    if missing:
        raise ValueError(f"{GPU_TABLE}: GPU_ALIASES targets {missing} are not rows of the table")
    return {normalise_name(k): v for k, v in GPU_ALIASES.items()}


def device_spec(device_name: str, hosts_dir: Path | None = None) -> DeviceSpec:
    """Look a device up.

    Args:
        device_name: a workload's ``device_name`` (``cuda:<GPU>``, ``cpu:<model>``) or a bare
            GPU name (NeuSight's folder names work too).
        hosts_dir: where CPU host probes are stored (default :func:`default_hosts_dir`).

    Returns:
        The :class:`DeviceSpec`.

    Raises:
        UnknownDeviceError: the GPU is neither in ``gpus.csv`` nor an alias
            (:data:`GPU_ALIASES`), or no probe is stored for the CPU;
            the message names the device and the closest known names.
    """
    if str(device_name).lower().startswith("cpu"):
        path = host_spec_path(device_name, hosts_dir)
        if not path.is_file():
            raise UnknownDeviceError(
                f"device {device_name!r}: no measured host spec at {path}; run "
                "`scaledl devices --probe` on that host (CPU specs are measured, not looked up)"
            )
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UnknownDeviceError(f"{path}: unreadable host spec ({exc})") from exc
        return DeviceSpec.from_record(record, str(path))
    return _gpu_spec(resolve_gpu_name(device_name))


def known_devices(hosts_dir: Path | None = None) -> pd.DataFrame:
    """Every known device: the GPU table plus the stored CPU host specs.

    Returns:
        One row per device (:meth:`DeviceSpec.to_record` columns).
    """
    records = [
        DeviceSpec.from_record({**r, "kind": "gpu"}, str(GPU_TABLE)).to_record()
        for r in gpu_table().to_dict("records")
    ]
    root = Path(hosts_dir or default_hosts_dir())
    for path in sorted(root.glob("*.json")) if root.is_dir() else []:
        records.append(DeviceSpec.from_record(json.loads(path.read_text()), str(path)).to_record())
    return pd.DataFrame(records)
