"""Measured against predicted iteration time of Hugging Face architectures no predictor saw.

Writes tiny configs of held-out architectures (none of the reference dataset's 14 families),
profiles them on this host with the product's own command, predicts them with a predictor and
writes, per workload, the measured and predicted iteration milliseconds, their ratio, and what
the predictor said about the prediction (``in_domain``, ``extrapolation``)::

    .venv/bin/python scripts/unseen_architectures.py --predictor data/predictors/scaledl \
        --profiles data/unseen/profiles --out benchmarks/results/unseen_architectures.json

Profiling is ``scaledl profile --workloads <workloads.csv> --out <profiles> --preset quick``
(resumable: a second run profiles only what is missing); ``--skip-profile`` predicts the
profiles already there; ``--only albert`` restricts to some architectures. ``--control DESIGN``
(a design parquet of workloads the predictor was trained on, e.g. a few rows of its run's
``data/design/design.parquet``) profiles those too, in the same session, and divides every
ratio by their mean predicted/measured (``ratio_vs_control``): a host whose speed drifted since
the predictor's profiles (on a shared VM, 0.53-0.86x the time five hours later, measured
2026-12-05) moves every ratio alike, and the control separates that from the architecture.
The measured label
is the product's (:func:`scaledl.models.data.launch_labels`: trimmed mean of the label steps,
host drift corrected), averaged over launches. Workloads are written with no ``device_name``
so a predictor trained on another CPU string of the same VM kind predicts them as its own
device; the JSON records both names. On a machine other processes share, the measured times
are inflated: compare runs made on a quiet host.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import transformers

from scaledl.devices.local import local_device_name
from scaledl.models.data import launch_labels, read_tables
from scaledl.prediction.predictor import load_predictor

#: Held-out architectures at the ALBERT case's size (width 256, 4 layers, 4 heads, FFN 1,024):
#: transformers config class, the model class ``architectures`` names, fields.
ARCHITECTURES: dict[str, tuple[str, str, dict]] = {
    "albert": ("AlbertConfig", "AlbertForMaskedLM", {"embedding_size": 128}),
    "distilbert": ("DistilBertConfig", "DistilBertForMaskedLM", {"hidden_dim": 1024}),
    "deberta-v2": ("DebertaV2Config", "DebertaV2ForMaskedLM", {}),
    "mpnet": ("MPNetConfig", "MPNetForMaskedLM", {}),
    "xlm-roberta": ("XLMRobertaConfig", "XLMRobertaForMaskedLM", {}),
    "bloom": ("BloomConfig", "BloomForCausalLM", {}),
    "gpt_neo": ("GPTNeoConfig", "GPTNeoForCausalLM", {"attention_types": [[["global"], 4]]}),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", {"rotary_dim": 16}),
    "falcon": ("FalconConfig", "FalconForCausalLM", {"new_decoder_architecture": False}),
    "phi": ("PhiConfig", "PhiForCausalLM", {"num_key_value_heads": 4}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"num_key_value_heads": 2}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"num_key_value_heads": 2, "head_dim": 64}),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", {"num_key_value_heads": 4}),
}
#: Size fields every architecture takes, under each config class's own names: ``issue`` is the
#: ALBERT case's size (3-9x the quick preset's largest training workload in FLOPs per iteration
#: at sequence 128), ``in-range`` one whose workloads at sequence 64 fall inside that range, so
#: that an unseen architecture is not also an extrapolation in size (docs/layer_typing.md).
SIZES = {
    "issue": {"hidden": 256, "layers": 4, "heads": 4, "ffn": 1024, "vocab": 8192, "positions": 512},
    "in-range": {"hidden": 128, "layers": 2, "heads": 4, "ffn": 512, "vocab": 8192,
                 "positions": 512},
}  # fmt: skip
SIZE = SIZES["issue"]


def write_config(name: str, directory: Path, size: dict | None = None) -> Path:
    """Write the tiny config of architecture ``name`` to ``directory/<name>.json``.

    Args:
        name: a key of :data:`ARCHITECTURES`.
        directory: where to write.
        size: a value of :data:`SIZES` (default ``issue``).

    Returns:
        The path written.
    """
    size = size or SIZE
    class_name, model_class, extra = ARCHITECTURES[name]
    config_class = getattr(transformers, class_name)
    names = config_class.attribute_map  # e.g. GPT-J's n_embd is its hidden_size
    fields = {
        "hidden_size": size["hidden"],
        "num_hidden_layers": size["layers"],
        "num_attention_heads": size["heads"],
        "intermediate_size": size["ffn"],  # those without it (GPT-J, BLOOM, Falcon) use 4x
        "max_position_embeddings": size["positions"],
        "vocab_size": size["vocab"],
    }
    kwargs = {names.get(k, k): v for k, v in fields.items()}
    if "attention_types" in extra:  # GPT-Neo: one attention type per layer
        extra = {**extra, "attention_types": [[["global"], size["layers"]]]}
    # given to the constructor: some configs derive fields from these (per-layer lists)
    config = config_class(**kwargs, **extra, architectures=[model_class])
    path = directory / f"{name}.json"
    config.to_json_file(path)
    return path


def write_workloads(
    names: list[str],
    config_dir: Path,
    batch_sizes: list[int],
    seq_len: int,
    size: dict | None = None,
) -> Path:
    """The workloads CSV: each architecture at each batch size, one rank, training."""
    config_dir.mkdir(parents=True, exist_ok=True)
    rows = [
        {"family": "hf", "config_path": str(write_config(n, config_dir, size)), "seq_len": seq_len,
         "batch_size": b, "architecture": n}
        for n in names for b in batch_sizes
    ]  # fmt: skip
    path = config_dir / "workloads.csv"
    pd.DataFrame(rows).drop(columns="architecture").to_csv(path, index=False)
    (config_dir / "architectures.json").write_text(json.dumps(rows, indent=1))
    return path


def measured_ms(profiles: Path) -> pd.DataFrame:
    """Per profiled workload: its mean label over usable launches, and every launch's status.

    Returns:
        ``config_path``, ``batch_size``, ``measured_ms`` (NaN when no launch was usable),
        ``launches`` and ``statuses`` (comma-joined).
    """
    columns = ["config_path", "batch_size", "measured_ms", "launches", "statuses"]
    if not (profiles / "runs.parquet").is_file():
        return pd.DataFrame(columns=columns)
    tables = read_tables(profiles)
    runs = tables["runs"]
    statuses = runs.groupby("workload_id")["status"].agg(lambda s: ",".join(map(str, s)))
    workloads = tables["workloads"].set_index("workload_id")
    frame = workloads[["config_path", "batch_size"]].join(statuses.rename("statuses"))
    if (runs["status"] == "ok").any():
        labels = launch_labels(tables).groupby("workload_id")["iteration_ms"].agg(["mean", "size"])
        frame = frame.join(labels.rename(columns={"mean": "measured_ms", "size": "launches"}))
    else:  # no usable launch: launch_labels has nothing to read
        frame = frame.assign(measured_ms=np.nan, launches=0)
    frame["batch_size"] = frame["batch_size"].astype(int)
    return frame.reset_index()[columns]


def control_ratios(
    predictor, design: Path, profiles: Path, preset: str, profile: bool = True
) -> pd.DataFrame:
    """Predicted / measured iteration time of trained-on workloads, measured in this session.

    Args:
        predictor: the loaded predictor.
        design: a design parquet of workloads the predictor was trained on (world size 1 keeps
            it short).
        profiles: where to profile them (resumable).
        preset: the preset whose ``profiling:`` settings to use.
        profile: profile first (else use what ``profiles`` holds).

    Returns:
        ``workload_id``, ``family``, ``predicted_ms``, ``measured_ms``, ``ratio`` per workload.
    """
    from pipelines.defs.assets.profiling import design_workloads
    from scaledl.design import read_design

    if profile:
        command = [
            *(sys.executable, "-m", "scaledl.cli", "profile"),
            *("--design", str(design), "--out", str(profiles), "--preset", preset),
        ]
        subprocess.run(command, check=True)
    rows = read_design(design)
    predicted = predictor.predict(design_workloads(rows))
    labels = launch_labels(read_tables(profiles)).groupby("workload_id")["iteration_ms"].mean()
    frame = pd.DataFrame({
        "workload_id": rows["workload_id"].to_numpy(),
        "family": rows["family"].to_numpy(),
        "predicted_ms": predicted["iteration_s"].to_numpy() * 1e3,
    })  # fmt: skip
    frame["measured_ms"] = frame["workload_id"].map(labels)
    frame["ratio"] = frame["predicted_ms"] / frame["measured_ms"]
    return frame


def main(argv: list[str] | None = None) -> int:
    """Write the configs, profile (unless ``--skip-profile``), predict, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--predictor", type=Path, required=True, help="bundle or name directory")
    parser.add_argument("--profiles", type=Path, default=Path("data/unseen/profiles"))
    parser.add_argument("--configs", type=Path, default=Path("data/unseen/configs"))
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results/unseen_architectures.json")
    )
    parser.add_argument("--only", default="", help="comma-separated architectures (default all)")
    parser.add_argument("--batch-sizes", default="4,8")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--size", choices=sorted(SIZES), default="issue", help="model size")
    parser.add_argument("--preset", default="quick")
    parser.add_argument(
        "--skip-profile", action="store_true", help="use the profiles already in --profiles"
    )
    parser.add_argument("--label", default="", help="a note stored in the JSON (code version)")
    parser.add_argument("--control", type=Path, help="design parquet of trained-on workloads")
    parser.add_argument("--control-profiles", type=Path, help="[<--profiles>-control]")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(ARCHITECTURES)
    unknown = sorted(set(names) - set(ARCHITECTURES))
    if unknown:
        parser.error(f"--only: unknown architecture(s) {unknown}; known: {list(ARCHITECTURES)}")
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    workloads_csv = write_workloads(
        names, args.configs, batch_sizes, args.seq_len, SIZES[args.size]
    )
    if not args.skip_profile:
        command = [
            *(sys.executable, "-m", "scaledl.cli", "profile"),
            *("--workloads", str(workloads_csv), "--out", str(args.profiles)),
            *("--preset", args.preset),
        ]
        subprocess.run(command, check=True)
    predictor = load_predictor(args.predictor)
    control = None
    if args.control is not None:
        control_dir = args.control_profiles or args.profiles.with_name(
            args.profiles.name + "-control"
        )
        control = control_ratios(predictor, args.control, control_dir, args.preset,
                                 profile=not args.skip_profile)  # fmt: skip
    asked = pd.DataFrame(json.loads((args.configs / "architectures.json").read_text()))
    predicted = predictor.predict(asked[["family", "config_path", "seq_len", "batch_size"]])
    out = asked[["architecture", "config_path", "batch_size"]].assign(
        predicted_ms=predicted["iteration_s"].to_numpy() * 1e3,
        in_domain=predicted["in_domain"].to_numpy(),
        extrapolation=predicted["extrapolation"].to_numpy(),
    )
    out = out.merge(measured_ms(args.profiles), on=["config_path", "batch_size"], how="left")
    out["ratio"] = out["predicted_ms"] / out["measured_ms"]
    out["factor_off"] = np.maximum(out["ratio"], 1 / out["ratio"])
    if control is not None:
        out["ratio_vs_control"] = out["ratio"] / control["ratio"].mean()
    out = out.drop(columns="config_path").sort_values(["architecture", "batch_size"])
    done = out.dropna(subset=["measured_ms"])
    worst = done.loc[done["factor_off"].idxmax()] if len(done) else None
    record = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "label": args.label,
        "predictor": str(predictor.path),
        "predictor_device": predictor.devices,
        "profiled_on": local_device_name(),
        "workloads": len(out),
        "measured": len(done),
        "mean_abs_relative_error": float(np.abs(done["ratio"] - 1).mean()) if len(done) else None,
        "worst": None
        if worst is None
        else {
            "architecture": worst["architecture"],
            "batch_size": int(worst["batch_size"]),
            "factor_off": float(worst["factor_off"]),
        },
        "within_2x": int((done["factor_off"] <= 2).sum()),
        "ratio_mean": float(done["ratio"].mean()) if len(done) else None,
        "control": None
        if control is None
        else {
            "design": str(args.control),
            "ratio_mean": float(control["ratio"].mean()),
            "ratio_min": float(control["ratio"].min()),
            "ratio_max": float(control["ratio"].max()),
            "rows": control.replace({np.nan: None}).to_dict("records"),
        },
        "rows": out.replace({np.nan: None}).to_dict("records"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1, default=float) + "\n")
    with pd.option_context("display.width", 200, "display.max_colwidth", 40):
        print(out.drop(columns="extrapolation").to_string(index=False))
    print(
        f"measured {len(done)}/{len(out)}; worst: {record['worst']}; within 2x: "
        f"{record['within_2x']}/{len(done)}; wrote {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
