"""Import NeuSight's GPU measurements as standard ScaleDL profile tables.

:func:`import_neusight` turns the data read by :func:`scaledl.external.neusight.load_neusight`
into the tables of :mod:`scaledl.profiling.store` (``OUT/<table>.parquet``), so GPU data goes
through the same validation, training and evaluation as the project's own profiles:

* ``workloads``: one ``family: hf`` workload per (GPU, model, mode, sequence length, batch) with a
  trace and a label, built from the model's Hugging Face config (any model type ``family: hf``
  reads; its ``architectures`` chosen by :func:`config_architecture`) with the architecture
  fields the config defines; for the shipped BERT and GPT-2 configs ``architectures`` is the
  head NeuSight ran (its ``neusight/Tracing/trace.py``): ``BertForSequenceClassification`` for
  BERT inference, ``GPT2LMHeadModel`` for the GPT models, and ``BertForMaskedLM`` for BERT
  training, where NeuSight ran ``BertForPreTraining``: the same masked-LM head plus a pooler and
  a two-way next-sentence head on the [CLS] token only (under 0.1 % of its FLOPs; the product
  builds LM, masked-LM, seq2seq and classification heads); these configs are written to
  ``OUT/configs/<model>-<mode>.json`` and
  ``config_path`` names them (relative to the working directory when inside it). Device
  ``cuda:<GPU name>`` (the name ``torch.cuda.get_device_name`` gives, from NeuSight's device
  config), backend ``nccl``, precision ``fp32``, world size 1, ``dataset_size`` = batch size.
* ``runs``: one ``ok`` run per workload, ``source`` ``neusight``, ``host`` ``neusight:<GPU>``;
  ``measured_steps`` 25 (NeuSight's label is the mean of the 5 fastest of 25 timed
  iterations), ``warmup_steps`` 0, ``instrumented_steps`` 1 (one traced pass);
  ``instrumentation_overhead`` = traced kernel time / label - 1 (how far the per-operator
  trace is from the whole-model label).
* ``iteration_timings``: the label (``phase`` ``label``: ``iteration_ms`` = ``e2e_latency``,
  ``forward_ms``, ``backward_ms``) and the traced pass (``phase`` ``instrumented``: the
  per-node kernel times summed, blocks scaled by ``num_layer``).
* ``layer_timings``: one row per layer of the product's own layer graph
  (:func:`scaledl.graph.features.workload_graph`, its features) whose NeuSight unit is in the
  trace: the embeddings, heads and norms outside the blocks, and every transformer block's
  units; times are the unit's kernel nodes summed. NeuSight traces block 0 only and scales it by
  ``num_layer``; the other blocks' rows copy block 0's times and say so (``replicated``
  True), so a run has the full layer grid the validation requires (``run_complete``).
* ``operator_timings``: one row per kernel-launching trace node
  (:func:`scaledl.external.neusight.node_descriptor`) with its descriptor, ``layer_index`` in
  the product graph (-1 outside every product layer), ``forward_ms`` and ``backward_ms``.
* ``allreduce_timings`` and ``epochs``: empty (single-GPU runs, no epoch measured).

What the data does not carry is left out, not invented: no optimizer step (NeuSight times
``loss.backward()`` only; ``optimizer_ms`` is null, so predictions trained on these tables
exclude it), no epoch times, no repeat spread (``iteration_cv`` null), no torch version, no
start/end times, only block 0 of each model traced (blocks 1..N-1 copy its times,
``replicated``),
host-only nodes (``size``, ``view``, ``getitem``: NeuSight times each at the ~7 us CUDA-event
floor though they overlap the kernels) not counted, no per-node input dtypes (assumed the
output's). The multi-GPU labels (``-dp4``, ``-tp4``, ``-pp4_1``) have no per-rank or per-layer
data, so they are not profile runs: they go to ``OUT/parallel_labels.parquet`` (each with the
workload spec of its layout) for the evaluation; ``-fusion`` (torch.compile) labels are not
imported. ``OUT/import.json`` records all of this with counts.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scaledl.external.neusight import (
    NeusightData,
    NeusightFormatError,
    _read_json,
    load_neusight,
)
from scaledl.graph.features import workload_graph
from scaledl.graph.layer_graph import LAYER_FEATURE_COLUMNS
from scaledl.graph.operators import DESCRIPTOR_COLUMNS
from scaledl.io.atomic import write_atomic, write_parquet_atomic
from scaledl.layout import DataLayout, neusight_root
from scaledl.profiles.schemas import PROFILE_TABLES
from scaledl.workloads.fields import WorkloadError
from scaledl.workloads.hf import read_hf_config
from scaledl.workloads.spec import Workload

SOURCE = "neusight"
#: Hugging Face class per (model_type, mode): NeuSight's (neusight/Tracing/trace.py), with
#: BertForMaskedLM for its BertForPreTraining (see the module docstring).
NEUSIGHT_ARCHITECTURES = {
    ("bert", "train"): "BertForMaskedLM",
    ("bert", "infer"): "BertForSequenceClassification",
    ("gpt2", "train"): "GPT2LMHeadModel",
    ("gpt2", "infer"): "GPT2LMHeadModel",
}
#: transformers' model-type -> class mappings tried, in order, for a config without
#: ``architectures`` (:func:`config_architecture`).
LM_MAPPINGS = (
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",  # an encoder-decoder's LM (BART, T5)
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES",  # an encoder's (RoBERTa)
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",  # a decoder's (OPT, Llama)
)
#: NeuSight's label: mean of the 5 fastest of 25 timed iterations (trace.py ``active``).
LABEL_STEPS = 25
NOT_CARRIED = (
    "optimizer step (NeuSight times loss.backward() only; optimizer_ms is null)",
    "epoch times (the epochs table is empty)",
    "repeat spread of the label (iteration_cv is null; the label is a mean of the 5 fastest "
    "of 25 iterations)",
    "torch and CUDA versions, start and end times",
    "transformer blocks 1..N-1 (only block 0 is traced: their layer rows copy its times, "
    "replicated=True, as NeuSight's num_layer scaling assumes)",
    "input dtypes of trace nodes (the output dtype is assumed)",
)
OPERATOR_COLUMNS = (
    "run_id", "workload_id", "rank", "step", "layer_index", "layer_name", "node_name",
    *DESCRIPTOR_COLUMNS, "forward_ms", "backward_ms",
)  # fmt: skip


@dataclass
class ImportSummary:
    """What :func:`import_neusight` wrote.

    Attributes:
        out_dir: the output folder.
        tables: rows per table written.
        manifest: the content of ``import.json``.
    """

    out_dir: Path
    tables: dict[str, int]
    manifest: dict


def _config_path(path: Path) -> str:
    """``path`` relative to the working directory when inside it, else absolute."""
    path = Path(path).resolve()
    try:
        return os.path.relpath(path, Path.cwd()) if path.is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


def config_architecture(config: dict[str, Any], mode: str, source: Path) -> str:
    """The Hugging Face class a traced model ran, for its derived config's ``architectures``.

    NeuSight's own heads for BERT and GPT-2 (:data:`NEUSIGHT_ARCHITECTURES`); for any other
    model type the config's own ``architectures[0]`` (the class the trace was recorded with),
    else the causal-LM, seq2seq-LM or masked-LM class transformers registers for its
    ``model_type`` (the first that exists, the heads of a language-model trace). The class is
    then checked by :func:`scaledl.workloads.hf.read_hf_config`, as for every ``family: hf``
    workload.

    Args:
        config: the model config (JSON object).
        mode: ``train`` or ``infer``.
        source: the config file, named in errors.

    Returns:
        The class name.

    Raises:
        NeusightFormatError: ``model_type`` missing, or no ``architectures`` and no language-model
            class for the model type (naming the file, field and value).
    """
    # transformers: seconds of imports, only for an HF architecture's config.
    from transformers.models.auto import modeling_auto

    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise NeusightFormatError(
            f"{source}: field 'model_type' (value {model_type!r}) is required"
        )
    if (model_type, mode) in NEUSIGHT_ARCHITECTURES:
        return NEUSIGHT_ARCHITECTURES[(model_type, mode)]
    given = config.get("architectures")
    if isinstance(given, list) and given and isinstance(given[0], str):
        return given[0]
    for mapping in LM_MAPPINGS:
        name = getattr(modeling_auto, mapping).get(model_type)
        if isinstance(name, str):
            return name
    raise NeusightFormatError(
        f"{source}: field 'architectures' (value {given!r}): none given, and model_type "
        f"{model_type!r} has no causal-LM, seq2seq-LM or masked-LM class in transformers: name "
        "the class the trace was recorded with in 'architectures'"
    )


def _write_configs(root: Path, out_dir: Path, models: set[tuple[str, str]]) -> tuple[dict, dict]:
    """Derived Hugging Face configs per (model, mode).

    Returns:
        ``(config_path, class)`` per ``(model, mode)``.

    Raises:
        NeusightFormatError: a config whose class cannot be chosen or that ``family: hf``
            refuses (:func:`scaledl.workloads.hf.read_hf_config`'s message, naming the field).
    """
    paths, classes = {}, {}
    for model, mode in sorted(models):
        source = root / "model_configs" / f"{model}.json"
        config = _read_json(source)
        classes[(model, mode)] = config_architecture(config, mode, source)
        config["architectures"] = [classes[(model, mode)]]
        path = out_dir / "configs" / f"{model}-{mode}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(config, indent=2, sort_keys=True))
        try:
            read_hf_config(str(path))
        except WorkloadError as exc:
            raise NeusightFormatError(f"{source} (as {path}): {exc}") from exc
        paths[(model, mode)] = _config_path(path)
    return paths, classes


def _workload(row: pd.Series, device: str, config_path: str) -> Workload:
    # The architecture fields come from the config (scaledl.workloads.hf.fill_hf_workload);
    # an encoder-decoder model's decoder_seq_len defaults to seq_len.
    return Workload.parse(
        {
            "family": "hf",
            "config_path": config_path,
            "seq_len": int(row["seq_len"]),
            "batch_size": int(row["batch_size"]),
            "mode": row["mode"],
            "precision": "fp32",
            "world_size": 1,
            "dataset_size": int(row["batch_size"]),
            "device_name": f"cuda:{device}",
            "backend": "nccl",
        },
        source=str(row["trace_file"]),
    )


_BLOCK_NAME = re.compile(r"^(?P<prefix>.*?)\.(?P<block>\d+)\.(?P<rel>[^#]+)$")


def _match_layers(
    unit_names: list[str], graph_layers: pd.DataFrame
) -> tuple[dict[int, tuple[str, bool]], dict[str, int]]:
    """Which NeuSight unit times each layer of the product's graph.

    A layer inside a transformer block (``transformer.h.7.attn``) takes the traced block's
    unit of the same name within the block (``transformer.h.0.attn``): NeuSight traces block 0
    only and, like its ``num_layer`` scaling, every block is that block. A layer outside the
    blocks takes the unit of the same qualified name, or one whose name is a dotted suffix of
    it (or it of the unit's). Repeated calls (``name#k``) are not matched.

    Returns:
        ``(by_layer, traced)``: per product ``layer_index``, ``(unit name, replicated)``
        (``replicated``: a block other than the traced one); per unit, the ``layer_index`` of
        the product layer it was traced as (block 0 or outside the blocks).
    """
    in_block = {}
    for unit in unit_names:
        m = _BLOCK_NAME.match(unit)
        if m:  # keyed by stack too: an encoder's and a decoder's blocks share relative names
            in_block[(m["prefix"], m["rel"])] = (unit, int(m["block"]))
    by_layer: dict[int, tuple[str, bool]] = {}
    traced: dict[str, int] = {}
    outside = [u for u in unit_names if not _BLOCK_NAME.match(u)]
    for name, index in zip(graph_layers["layer_name"], graph_layers["layer_index"], strict=True):
        if "#" in name:
            continue
        m = _BLOCK_NAME.match(name)
        if m and (m["prefix"], m["rel"]) in in_block:
            unit, block = in_block[(m["prefix"], m["rel"])]
            by_layer[int(index)] = (unit, int(m["block"]) != block)
            if int(m["block"]) == block:
                traced[unit] = int(index)
            continue
        for unit in outside:
            if unit == name or unit.endswith("." + name) or name.endswith("." + unit):
                by_layer[int(index)] = (unit, False)
                traced[unit] = int(index)
                break
    return by_layer, traced


def neusight_tables(
    data: NeusightData, root: Path, out_dir: Path
) -> tuple[dict[str, pd.DataFrame], dict]:
    """Standard profile tables (and the parallel labels) of imported NeuSight data.

    Args:
        data: output of :func:`~scaledl.external.neusight.load_neusight`.
        root: the NeuSight folder (for the model configs).
        out_dir: the output folder (derived configs are written to ``out_dir/configs``).

    Returns:
        ``(tables, manifest)``: the tables by name (the six profile tables, plus
        ``operator_timings`` and ``parallel_labels``) and the import manifest.
    """
    w = data.workloads
    devices = data.devices.set_index("gpu")["device_name"]
    models = set(zip(w["model"], w["mode"], strict=True))
    config_paths, classes = _write_configs(root, out_dir, models)
    specs, runs, iterations, layer_rows, op_rows, unmatched = [], [], [], [], [], set()
    layers_by_wid = dict(tuple(data.layers.groupby("workload_id", sort=False)))
    ops_by_wid = dict(tuple(data.operators.groupby("workload_id", sort=False)))
    label_cols = ["workload_id", "forward_ms_total", "backward_ms_total", "iteration_ms"]
    for row, (_, label) in zip(w.itertuples(index=False), w[label_cols].iterrows(), strict=True):
        row = pd.Series(row._asdict())
        spec = _workload(row, devices.loc[row["gpu"]], config_paths[(row["model"], row["mode"])])
        wid, run_id = spec.workload_id, f"{spec.workload_id}-{SOURCE}"
        specs.append(spec.to_record())
        units = layers_by_wid[row["workload_id"]]
        trace_fw = float((units["forward_kernel_ms"] * units["block_repeat"]).sum())
        trace_bw = float((units["backward_kernel_ms"] * units["block_repeat"]).sum())
        runs.append(_run_row(spec, row, (trace_fw + trace_bw) / label["iteration_ms"] - 1.0))
        iterations += _iteration_rows(spec, label, trace_fw, trace_bw, row["mode"] == "train")
        graph = workload_graph(spec).layers
        by_layer, traced = _match_layers(list(units["layer_name"]), graph)
        unmatched |= set(units["layer_name"]) - set(traced)
        layer_rows += _layer_rows(run_id, wid, units, graph, by_layer)
        ops = ops_by_wid[row["workload_id"]].copy()
        ops["layer_index"] = ops["layer_name"].map(traced).fillna(-1).astype(int)
        ops["run_id"], ops["workload_id"], ops["rank"], ops["step"] = run_id, wid, 0, 0
        op_rows.append(ops[list(OPERATOR_COLUMNS)])
    tables = {
        "workloads": pd.DataFrame(specs),
        "runs": pd.DataFrame(runs),
        "layer_timings": pd.DataFrame(layer_rows),
        "allreduce_timings": _empty("allreduce_timings"),
        "iteration_timings": pd.DataFrame(iterations),
        "epochs": _empty("epochs"),
        "operator_timings": pd.concat(op_rows, ignore_index=True),
        "parallel_labels": _parallel_labels(data, devices, config_paths),
    }
    return tables, _manifest(data, root, tables, unmatched, classes)


def _run_row(spec: Workload, row: pd.Series, overhead: float) -> dict[str, Any]:
    """The ``runs`` row of an imported workload (``overhead``: trace sum / label - 1)."""
    return {
        "run_id": f"{spec.workload_id}-{SOURCE}",
        "workload_id": spec.workload_id,
        "status": "ok",
        "error": None,
        "host": f"{SOURCE}:{row['gpu']}",
        "device_name": spec.device_name,
        "world_size": 1,
        "torch_version": "unknown (not recorded by NeuSight)",
        "warmup_steps": 0,
        "instrumented_steps": 1,
        "measured_steps": LABEL_STEPS,
        "started_at": "unknown",
        "finished_at": "unknown",
        "instrumentation_overhead": overhead,
        "iteration_cv": np.nan,
        "source": SOURCE,
        "source_file": str(row["trace_file"]),
    }


def _iteration_rows(
    spec: Workload, label: pd.Series, trace_fw: float, trace_bw: float, train: bool
) -> list[dict[str, Any]]:
    """The ``label`` (NeuSight's measured latency) and ``instrumented`` (trace sum) rows."""
    rows = []
    for phase, total, fw, bw in (
        ("label", label["iteration_ms"], label["forward_ms_total"],
         label["backward_ms_total"] if train else 0.0),
        ("instrumented", trace_fw + trace_bw, trace_fw, trace_bw),
    ):  # fmt: skip
        rows.append(
            {
                "run_id": f"{spec.workload_id}-{SOURCE}", "workload_id": spec.workload_id,
                "rank": 0, "step": 0, "phase": phase, "iteration_ms": total, "forward_ms": fw,
                "backward_ms": bw, "optimizer_ms": np.nan, "allreduce_ms": np.nan,
                "allreduce_bytes": np.nan,
            }
        )  # fmt: skip
    return rows


def _layer_rows(
    run_id: str, wid: str, units: pd.DataFrame, graph: pd.DataFrame, by_layer: dict
) -> list[dict[str, Any]]:
    """``layer_timings`` rows: each product layer timed by its matched trace unit."""
    rows = []
    unit_rows = units.set_index("layer_name")
    for node in graph.itertuples(index=False):
        if node.layer_index not in by_layer:
            continue
        unit_name, replicated = by_layer[node.layer_index]
        unit = unit_rows.loc[unit_name]
        if unit["forward_kernel_ms"] <= 0:
            continue
        rows.append(
            {
                "run_id": run_id, "workload_id": wid, "rank": 0, "step": 0,
                "layer_index": node.layer_index, "layer_name": node.layer_name,
                "layer_type": node.layer_type, "forward_ms": unit["forward_kernel_ms"],
                "backward_ms": unit["backward_kernel_ms"],
                **{c: getattr(node, c) for c in LAYER_FEATURE_COLUMNS},
                "trace_unit": unit_name, "replicated": replicated,
            }
        )  # fmt: skip
    return rows


def _manifest(
    data: NeusightData, root: Path, tables: dict, unmatched: set[str], classes: dict
) -> dict[str, Any]:
    """The import manifest: source, counts, what was not carried or imported, and why."""
    w = data.workloads
    return {
        "source": "NeuSight (sitar-lab/NeuSight, ASPLOS 2025, MIT licence)",
        "root": str(root),
        "workloads": len(tables["workloads"]),
        "gpus": sorted(w["gpu"].unique()),
        "models": sorted(w["model"].unique()),
        "rows": {name: len(frame) for name, frame in tables.items()},
        "not_carried": list(NOT_CARRIED),
        "trace_units_without_product_layer": sorted(unmatched),
        "not_imported": "'-fusion' labels (torch.compile inference); the 4-GPU dp/tp/pp labels "
        "are kept in parallel_labels only (no per-rank or per-layer data to validate)",
        "skipped_labels": skipped_labels(data.skipped),
        "config_architectures": {f"{k[0]}-{k[1]}": v for k, v in sorted(classes.items())},
    }


def skipped_labels(skipped: pd.DataFrame) -> dict[str, Any]:
    """The labels not imported: their count, and their files by reason.

    Args:
        skipped: :attr:`~scaledl.external.neusight.NeusightData.skipped`.

    Returns:
        ``{"count": n, "by_reason": {reason: [file, ...]}}``.
    """
    by_reason = {r: sorted(g["file"]) for r, g in skipped.groupby("reason", sort=True)}
    return {"count": len(skipped), "by_reason": by_reason}


def _parallel_labels(data: NeusightData, devices: pd.Series, config_paths: dict) -> pd.DataFrame:
    """The multi-GPU labels, each with the workload spec of its layout.

    The batch in a label's name is the global batch (NeuSight's
    ``collect_label_distributed.py``: ``per_device_batch_size = global_batch_size // dp_degree
    // num_micro_batches``): a ``-dp<n>`` rank runs ``global / n`` samples (``dp_size`` n), a
    ``-tp<n>`` group and a ``-pp<n>_<m>`` pipeline the whole batch (``tp_size`` or ``pp_size``
    n, ``micro_batches`` m, Megatron-LM's 1F1B schedule). A label whose model has no
    single-GPU workload (no architecture to copy) keeps ``workload`` null.
    """
    rows = []
    for r in data.parallel.itertuples(index=False):
        record = r._asdict()
        record["device_name"] = f"cuda:{devices.loc[r.gpu]}"
        record["workload"] = None
        if (r.model, r.mode) in config_paths:
            single = data.workloads[data.workloads["model"] == r.model].iloc[0]
            per_rank = (
                r.global_batch_size // r.degree if r.strategy == "dp" else r.global_batch_size
            )
            spec = _workload(
                pd.Series(
                    {
                        **single.to_dict(),
                        "seq_len": r.seq_len,
                        "batch_size": per_rank,
                        "mode": r.mode,
                        "trace_file": r.file,
                    }
                ),
                devices.loc[r.gpu],
                config_paths[(r.model, r.mode)],
            ).model_copy(
                update={
                    "world_size": r.degree,
                    "dp_size": r.degree if r.strategy == "dp" else 1,
                    "dataset_size": r.global_batch_size,
                    **_LAYOUT_OF[r.strategy](r),
                }
            )
            record["workload"] = json.dumps(Workload.parse(spec.model_dump()).to_record())
        rows.append(record)
    return pd.DataFrame(rows)


#: The layout fields of a multi-GPU label's strategy (its ``degree`` and ``microbatches``).
_LAYOUT_OF = {
    "dp": lambda r: {},
    "tp": lambda r: {"tp_size": r.degree},
    "pp": lambda r: {
        "pp_size": r.degree,
        "micro_batches": r.microbatches,
        "pipeline_schedule": "1f1b",
    },
}


def _empty(table: str) -> pd.DataFrame:
    """An empty table with the columns its validation schema requires."""
    return pd.DataFrame(columns=[c.name for c in PROFILE_TABLES[table].columns if c.required])


def import_neusight(
    root: Path | str | None = None, out_dir: Path | str | None = None
) -> ImportSummary:
    """Import NeuSight data as standard profile tables (see the module docstring).

    Args:
        root: the NeuSight folder (``label/``, ``model_configs/``, ``device_configs/``;
            default :func:`scaledl.layout.neusight_root`).
        out_dir: where ``<table>.parquet``, ``configs/`` and ``import.json`` go (default
            ``<data>/imported/neusight``, :class:`scaledl.layout.DataLayout`).

    Returns:
        An :class:`ImportSummary`.

    Raises:
        FileNotFoundError: no ``label`` folder under ``root``.
        scaledl.external.neusight.NeusightFormatError: a malformed file (named, with the row).
    """
    root = Path(root) if root is not None else neusight_root()
    out_dir = Path(out_dir) if out_dir is not None else DataLayout.from_env().imported_dir()
    data = load_neusight(root)
    tables, manifest = neusight_tables(data, root, out_dir)
    for name, frame in tables.items():
        write_parquet_atomic(frame, out_dir / f"{name}.parquet")
    write_atomic(out_dir / "import.json", json.dumps(manifest, indent=2, sort_keys=True))
    return ImportSummary(out_dir, manifest["rows"], manifest)
