"""Load and validate preset YAML files (``smoke``, ``quick``, ``paper`` or any path).

The preset format is documented in :mod:`scaledl.design.space`. Validation checks structure,
field names and level types here, with errors naming the file, the field and the value; whether a
combination of levels is a valid workload is checked when candidates are enumerated.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, PlainValidator, StrictInt

from scaledl.design.errors import PresetError
from scaledl.design.features import ORDERS
from scaledl.io.safe import UnsafeInputError, read_text
from scaledl.io.schema import Artefact, parse_artefact
from scaledl.profiling.settings import ProfileSettings
from scaledl.workloads.fields import ARCHITECTURE_FIELDS

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"
SAMPLERS = ("doptimal", "doptimal-surface", "random", "lhs")
SUPPORTED_FAMILIES = ("bert", "vit", "t5", "llama", "deit")


def _positive_number(value: Any) -> int | float:
    """A positive finite number, kept as given (an ``int`` stays an ``int``).

    PyYAML reads ``2.0e9`` (no exponent sign) as a string, so a numeric string is parsed.

    Raises:
        ValueError: a bool, a non-numeric value, or a number not finite or not positive.
    """
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError("must be a positive number") from None
    if not _is_number(value) or value <= 0:
        raise ValueError("must be a positive number")
    return value


PositiveNumber = Annotated[int | float, PlainValidator(_positive_number)]
PositiveCount = Annotated[StrictInt, Field(ge=1)]


class DesignSettings(Artefact):
    """A preset's ``design:`` section (every key optional; the defaults are these fields').

    Attributes:
        n_workloads: workloads to choose.
        sampler: one of :data:`SAMPLERS`.
        seed: random seed, >= 0.
        n_starts: random starts of the exchange algorithm.
        steps_per_epoch: ``dataset_size = steps_per_epoch * batch_size * world_size``.
        max_tokens_per_step: constraint on ``batch_size * seq_len`` per rank (``None``: none).
        memory_budget_bytes: constraint on the estimated peak memory per rank, bytes.
        max_flops_per_step: constraint on the estimated FLOPs per rank per step.
        gpus_per_node: ``num_nodes = ceil(world_size / gpus_per_node)`` (``None``: 1 node).
        model: the response-surface order, one of :data:`~scaledl.design.features.ORDERS`.
    """

    n_workloads: PositiveCount = 10
    sampler: Literal[SAMPLERS] = "doptimal"
    seed: Annotated[StrictInt, Field(ge=0)] = 0
    n_starts: PositiveCount = 10
    steps_per_epoch: PositiveCount = 4
    max_tokens_per_step: PositiveNumber | None = None
    memory_budget_bytes: PositiveNumber | None = None
    max_flops_per_step: PositiveNumber | None = None
    gpus_per_node: PositiveCount | None = None
    model: Literal[ORDERS] = "full"


class _DesignSection(Artefact):
    """The ``design`` key alone, so that errors name ``design.<field>``."""

    design: DesignSettings


#: The ``design:`` defaults (:class:`DesignSettings`).
DESIGN_DEFAULTS: dict[str, Any] = DesignSettings().model_dump()

# Family keys: Workload fields that may be given as a scalar or levels, plus helper keys.
_INT_KEYS = (*ARCHITECTURE_FIELDS, "head_dim", "seq_len", "batch_size", "world_size", "num_nodes")
_FLOAT_KEYS = ("ffn_ratio",)
_CHOICE_KEYS = {"mode": ("train", "infer"), "precision": ("fp32", "bf16", "fp16")}
FAMILY_KEYS = (*_INT_KEYS, *_FLOAT_KEYS, *_CHOICE_KEYS)


def preset_names() -> list[str]:
    """Names of the presets shipped in ``scaledl/presets``."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_preset(name_or_path: str | Path) -> dict[str, Any]:
    """Load a preset by name (``smoke``, ``quick``, ``paper``) or from a YAML file.

    Args:
        name_or_path: a shipped preset name, or the path of a YAML file.

    Returns:
        The validated preset: the YAML mapping with ``design`` defaults filled in, ``name``
        (defaults to the file stem) and ``source`` (the file path) set.

    Raises:
        PresetError: unknown name, missing or unreadable file (or not a regular file: a FIFO,
            a device), invalid YAML, or an invalid field; the message names the file, the field
            and the value.
    """
    path = _resolve(name_or_path)
    try:
        text = read_text(path)
    except UnsafeInputError as exc:
        raise PresetError(str(exc)) from None
    except OSError as exc:
        raise PresetError(f"{path}: cannot read preset file: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PresetError(f"{path}: invalid YAML: {exc}") from None
    return validate_preset(data, source=str(path), default_name=path.stem)


def validate_preset(
    data: Any, source: str = "<preset>", default_name: str = "preset"
) -> dict[str, Any]:
    """Validate a preset mapping and fill in defaults (see :mod:`scaledl.design.space`).

    Args:
        data: the parsed YAML.
        source: the file it came from, named in errors.
        default_name: ``name`` to use when the preset has none.

    Returns:
        A validated deep copy with ``design`` defaults, ``name`` and ``source``.

    Raises:
        PresetError: naming ``source``, the field and the value.
    """
    if not isinstance(data, dict):
        raise PresetError(f"{source}: a preset must be a YAML mapping, got {type(data).__name__}")
    preset = copy.deepcopy(data)
    preset.setdefault("name", default_name)
    if not isinstance(preset["name"], str) or not preset["name"]:
        raise PresetError(f"{source}: field 'name' must be a non-empty string: {preset['name']!r}")
    preset["source"] = source
    preset["design"] = _validate_design(preset.get("design", {}), source)
    for section in ("profiling", "device", "evaluation"):
        if section in preset and not isinstance(preset[section], dict):
            raise PresetError(f"{source}: field {section!r} must be a mapping: {preset[section]!r}")
    _check_profiling(preset.get("profiling"), source)
    families = preset.get("families")
    if not isinstance(families, dict) or not families:
        raise PresetError(
            f"{source}: field 'families' must be a non-empty mapping of family -> levels, "
            f"got {families!r}"
        )
    for family, spec in families.items():
        _validate_family(family, spec, source)
    return preset


def _check_profiling(section: dict[str, Any] | None, source: str) -> None:
    """The ``profiling:`` section makes valid :class:`~scaledl.profiling.settings.ProfileSettings`.

    Checked when the preset is loaded, so a typo fails the design step, not the profile.

    Raises:
        PresetError: naming ``source``, the field ``profiling.<key>`` and the value.
    """
    try:
        ProfileSettings.from_preset(section, source)
    except ValueError as exc:
        raise PresetError(str(exc)) from None


def _resolve(name_or_path: str | Path) -> Path:
    if isinstance(name_or_path, str) and name_or_path in preset_names():
        return PRESET_DIR / f"{name_or_path}.yaml"
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise PresetError(f"{path}: preset file not found")
        return path  # not a regular file (a FIFO, a device): refused by the read
    raise PresetError(
        f"unknown preset {str(name_or_path)!r}: expected one of {preset_names()} "
        f"(in {PRESET_DIR}) or the path of a .yaml file"
    )


def _validate_design(design: Any, source: str) -> dict[str, Any]:
    """The ``design:`` section with its defaults filled in (:class:`DesignSettings`).

    Raises:
        PresetError: naming ``source``, the field ``design.<key>`` and the value.
    """
    try:
        section = parse_artefact(
            _DesignSection, {"design": {} if design is None else design}, source
        )
    except ValueError as exc:
        raise PresetError(str(exc)) from None
    return section.design.model_dump()


def _validate_family(family: Any, spec: Any, source: str) -> None:
    if family not in SUPPORTED_FAMILIES:
        raise PresetError(
            f"{source}: families.{family}: unknown family {family!r}; "
            f"presets support {SUPPORTED_FAMILIES}"
        )
    where = f"{source}: families.{family}"
    if not isinstance(spec, dict) or not spec:
        raise PresetError(f"{where} must be a non-empty mapping of field -> value or levels")
    unknown = sorted(set(spec) - set(FAMILY_KEYS))
    if unknown:
        raise PresetError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(FAMILY_KEYS)}")
    for a, b in (("head_dim", "num_heads"), ("ffn_ratio", "intermediate_size")):
        if a in spec and b in spec:
            raise PresetError(f"{where}: give either {a!r} or {b!r}, not both")
    if "head_dim" not in spec and "num_heads" not in spec:
        raise PresetError(f"{where}: one of 'head_dim' or 'num_heads' is required")
    if "ffn_ratio" not in spec and "intermediate_size" not in spec:
        raise PresetError(f"{where}: one of 'ffn_ratio' or 'intermediate_size' is required")
    if "batch_size" not in spec:
        raise PresetError(f"{where}: field 'batch_size' is required")
    for key, value in spec.items():
        levels = value if isinstance(value, list) else [value]
        if not levels:
            raise PresetError(f"{where}.{key}: an empty list of levels")
        for level in levels:
            if key in _INT_KEYS:
                ok = _is_int(level) and level > 0
                expected = "a positive integer"
            elif key in _FLOAT_KEYS:
                ok = _is_number(level) and level > 0
                expected = "a positive number"
            else:
                ok = level in _CHOICE_KEYS[key]
                expected = f"one of {_CHOICE_KEYS[key]}"
            if not ok:
                raise PresetError(f"{where}.{key}: level {level!r} is not {expected}")
        if len({repr(v) for v in levels}) != len(levels):
            raise PresetError(f"{where}.{key}: duplicate levels in {levels!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )
