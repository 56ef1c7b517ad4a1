"""Hugging Face config JSONs as workloads (``family="hf"``): read, check, pick the model class.

A workload ``{"family": "hf", "config_path": "gpt2.json", "seq_len": 128, ...}`` is checked
against its config before anything is built, so a job that could not run is refused with the
workloads file, row, config path and fields named, never predicted (:func:`fill_hf_workload`,
called when a :class:`~scaledl.workloads.spec.Workload` is parsed).

Decisions (a demanding user of runtime predictors would ask for these):

* **Reading.** ``transformers.AutoConfig.for_model(model_type, **json)``: offline, no remote
  code (an ``auto_map`` entry is ignored). Unreadable JSON is an error naming ``config_path``,
  an unknown ``model_type`` one naming ``model_type``; a field transformers rejects (Phi-3's
  legacy ``rope_scaling`` type ``su`` without ``original_max_position_embeddings``) is named
  with its value and transformers' reason.
* **Model class.** The class ``architectures[0]`` names, when it is the causal-LM, masked-LM,
  sequence-to-sequence-LM, sequence-classification or image-classification class transformers
  registers for the config's ``model_type`` (or its bare model); it is built by the matching
  Auto class (``AutoModelForCausalLM.from_config``, ...), random weights. A config without
  ``architectures`` builds the bare model (``AutoModel``); any other class is an error listing
  the ones that would work. So a ``LlamaForCausalLM`` config costs what ``family: llama`` costs.
* **Architecture fields.** ``hidden_size``, ``num_layers``, ``num_heads``, ``num_kv_heads``,
  ``intermediate_size``, ``vocab_size``, ``max_positions``, ``num_labels`` (classification
  heads), ``decoder_num_layers`` (encoder-decoder) and, for vision configs, ``image_size``,
  ``patch_size`` and ``num_channels`` are read from the config into the workload (they are
  features of the predictors and part of ``workload_id``). A field the workload gives too must
  equal the config's; a field the config does not have is an error, unless it repeats what the
  config means without it (``num_kv_heads`` equal to the heads: plain multi-head attention),
  which is accepted and dropped (the same workload).
* **Runnable.** A config transformers builds but cannot run (a size set to 0, such as
  ``type_vocab_size: 0``) is refused when the model is built, before any prediction
  (:func:`scaledl.workloads.builders.build_model`).
* **Input bounds.** ``seq_len`` (and ``decoder_seq_len``) must fit the position table: the
  smallest of ``max_position_embeddings``, ``n_positions`` and ``n_ctx`` the config has, less
  ``pad_token_id + 1`` for RoBERTa-style models whose positions start after the padding index
  (:data:`PADDING_OFFSET_MODEL_TYPES`). Vision configs: ``patch_size`` must divide
  ``image_size``, the workload's ``image_size`` must be the config's (the position table is
  sized for it), and ``seq_len`` is derived: patches + 1 class token (+ 1 distillation token for
  ``deit``).
* **Attention geometry.** ``num_attention_heads`` must divide ``hidden_size`` unless the config
  sets the head width itself (``head_dim``, ``d_kv``), and ``num_key_value_heads`` must divide
  ``num_attention_heads``.

A relative ``config_path`` is read relative to the working directory.
"""

from __future__ import annotations

import difflib
import math
import numbers
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from scaledl.io.safe import read_json, unique_keys
from scaledl.workloads.fields import ARCHITECTURE_FIELDS, WorkloadError

#: (task, Auto class, name of transformers' model-type -> class-name mapping), tried in order.
TASKS: tuple[tuple[str, str, str], ...] = (
    ("causal-lm", "AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("masked-lm", "AutoModelForMaskedLM", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("seq2seq-lm", "AutoModelForSeq2SeqLM", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    (
        "sequence-classification",
        "AutoModelForSequenceClassification",
        "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    ),
    (
        "image-classification",
        "AutoModelForImageClassification",
        "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    ),
    ("base", "AutoModel", "MODEL_MAPPING_NAMES"),
)

#: Model types whose position ids start at ``pad_token_id + 1`` (``create_position_ids_from_
#: input_ids`` in transformers), so ``pad_token_id + 1`` rows of the position table are unusable.
PADDING_OFFSET_MODEL_TYPES = frozenset(
    {
        "camembert",
        "data2vec-text",
        "ibert",
        "longformer",
        "luke",
        "markuplm",
        "mpnet",
        "roberta",
        "roberta-prelayernorm",
        "xlm-roberta",
        "xlm-roberta-xl",
        "xmod",
    }
)

_POSITION_FIELDS = ("max_position_embeddings", "n_positions", "n_ctx")
#: Extra tokens beside the patches of a vision encoder (class token; DeiT adds distillation).
_SPECIAL_TOKENS = {"deit": 2}
_HEAD_WIDTH_FIELDS = ("head_dim", "d_kv")


@dataclass(frozen=True, eq=False)
class HFConfig:
    """A Hugging Face config read from JSON, with the model class ScaleDL builds from it.

    Attributes:
        path: the ``config_path`` as given.
        config: the ``transformers`` configuration object (shared: copy before changing it).
        model_type: the config's ``model_type``.
        architecture: the model class name built (``architectures[0]`` or the bare model).
        task: one of the task names of :data:`TASKS`.
        auto_class: the ``transformers`` Auto class name that builds it.
        is_vision: the model's main input is ``pixel_values``.
    """

    path: str
    config: Any
    model_type: str
    architecture: str
    task: str
    auto_class: str
    is_vision: bool

    @property
    def is_encoder_decoder(self) -> bool:
        """True for encoder-decoder configs (T5, BART, ...)."""
        return bool(getattr(self.config, "is_encoder_decoder", False))

    def field(self, name: str) -> tuple[str, Any]:
        """The config's attribute behind a standard name, and its value.

        Args:
            name: a standard ``transformers`` name (``hidden_size``, ``num_attention_heads``).

        Returns:
            ``(attribute name as the JSON spells it, value or None)``; GPT-2's
            ``hidden_size`` is ``("n_embd", 768)``.
        """
        actual = getattr(self.config, "attribute_map", {}).get(name, name)
        return actual, getattr(self.config, actual, None)

    def position_limit(self) -> tuple[str, int] | None:
        """The longest sequence the position table accepts, and the field bounding it.

        Returns:
            ``(description naming the config field, tokens)``, or ``None`` when the config has
            no position table (relative or rotary-free positions such as T5's).
        """
        found = {}
        for name in _POSITION_FIELDS:
            actual, value = self.field(name)
            if _is_int(value):
                found[actual] = value
        if not found:
            return None
        name = min(found, key=found.get)
        limit, text = found[name], f"{name}={found[name]}"
        if self.model_type in PADDING_OFFSET_MODEL_TYPES:
            pad = getattr(self.config, "pad_token_id", None) or 0
            limit -= pad + 1
            text += f" less pad_token_id + 1 = {pad + 1} reserved by {self.model_type}"
        return text, limit

    def workload_fields(self) -> dict[str, int]:
        """The workload's architecture fields as this config defines them.

        Returns:
            Field name to value; fields the config does not define are absent.
        """
        out: dict[str, int] = {}
        for workload_name, names in _ARCHITECTURE_NAMES.items():
            for name in names:
                value = self.field(name)[1]
                if _is_int(value):
                    out[workload_name] = value
                    break
        if "intermediate_size" not in out and "n_inner" in vars(self.config):
            out["intermediate_size"] = 4 * out["hidden_size"]  # GPT-2: n_inner None = 4 x width
        if self.is_encoder_decoder:
            for name in ("num_decoder_layers", "decoder_layers"):
                if _is_int(getattr(self.config, name, None)):
                    out["decoder_num_layers"] = getattr(self.config, name)
                    break
        if self.task in ("sequence-classification", "image-classification"):
            out["num_labels"] = int(self.config.num_labels)
        if self.is_vision:
            for name in ("image_size", "patch_size"):
                value = self.field(name)[1]
                if isinstance(value, (list, tuple)) and len(set(value)) == 1:
                    value = value[0]
                if _is_int(value):
                    out[name] = value
            if _is_int(getattr(self.config, "num_channels", None)):
                out["num_channels"] = self.config.num_channels
        else:
            limit = self.position_limit()
            if limit is not None:
                out["max_positions"] = limit[1]
        return out


_ARCHITECTURE_NAMES = {
    "hidden_size": ("hidden_size",),
    "num_layers": ("num_hidden_layers",),
    "num_heads": ("num_attention_heads",),
    "num_kv_heads": ("num_key_value_heads",),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim", "d_ff", "encoder_ffn_dim"),
    "vocab_size": ("vocab_size",),
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_hf_config(path: str) -> HFConfig:
    """Read and check a Hugging Face config JSON (cached per file path, size and mtime).

    Args:
        path: the JSON file.

    Returns:
        The :class:`HFConfig`.

    Raises:
        WorkloadError: unreadable file, unknown ``model_type``, an ``architectures`` entry
            ScaleDL cannot build, or invalid attention geometry; the message starts with the
            offending field (``config_path=``, ``model_type=``, ``num_key_value_heads=``...)
            and names the config file.
    """
    try:
        stat = Path(path).stat()
    except OSError as exc:
        where = (
            f" (a relative config_path is read from the working directory, {Path.cwd()})"
            if not Path(path).is_absolute()
            else ""
        )
        raise WorkloadError(f"config_path={path!r}: cannot read config: {exc}{where}") from None
    return _read(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=256)
def _read(path: str, _mtime_ns: int, _size: int) -> HFConfig:
    # transformers: seconds of imports, only for an HF architecture's config.
    import transformers
    from transformers.models.auto import modeling_auto

    try:
        raw = read_json(path, object_pairs_hook=unique_keys)  # regular, bounded, finite
    except (OSError, ValueError) as exc:  # UnsafeInputError (a FIFO, NaN, too deep), a key twice
        raise WorkloadError(f"config_path={path!r}: cannot read config: {exc}") from None
    if not isinstance(raw, dict):
        raise WorkloadError(f"config_path={path!r}: a config is a JSON object, got {raw!r:.60}")
    kwargs = {k: v for k, v in raw.items() if k not in ("model_type", "auto_map")}
    model_type = raw.get("model_type")
    if model_type not in transformers.CONFIG_MAPPING:
        known = difflib.get_close_matches(str(model_type), list(transformers.CONFIG_MAPPING), n=1)
        raise WorkloadError(
            f"model_type={model_type!r} of config {path}: unknown to transformers "
            f"{transformers.__version__}" + (f" (did you mean {known[0]!r}?)" if known else "")
        )
    try:
        config = transformers.AutoConfig.for_model(model_type, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any config class error is the config's fault
        raise WorkloadError(_rejected(path, raw, exc)) from None
    architectures = raw.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise WorkloadError(
            f"architectures={architectures!r} of config {path}: expected a list of class names"
        )
    wanted = architectures[0] if architectures else None
    supported = []
    for entry in TASKS:
        task, auto_class, mapping_name = entry
        registered = getattr(modeling_auto, mapping_name).get(config.model_type, ())
        names = (registered,) if isinstance(registered, str) else tuple(registered)
        supported += names
        if (wanted is None and task == "base" and names) or (wanted in names):
            architecture = wanted or names[0]
            break
    else:
        raise WorkloadError(
            f"architectures={architectures!r} of config {path}: ScaleDL builds the causal-LM, "
            f"masked-LM, seq2seq-LM, sequence- or image-classification head or the bare model of "
            f"model_type {config.model_type!r}: one of {supported}, or no architectures entry"
        )
    model_class = getattr(transformers, architecture)
    info = HFConfig(
        path=path,
        config=config,
        model_type=config.model_type,
        architecture=architecture,
        task=task,
        auto_class=auto_class,
        is_vision=getattr(model_class, "main_input_name", "input_ids") == "pixel_values",
    )
    _check_geometry(info)
    return info


def _rejected(path: str, raw: dict[str, Any], exc: Exception) -> str:
    """The message for a config transformers refuses, starting with the field it names.

    The field is the config key the exception's text names (``rope_parameters`` is how
    transformers 5 spells the legacy ``rope_scaling``); ``config_path`` when it names none.
    """
    text = str(exc).strip("'\"")
    named = [k for k in raw if re.search(rf"\b{re.escape(k)}\b", text)]
    if "rope_parameters" in text:  # the rope field first, not a key its message quotes
        named = [k for k in ("rope_parameters", "rope_scaling") if k in raw] + named
    cause = f"transformers {_version()} rejects it: {type(exc).__name__}: {text}"
    if not named:
        return f"config_path={path!r}: transformers cannot read it: {cause}"
    field = named[0]
    return f"{field}={raw[field]!r:.200} of config {path}: {cause}; fix or remove {field!r}"


def _version() -> str:
    # transformers: seconds of imports, only for an HF architecture's config.
    import transformers

    return transformers.__version__


def _check_geometry(info: HFConfig) -> None:
    """Attention and patch geometry the model needs; raises WorkloadError naming the fields."""
    where = f"config {info.path}"
    values = {}
    for name in ("hidden_size", "num_attention_heads", "num_key_value_heads"):
        actual, value = info.field(name)
        if _is_int(value):
            if value <= 0:
                raise WorkloadError(f"{actual}={value} of {where}: must be positive")
            values[name] = (actual, value)
    heads = values.get("num_attention_heads")
    hidden = values.get("hidden_size")
    explicit_width = any(_is_int(getattr(info.config, n, None)) for n in _HEAD_WIDTH_FIELDS)
    if heads and hidden and not explicit_width and hidden[1] % heads[1]:
        raise WorkloadError(
            f"{heads[0]}={heads[1]} must divide {hidden[0]}={hidden[1]} of {where} "
            "(or set head_dim)"
        )
    kv = values.get("num_key_value_heads")
    if heads and kv and heads[1] % kv[1]:
        raise WorkloadError(f"{kv[0]}={kv[1]} must divide {heads[0]}={heads[1]} of {where}")
    if info.is_vision:
        fields = info.workload_fields()
        image, patch = fields.get("image_size"), fields.get("patch_size")
        if image is None or patch is None:
            raise WorkloadError(
                f"image_size of {where}: a vision config needs square integer image_size and "
                f"patch_size, got {info.field('image_size')[1]!r}, {info.field('patch_size')[1]!r}"
            )
        if image % patch:
            raise WorkloadError(f"patch_size={patch} must divide image_size={image} of {where}")


def fill_hf_workload(data: dict[str, Any]) -> dict[str, Any]:
    """Complete an ``hf`` workload's fields from its config and check them against it.

    Args:
        data: the workload's fields (``family="hf"``, ``config_path`` set, missing values
            already removed).

    Returns:
        A copy with the config's architecture fields, and for vision configs the derived
        ``seq_len``; for encoder-decoder configs ``decoder_seq_len`` defaults to ``seq_len``.

    Raises:
        WorkloadError: the config is unusable (:func:`read_hf_config`), a field disagrees with
            the config or does not exist in it, or ``seq_len``/``decoder_seq_len`` exceeds the
            position table; the message starts with the field and names the config file.
    """
    info = read_hf_config(str(data["config_path"]))
    where = f"config {info.path} ({info.model_type}, {info.architecture})"
    fields = info.workload_fields()
    data = dict(data)
    for name in ARCHITECTURE_FIELDS:
        if name not in data or name == "decoder_seq_len":
            continue
        given = _as_int(data[name])
        if not _is_int(given):
            raise WorkloadError(f"{name}={data[name]!r}: expected an integer")
        if name not in fields and given == _implied(name, fields):
            del data[name]  # what the config means without the field: the same workload
            continue
        if name not in fields:
            raise WorkloadError(f"{name}={given!r} is not a field of {where}; remove it")
        if given != fields[name]:
            raise WorkloadError(
                f"{name}={given!r} does not match {name}={fields[name]} of {where}: the config "
                "defines the architecture"
            )
    data.update(fields)
    if info.is_vision:
        tokens = (fields["image_size"] // fields["patch_size"]) ** 2
        tokens += _SPECIAL_TOKENS.get(info.model_type, 1)
        if "seq_len" in data and _as_int(data["seq_len"]) != tokens:
            raise WorkloadError(
                f"seq_len={data['seq_len']} does not match image_size={fields['image_size']} "
                f"and patch_size={fields['patch_size']} of {where} ({tokens} tokens); omit it"
            )
        data["seq_len"] = tokens
        if "decoder_seq_len" in data:
            raise WorkloadError(f"decoder_seq_len is not a field of {where}; remove it")
        return data
    if info.is_encoder_decoder:
        data.setdefault("decoder_seq_len", data.get("seq_len"))
    elif "decoder_seq_len" in data:
        raise WorkloadError(f"decoder_seq_len is not a field of {where} (no decoder); remove it")
    limit = info.position_limit()
    for name in ("seq_len", "decoder_seq_len"):
        value = _as_int(data.get(name))
        if limit is not None and _is_int(value) and value > limit[1]:
            raise WorkloadError(
                f"{name}={value} exceeds the position table of {where}: at most {limit[1]} "
                f"tokens ({limit[0]})"
            )
    return data


def _implied(name: str, fields: dict[str, int]) -> int | None:
    """The value a config means for a field it does not set: as many key/value heads as heads."""
    return fields.get("num_heads") if name == "num_kv_heads" else None


def _as_int(value: Any) -> Any:
    """An integral number (a CSV cell may be a float, a numpy scalar) as int; else unchanged.

    A boolean stays a boolean (refused as no integer), as numpy's ``bool_`` does.
    """
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return value
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return value
