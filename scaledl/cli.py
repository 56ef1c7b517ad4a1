"""The ``scaledl`` command line (Typer): design, profile, validate, train, predict, evaluate.

Every command is a thin wrapper over the library; ``scaledl COMMAND --help`` lists the options.
Errors in user input (files, fields, values) end the command with exit code 2 and a one-line
message naming the file, field and value.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
import yaml

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.splitlines()[0])

_WORKLOAD_FIELDS_HELP = "family, hidden_size, num_layers, num_heads, ... (Workload fields)"


def _fail(message: str) -> None:
    from scaledl.io.excerpt import bounded

    # Bounded: a message quoting a 50 MB field never floods the terminal.
    typer.secho(f"error: {bounded(message)}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


def output_path(path: Path | None, suffixes: tuple[str, ...], option: str) -> Path | None:
    """Check an output file option before any work: its suffix, and create its folder.

    Args:
        path: the option's value (``None``: not given).
        suffixes: accepted suffixes, e.g. ``(".csv", ".parquet")``.
        option: the option's name, for the error.

    Returns:
        ``path``.

    Raises:
        ValueError: an unknown suffix, or a folder that cannot be created (naming the option,
            the path and the cause).
    """
    if path is None:
        return None
    if path.suffix.lower() not in suffixes:
        raise ValueError(
            f"{option} {path}: unknown suffix {path.suffix!r} (expected one of {list(suffixes)})"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{option} {path}: cannot create its folder: {exc}") from None
    return path


def _write_table(table: pd.DataFrame, out: Path) -> None:
    try:
        if out.suffix.lower() == ".parquet":
            table.to_parquet(out)
        else:
            table.to_csv(out, index=False)
    except OSError as exc:
        _fail(f"{out}: cannot write: {exc}")


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a mapping giving the same key twice (YAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"key {key!r} given twice (lines {seen[key] + 1} and "
                    f"{key_node.start_mark.line + 1}); keep one",
                    key_node.start_mark,
                )  # fmt: skip
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str):
    """YAML text as Python objects, refusing duplicate keys (:class:`_UniqueKeyLoader`).

    Raises:
        yaml.YAMLError: invalid YAML or a key given twice (with its lines).
    """
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def _read_csv(path: Path) -> pd.DataFrame:
    """A CSV whose separator (``,``, ``;``, tab or ``|``) is sniffed; duplicate columns refused.

    A header csv.Sniffer finds no separator in is one column (``,``-separated).

    Raises:
        ValueError: a column given twice in the header.
        UnicodeDecodeError: the file is not UTF-8.
    """
    import csv

    with path.open(newline="", encoding="utf-8") as handle:
        sample = handle.read(64 * 1024)
    first = sample.splitlines()[0] if sample else ""
    try:
        dialect = csv.Sniffer().sniff(first, ",;\t|")
    except csv.Error:
        dialect = csv.excel  # one column: no separator to find
    header = next(csv.reader([first], dialect), [])
    duplicated = sorted({c for c in header if header.count(c) > 1})
    if duplicated:
        raise ValueError(f"column(s) {duplicated} given twice in the header; keep one each")
    # An empty cell is NaN (a field not given); a written "nan" stays text and is refused.
    return pd.read_csv(path, sep=dialect.delimiter, keep_default_na=False, na_values=[""])


def read_workloads_file(path: Path) -> list[dict]:
    """Workload rows from a CSV, YAML (a list of mappings) or parquet file.

    A table's (CSV, parquet) empty cells are fields not given, except where every workload
    has the field (:func:`~scaledl.workloads.spec.table_row`); a YAML entry is a mapping whose
    NaN or empty values are errors when parsed. A key or column given twice is an error.

    Returns:
        One mapping per row, in file order.

    Raises:
        ValueError: unknown suffix, unreadable or undecodable file, duplicate key or column,
            an empty scale-field cell (naming the file, row and field).
    """
    from scaledl.workloads.spec import table_row

    suffix = path.suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            data = load_yaml(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                data = data.get("workloads", [data])
            if not isinstance(data, list):
                raise ValueError("expected a list of workload mappings")
            return data
        if suffix == ".csv":
            frame = _read_csv(path)
        elif suffix == ".parquet":
            frame = pd.read_parquet(path)
        else:
            raise ValueError(f"unknown workload file type {suffix!r} (csv, yaml, parquet)")
    except Exception as exc:
        raise ValueError(f"{path}: cannot read workloads: {exc}") from exc
    return [
        table_row(row, f"{path}: row {i + 1}") for i, row in enumerate(frame.to_dict("records"))
    ]


@app.command()
def design(
    preset: Annotated[
        str, typer.Option(help="Preset name (smoke, quick, paper) or YAML path")
    ] = "quick",
    n: Annotated[int | None, typer.Option(help="Workloads to choose (default: preset's)")] = None,
    sampler: Annotated[str, typer.Option(help="doptimal, random or lhs")] = "doptimal",
    seed: Annotated[int, typer.Option(help="Random seed")] = 0,
    augment: Annotated[Path | None, typer.Option(help="Existing design to augment")] = None,
    out: Annotated[Path, typer.Option(help="Output parquet")] = Path("data/design/design.parquet"),
) -> None:
    """Choose workloads to profile (D-optimal by default) and write the design table."""
    from scaledl.design import (
        augment_design,
        generate_design,
        load_preset,
        read_design,
        write_design,
    )
    from scaledl.workloads.device import local_backend, local_device_name

    try:
        spec = load_preset(preset)
        count = n or spec["design"]["n_workloads"]
        device, backend = local_device_name(), local_backend()
        if augment is not None:
            result = augment_design(spec, read_design(augment), count, seed=seed,
                                    device_name=device, backend=backend)  # fmt: skip
        else:
            result = generate_design(spec, count, sampler=sampler, seed=seed,
                                     device_name=device, backend=backend)  # fmt: skip
    except ValueError as exc:
        _fail(str(exc))
    path = write_design(result, out)
    typer.echo(
        f"{path}: {len(result.table)} workloads ({result.sampler}), log det {result.log_det:.2f}, "
        f"D-efficiency {result.d_efficiency:.3f}, from {result.n_candidates} candidates"
    )


def parse_workloads(rows: list[dict], source: str) -> list:
    """Workloads of table rows, each built and traced once on the meta device.

    Args:
        rows: one mapping per workload (table rows already through
            :func:`~scaledl.workloads.spec.table_row`).
        source: the file (or option) they came from.

    Returns:
        The :class:`~scaledl.workloads.spec.Workload` list, in row order.

    Raises:
        WorkloadError: a row is invalid or its model cannot be built or traced; the message
            names ``source``, the row (from 1) and the field.
    """
    from scaledl.models.features import check_traceable
    from scaledl.workloads.spec import Workload

    specs = []
    for i, row in enumerate(rows):
        where = f"{source}: row {i + 1}"
        spec = Workload.from_record(row, source=where, table=False)
        check_traceable(spec, where)
        specs.append(spec)
    return specs


@app.command()
def profile(
    design: Annotated[Path | None, typer.Option(help="Design parquet to profile")] = None,
    workloads: Annotated[
        Path | None, typer.Option(help="CSV, YAML or parquet of workloads (as for predict)")
    ] = None,
    workload: Annotated[
        str | None, typer.Option(help="One workload as JSON (single-workload form)")
    ] = None,
    out: Annotated[Path, typer.Option(help="Profiles directory")] = Path("data/profiles"),
    force: Annotated[bool, typer.Option(help="Profile again even if already profiled")] = False,
    preset: Annotated[
        str, typer.Option(help="Preset (name or YAML) whose `profiling:` settings to use")
    ] = "quick",
    repeats: Annotated[
        int | None, typer.Option(help="Independent launches per workload (preset's by default)")
    ] = None,
    timeout_s: Annotated[
        float | None, typer.Option(help="Seconds per workload before it is killed")
    ] = None,
    rdzv_endpoint: Annotated[str | None, typer.Option(help="host:port for multi-node")] = None,
    node_rank: Annotated[int, typer.Option(help="This node's rank (multi-node)")] = 0,
) -> None:
    """Profile workloads with torchrun (resumes; failures recorded, never fatal).

    Measurement settings (repeats, warm-up, instrumented rounds, the label stop rule, the
    interference guard) are the preset's ``profiling:`` section, so profiles made here and by
    the pipeline with the same preset are measured alike; ``--repeats`` and ``--timeout-s``
    override it. Every workload is checked before anything is launched: an invalid row, a model
    that cannot be built, or a ``device_name`` other than this host's (profiling measures this
    host) ends the command with exit code 2 naming the file, row and field.
    """
    from scaledl.design import PresetError, load_preset, read_design
    from scaledl.profiling.interrupt import ProfilingInterrupted
    from scaledl.profiling.launch import ProfileSettings, Rendezvous, profile_workloads
    from scaledl.profiling.lock import ProfilesLocked
    from scaledl.profiling.store import ProfileStoreError
    from scaledl.workloads.device import local_device_name
    from scaledl.workloads.spec import WorkloadError, table_row, unique_keys

    if sum(x is not None for x in (design, workloads, workload)) != 1:
        _fail("give exactly one of --design PATH, --workloads FILE or --workload JSON")
    try:
        if design is not None:
            table = read_design(design).to_dict("records")
            rows = [table_row(r, f"{design}: row {i + 1}") for i, r in enumerate(table)]
            source = str(design)
        elif workloads is not None:
            rows, source = read_workloads_file(workloads), str(workloads)
        else:
            try:
                rows, source = [json.loads(workload, object_pairs_hook=unique_keys)], "--workload"
            except ValueError as exc:  # json.JSONDecodeError, or a key given twice
                raise ValueError(f"--workload: invalid JSON: {exc}") from None
        specs = parse_workloads(rows, source)
        for i, spec in enumerate(specs):
            if spec.device_name != local_device_name():
                raise ValueError(
                    f"{source}: row {i + 1}: field 'device_name' (value {spec.device_name!r}): "
                    f"this host profiles on {local_device_name()!r}"
                )
    except (ValueError, WorkloadError) as exc:
        _fail(str(exc))
    rdzv = Rendezvous(endpoint=rdzv_endpoint, node_rank=node_rank) if rdzv_endpoint else None
    overrides = {"repeats": repeats, "timeout_s": timeout_s}
    try:
        settings = ProfileSettings.from_preset(
            load_preset(preset).get("profiling"),
            rendezvous=rdzv,
            **{k: v for k, v in overrides.items() if v is not None},
        )
    except (PresetError, ValueError) as exc:
        _fail(str(exc))
    try:
        summary = profile_workloads(specs, out, settings, force=force)
    except (ProfilesLocked, ProfileStoreError) as exc:
        _fail(str(exc))
    except ProfilingInterrupted as exc:
        done = exc.summary
        _consolidate_or_fail(out)
        typer.echo(
            f"{out}: stopped by {signal.Signals(exc.signum).name}: {done.done} of "
            f"{done.requested} (workload, repeat) parts done"
            + (
                f", {done.interrupted} interrupted (measured again on resume)"
                if done.interrupted
                else ""
            )
            + "; run the same command again to resume",
            err=True,
        )
        raise typer.Exit(exc.exit_code) from None
    _consolidate_or_fail(out)
    disturbed = sum(summary.interference.values())
    typer.echo(
        f"{out}: {summary.ok} (workload, repeat) parts profiled, {summary.skipped} reused, "
        f"{summary.remeasured} re-measured after interference, {disturbed} still disturbed "
        f"(quarantined by validation), {len(summary.failed)} failed {summary.failed or ''} "
        f"in {summary.wall_s:.0f} s"
    )


def _consolidate_or_fail(out: Path) -> None:
    """Consolidate the parts; an unreadable part or a failed write ends the command (exit 2)."""
    from scaledl.profiling.store import UNWRITABLE_ERRNOS, ProfileStoreError, consolidate

    try:
        consolidate(out)
    except ProfileStoreError as exc:
        _fail(f"{exc} (profile that workload again to measure it anew)")
    except OSError as exc:
        if exc.errno not in UNWRITABLE_ERRNOS:
            raise
        _fail(f"{out}: cannot write the consolidated tables: {exc}; the parts are kept")


@app.command()
def validate(
    path: Annotated[Path, typer.Argument(help="Profiles directory")] = Path("data/profiles"),
    out: Annotated[Path | None, typer.Option(help="Validated tables [PATH/../validated]")] = None,
    quarantine: Annotated[Path | None, typer.Option(help="Quarantine [PATH/../quarantine]")] = None,
    report: Annotated[
        Path | None, typer.Option(help="HTML report dir [PATH/../reports/validation]")
    ] = None,
) -> None:
    """Validate profile tables (great-expectations); quarantine bad rows with reasons.

    Outputs go beside the profiles directory (``data/profiles`` -> ``data/validated``,
    ``data/quarantine``, ``data/reports/validation``), so validating a scratch directory never
    overwrites the project's own report.
    """
    from scaledl.validation import ValidationError, validate_profiles

    if not path.is_dir():
        _fail(f"{path}: profiles directory not found")
    root = path.resolve().parent
    out = out or root / "validated"
    quarantine = quarantine or root / "quarantine"
    report = report or root / "reports" / "validation"
    try:
        result = validate_profiles(path, out, quarantine, report)
    except ValidationError as exc:
        _fail(str(exc))
    counts = result.to_dict()
    typer.echo(json.dumps(counts.get("tables", counts), indent=2, default=str)[:4000])
    typer.echo(f"report: {report / 'index.html'}")


@app.command()
def train(
    validated: Annotated[Path, typer.Option(help="Validated profile tables")] = Path(
        "data/validated"
    ),
    registry: Annotated[Path, typer.Option(help="Registry root")] = Path("data/predictors"),
    name: Annotated[str, typer.Option(help="Predictor name")] = "scaledl",
    calibration: Annotated[
        Path | None,
        typer.Option(help="Interval calibration to store (calibration.json of scaledl evaluate)"),
    ] = None,
) -> None:
    """Train the ScaleDL predictor and register it as a new bundle version.

    ``--calibration`` stores the interval calibration that ``scaledl evaluate`` wrote for the
    same validated tables (``<out>/calibration.json``), so the bundle predicts with
    ``--coverage``; a calibration of other tables is refused (exit code 2).
    """
    from scaledl.models.data import ProfileDataError
    from scaledl.models.intervals import CalibrationError, IntervalCalibration
    from scaledl.models.train import train_predictor
    from scaledl.registry import save_bundle, tables_sha256
    from scaledl.registry.bundle import check_calibration_data

    try:
        intervals = IntervalCalibration.read(calibration) if calibration is not None else None
        sha = tables_sha256(validated)
        check_calibration_data(intervals, sha, str(calibration))
        method = train_predictor(validated)
    except (ProfileDataError, CalibrationError) as exc:
        _fail(str(exc))
    data = {"sha256": sha, "workloads": len(method.training_workload_ids_)}
    path = save_bundle(method, registry, name, training_data=data, calibration=intervals)
    typer.echo(f"registered {path}")


@app.command()
def predict(
    predictor: Annotated[Path, typer.Option(help="Bundle or name directory")] = Path(
        "data/predictors/scaledl"
    ),
    workloads: Annotated[
        Path | None, typer.Option(help="CSV, YAML or parquet of workloads")
    ] = None,
    family: Annotated[str | None, typer.Option(help="Inline workload: family")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Inline field=value (repeat)")
    ] = None,
    detail: Annotated[bool, typer.Option(help="Also print per-layer predictions")] = False,
    out: Annotated[Path | None, typer.Option(help="Write predictions (csv/parquet)")] = None,
    coverage: Annotated[
        float | None,
        typer.Option(help="Add calibrated intervals of this coverage, e.g. 0.9 (*_low, *_high)"),
    ] = None,
    strict: Annotated[
        bool, typer.Option(help="Exit 2 when a workload lies outside the training domain")
    ] = False,
) -> None:
    """Predict iteration and epoch time of workloads from a trained predictor.

    Every row says whether it lies in the predictor's training domain (``in_domain``) and, if
    not, why (listed below the table; with more than 5 such rows, counted by reason with the
    first 5 rows); ``--strict`` makes that an error (exit code 2 naming the
    row and field). ``--coverage 0.9`` adds 90% conformal intervals. A CSV or parquet file
    predicted into ``--out`` is streamed: read, predicted and written in chunks (a progress bar
    on stderr), the output complete or absent; the first rows are printed.
    """
    from scaledl.registry import BundleError, load_predictor
    from scaledl.registry.guard import summarise_outside
    from scaledl.workloads.spec import WorkloadError

    if workloads is not None and out is not None and not detail:
        if workloads.suffix.lower() in (".csv", ".parquet"):
            _predict_streamed(predictor, workloads, out, coverage, strict)
            return
    try:
        output_path(out, (".csv", ".parquet"), "--out")
        rows = _workload_rows(workloads, family, set_)
        model = load_predictor(predictor)
        result = model.predict(
            rows, detail=detail, source=str(workloads or "--set"), coverage=coverage,
            strict=strict,
        )  # fmt: skip
    except (ValueError, WorkloadError, BundleError) as exc:
        _fail(str(exc))
    table, nodes = result if detail else (result, None)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        typer.echo(table.drop(columns=["extrapolation"]).to_string(index=False))
        if nodes is not None:
            typer.echo(nodes.to_string(index=False))
    for line in summarise_outside(table["extrapolation"].tolist()):
        typer.secho(line, err=True, fg=typer.colors.YELLOW)
    if out is not None:
        _write_table(table, out)


def _predict_streamed(
    predictor: Path, workloads: Path, out: Path, coverage: float | None, strict: bool
) -> None:
    """``scaledl predict --workloads FILE --out OUT`` in chunks (:mod:`scaledl.prediction`)."""
    from scaledl.prediction.stream import predict_file
    from scaledl.registry import BundleError, load_predictor
    from scaledl.workloads.spec import WorkloadError

    try:
        output_path(out, (".csv", ".parquet"), "--out")
        summary = predict_file(load_predictor(predictor), workloads, out, coverage, strict)
    except (ValueError, WorkloadError, BundleError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"{out}: cannot write: {exc}")
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        typer.echo(summary.head.drop(columns=["extrapolation"]).to_string(index=False))
    if summary.rows > len(summary.head):
        typer.echo(f"... {summary.rows - len(summary.head)} more rows")
    typer.echo(f"{summary.rows} predictions: {out}")
    for line in summary.outside_lines():
        typer.secho(line, err=True, fg=typer.colors.YELLOW)


def _workload_rows(
    workloads: Path | None, family: str | None, set_: list[str] | None
) -> list[dict]:
    """The workload rows of ``--workloads FILE`` or of an inline ``--family``/``--set``.

    A ``--set`` value is read as YAML (``8``, ``bf16``); ``nan``, ``.nan``, ``inf`` or an empty
    value is refused when the row is parsed, and a field set twice is an error.

    Raises:
        ValueError: neither given, a bad or repeated ``--set`` item or an unreadable file.
    """
    if workloads is not None:
        return read_workloads_file(workloads)
    if family is None:
        raise ValueError("give --workloads FILE or an inline workload (--family and --set)")
    record: dict = {"family": family}
    for item in set_ or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r}: expected field=value")
        if key in record:
            raise ValueError(f"--set {item!r}: field {key!r} given twice; keep one")
        value = load_yaml(value)
        if isinstance(value, str) and value.strip().lower() in ("nan", "inf", "-inf", "+inf"):
            value = float(value)  # refused as not a finite number, as in a file
        record[key] = value
    return [record]


def _int_list(text: str, option: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``; an item ``a-b`` is the range ``a`` to ``b`` inclusive.

    Raises:
        ValueError: naming the option and the value.
    """
    expected = f"{option} {text!r}: expected comma-separated integers or ranges a-b"
    values: list[int] = []
    try:
        for item in (v.strip() for v in text.split(",")):
            low, dash, high = item.partition("-")
            if dash and low:  # a range a-b (a lone "-3" is a negative number, refused later)
                if int(high) < int(low):
                    raise ValueError(expected)
                values.extend(range(int(low), int(high) + 1))
            elif item:
                values.append(int(item))
    except ValueError:
        raise ValueError(expected) from None
    if not values:
        raise ValueError(expected)
    return values


@app.command()
def plan(
    dataset_size: Annotated[int, typer.Option(help="Samples per epoch")],
    epochs: Annotated[float, typer.Option(help="Epochs to train")],
    price_per_device_hour: Annotated[float, typer.Option(help="Price of one device-hour")],
    predictor: Annotated[Path, typer.Option(help="Bundle or name directory")] = Path(
        "data/predictors/scaledl"
    ),
    model: Annotated[
        Path | None, typer.Option(help="YAML/CSV/parquet: one row, the model's workload fields")
    ] = None,
    family: Annotated[str | None, typer.Option(help="Inline model: family")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Inline model field=value (repeat)")
    ] = None,
    world_sizes: Annotated[
        str, typer.Option(help="Candidate world sizes (a,b,... or ranges a-b)")
    ] = "1,2,4,8",
    nodes: Annotated[str, typer.Option(help="Candidate node counts")] = "1",
    batch_sizes: Annotated[str, typer.Option(help="Candidate per-rank batch sizes")] = "1,2,4,8",
    devices_per_node: Annotated[int | None, typer.Option(help="Devices per node")] = None,
    device_memory_gb: Annotated[
        float | None, typer.Option(help="Memory per rank in GB [device table]")
    ] = None,
    deadline_h: Annotated[float | None, typer.Option(help="Time-to-train deadline, hours")] = None,
    coverage: Annotated[
        float | None, typer.Option(help="Interval coverage (0 disables intervals)")
    ] = 0.9,
    strict: Annotated[bool, typer.Option(help="Only in-domain candidates are eligible")] = False,
    png: Annotated[Path | None, typer.Option(help="Write the Pareto-front figure here")] = None,
    out: Annotated[Path | None, typer.Option(help="Write every candidate (csv/parquet)")] = None,
    all_rows: Annotated[bool, typer.Option("--all", help="Print every candidate")] = False,
) -> None:
    """Plan a training run: the cheapest world size, nodes and batch size meeting a deadline.

    Predicts every candidate (world sizes x nodes x per-rank batch sizes) of the model, drops
    those that do not fit in memory, and prints the Pareto front of time to train vs cost and
    the cheapest candidate whose interval's upper bound meets ``--deadline-h``.
    """
    from scaledl.models.intervals import CalibrationError
    from scaledl.planning import PlanError
    from scaledl.planning import plan as make_plan
    from scaledl.registry import BundleError, load_predictor
    from scaledl.workloads.spec import WorkloadError

    try:
        output_path(out, (".csv", ".parquet"), "--out")
        output_path(png, (".png",), "--png")
        rows = _workload_rows(model, family, set_)
        if len(rows) != 1:
            raise ValueError(f"{model}: expected one model row, found {len(rows)}")
        result = make_plan(
            load_predictor(predictor),
            rows[0],
            dataset_size=dataset_size,
            epochs=epochs,
            world_sizes=_int_list(world_sizes, "--world-sizes"),
            batch_sizes=_int_list(batch_sizes, "--batch-sizes"),
            nodes=_int_list(nodes, "--nodes"),
            price_per_device_hour=price_per_device_hour,
            device_memory_gb=device_memory_gb,
            deadline_h=deadline_h,
            coverage=coverage or None,
            devices_per_node=devices_per_node,
            strict=strict,
        )
    except (PlanError, CalibrationError, ValueError, WorkloadError, BundleError) as exc:
        _fail(str(exc))
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        typer.echo(result.to_text(all_rows=all_rows))
    if png is not None:
        typer.echo(f"figure: {result.plot(png)}")
    if out is not None:
        _write_table(result.table, out)
        typer.echo(f"table: {out}")


import_app = typer.Typer(no_args_is_help=True, help="Import measurements of others as profiles.")
app.add_typer(import_app, name="import")


@import_app.command("neusight")
def import_neusight_command(
    path: Annotated[
        Path, typer.Argument(help="NeuSight data folder (label/, model_configs/, ...)")
    ],
    out: Annotated[Path, typer.Option(help="Output profiles folder")] = Path(
        "data/imported/neusight"
    ),
) -> None:
    """Import NeuSight's GPU traces and labels as standard profile tables (then validate them).

    Every label not imported (no trace beside it, a ``-fusion`` label) is counted and named
    with its reason; an unreadable or undecodable file ends the command with exit code 2
    naming it.
    """
    from scaledl.external.neusight import NeusightFormatError
    from scaledl.external.neusight_tables import import_neusight

    try:
        summary = import_neusight(path, out)
    except (NeusightFormatError, FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
    rows = ", ".join(f"{name} {n}" for name, n in summary.tables.items())
    typer.echo(f"{out}: {rows}")
    typer.echo(f"not carried by the traces: {'; '.join(summary.manifest['not_carried'])}")
    skipped = summary.manifest["skipped_labels"]
    if skipped["count"]:
        typer.secho(f"{skipped['count']} label(s) not imported (all in {out}/import.json):",
                    err=True, fg=typer.colors.YELLOW)  # fmt: skip
        for reason, files in skipped["by_reason"].items():
            names = ", ".join(Path(f).name for f in files[:10])
            more = f" and {len(files) - 10} more" if len(files) > 10 else ""
            typer.secho(f"  {len(files)}: {reason}: {names}{more}", err=True,
                        fg=typer.colors.YELLOW)  # fmt: skip
    typer.echo(f"next: scaledl validate {out}")


@app.command()
def devices(
    probe: Annotated[
        bool, typer.Option(help="Measure this CPU host (GEMM + memory copy) and store it")
    ] = False,
    hosts_dir: Annotated[Path | None, typer.Option(help="Where host specs are stored")] = None,
) -> None:
    """List the device table (GPUs with sources, measured CPU hosts); --probe adds this host."""
    from scaledl.devices import known_devices
    from scaledl.devices.host import probe_host, store_host_spec

    if probe:
        spec = probe_host()
        path = store_host_spec(spec, hosts_dir)
        typer.echo(
            f"{path}: {spec.device_name}: {spec.peak_tflops['fp32'] * 1e3:.1f} GFLOP/s fp32, "
            f"{spec.mem_bandwidth_gbps:.1f} GB/s (one thread)"
        )
    table = known_devices(hosts_dir)
    columns = ["device_name", "peak_fp32_tflops", "peak_bf16_tflops", "mem_bandwidth_gbps",
               "num_sms", "l2_mb", "memory_gb"]  # fmt: skip
    with pd.option_context("display.width", 160, "display.max_columns", 10):
        typer.echo(table[columns].to_string(index=False))


@app.command("list-predictors")
def list_predictors_command(
    registry: Annotated[Path, typer.Option(help="Registry root")] = Path("data/predictors"),
) -> None:
    """List registered predictor bundles; a broken version is listed with its reason."""
    from scaledl.registry import list_predictors

    table = list_predictors(registry)
    if not len(table):
        typer.echo(f"{registry}: no predictor")
        return
    typer.echo(table.drop(columns=["problem"]).to_string(index=False))
    for row in table[table["status"] != "ok"].itertuples(index=False):
        typer.secho(f"{row.name} {row.version}: {row.status}: {row.problem}", err=True)


@app.command()
def evaluate(
    profiles: Annotated[Path, typer.Option(help="Validated profile tables")] = Path(
        "data/validated"
    ),
    out: Annotated[Path, typer.Option(help="Report directory")] = Path("data/reports"),
    gpu_profiles: Annotated[
        Path | None, typer.Option(help="Validated imported GPU profiles (GPU evaluation)")
    ] = None,
    gpu_parallel_labels: Annotated[
        Path | None, typer.Option(help="The import's parallel_labels.parquet")
    ] = None,
) -> None:
    """Evaluate ScaleDL and the baselines (ID, leave-one-family-out, extrapolation, GPU, ...)."""
    from scaledl.evaluation import EvaluationConfig
    from scaledl.evaluation import evaluate as run_evaluation
    from scaledl.models.data import ProfileDataError

    config = EvaluationConfig(gpu_profiles=gpu_profiles, gpu_parallel_labels=gpu_parallel_labels)
    try:
        metrics = run_evaluation(profiles, out, config)
    except ProfileDataError as exc:
        _fail(str(exc))
    typer.echo(headline(metrics))
    typer.echo(f"report: {out / 'report.html'}")


@app.command("evaluate-gpu")
def evaluate_gpu_command(
    profiles: Annotated[Path, typer.Option(help="Validated imported GPU profiles")] = Path(
        "data/imported/validated/neusight"
    ),
    parallel_labels: Annotated[
        Path | None, typer.Option(help="The import's parallel_labels.parquet")
    ] = Path("data/imported/neusight/parallel_labels.parquet"),
    out: Annotated[Path, typer.Option(help="Output directory")] = Path("data/reports"),
) -> None:
    """Evaluate the device-aware predictor on imported GPU profiles only (LOMO, LOGO, -dp4)."""
    from scaledl.evaluation.evaluate import EXTERNAL_ROOT
    from scaledl.evaluation.gpu import GpuEvaluationConfig, evaluate_gpu
    from scaledl.models.data import ProfileDataError

    if not profiles.is_dir():
        _fail(f"{profiles}: validated GPU profiles not found (scaledl import neusight, validate)")
    labels = parallel_labels if parallel_labels is not None and parallel_labels.is_file() else None
    config = GpuEvaluationConfig(
        parallel_labels=labels, vidur_root=EXTERNAL_ROOT / "vidur" / "network"
    )
    try:
        metrics, pred = evaluate_gpu(profiles, config)
    except (ProfileDataError, ValueError) as exc:
        _fail(str(exc))
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_metrics.json").write_text(json.dumps(metrics, indent=2, default=str))
    pred.to_parquet(out / "gpu_predictions.parquet", index=False)
    for target in metrics["targets"]:
        typer.echo(f"{target['target']}: {target['measured']} (reached: {target['reached']})")
    typer.echo(f"metrics: {out / 'gpu_metrics.json'}")


def headline(metrics) -> str:
    """The headline MRE/RMSE of ScaleDL and the baselines, one line per split and method.

    Args:
        metrics: a :class:`~scaledl.evaluation.results.Metrics`.

    Returns:
        The lines (skipped splits are named with the reason).
    """
    from scaledl.evaluation.results import Skipped

    lines = []
    for split in ("id", "extrapolation", "ood"):
        label = "ood (mean)" if split == "ood" else split
        body = getattr(metrics.splits, split)
        if isinstance(body, Skipped):
            lines.append(f"{label:>13} skipped: {body.skipped}")
            continue
        for method in metrics.methods:
            if split != "ood" and method not in body.methods:
                continue
            m = metrics.method_errors(split, method)
            lines.append(f"{label:>13} {method:<12} MRE {m.mre:.1%}  RMSE {m.rmse_s:.4f} s")
    return "\n".join(lines)


@app.command()
def summary(
    data: Annotated[Path, typer.Option(help="Data root", envvar="SCALEDL_DATA_DIR")] = Path("data"),
    markdown: Annotated[
        bool,
        typer.Option(
            "--markdown",
            help="Copy the metrics to --results and write the README's results block from it",
        ),
    ] = False,
    readme: Annotated[Path, typer.Option(help="README with the results markers")] = Path(
        "README.md"
    ),
    results: Annotated[Path, typer.Option(help="Committed results file (--markdown)")] = Path(
        "docs/results/metrics.json"
    ),
) -> None:
    """Print where the report and the predictor are, and the headline MRE/RMSE.

    With ``--markdown``, ``<data>/reports/metrics.json`` is validated and copied to ``--results``
    (commit it), and the block between the results markers of ``--readme`` is regenerated from
    that copy; a test keeps the two in step.
    """
    from scaledl.evaluation.report import reproducibility_text
    from scaledl.evaluation.results import Metrics, MetricsError
    from scaledl.evaluation.summary import ReadmeBlockError, write_readme_block

    metrics_path = data / "reports" / "metrics.json"
    if not metrics_path.exists():
        _fail(f"{metrics_path}: no evaluation yet (run `make run`)")
    try:
        metrics = Metrics.read(metrics_path)
        if markdown:
            metrics.write(results)
            write_readme_block(results, readme, source=results.as_posix())
    except (MetricsError, ReadmeBlockError) as exc:
        _fail(str(exc))
    if markdown:
        typer.echo(f"{results}: written from {metrics_path}")
        typer.echo(f"{readme}: results block regenerated from {results}")
        return
    latest = data / "predictors" / "scaledl" / "latest"
    if not latest.exists():
        _fail(f"{latest}: no registered predictor yet (run `make run`)")
    if not latest.is_file():  # a symlink to a version directory, say
        _fail(f"{latest}: not a one-line file naming the version")
    bundle = data / "predictors" / "scaledl" / latest.read_text().strip()
    typer.echo(f"report:    {data / 'reports' / 'report.html'}")
    typer.echo(f"metrics:   {metrics_path}")
    typer.echo(f"predictor: {bundle}")
    typer.echo(
        "label reproducibility (MRE between launches, the noise floor): "
        + reproducibility_text(metrics)
    )
    typer.echo(headline(metrics))
    _echo_label_quality(data / "profiles")


def _echo_label_quality(profiles: Path) -> None:
    """The profile's kept share and drift verdict (a warning when the labels did not absorb it)."""
    from scaledl.evaluation.reproducibility import label_quality
    from scaledl.models.data import ProfileDataError, read_tables

    try:
        quality = label_quality(read_tables(profiles))
    except (ProfileDataError, ValueError) as exc:
        typer.echo(f"labels:    not assessed ({exc})")
        return
    if quality["absorbed"]:
        typer.echo(f"labels:    {quality['message']}")
    else:
        typer.secho(f"warning:   {quality['message']}", fg=typer.colors.YELLOW, err=True)


@app.command()
def reproducibility(
    run_a: Annotated[Path, typer.Argument(help="Profiles directory of run A")],
    run_b: Annotated[Path, typer.Argument(help="Profiles directory of run B (same design)")],
    out: Annotated[Path | None, typer.Option(help="Write the figures as JSON")] = None,
) -> None:
    """Label MRE between two independent profiles of one design: raw vs host-drift corrected.

    Each label candidate (raw and corrected launch labels, median or fastest launch) is scored
    by its MRE between the two runs, and compared with the raw label paired over workloads
    (BCa bootstrap): :func:`scaledl.evaluation.reproducibility.cross_run_reproducibility`.
    """
    from scaledl.evaluation.reproducibility import cross_run_reproducibility
    from scaledl.models.data import ProfileDataError, read_tables

    out = output_path(out, (".json",), "--out")
    try:
        result = cross_run_reproducibility(read_tables(run_a), read_tables(run_b))
    except (ProfileDataError, ValueError) as exc:
        _fail(str(exc))
    typer.echo(f"{result['n_workloads']} workloads profiled in both runs")
    for name, c in result["candidates"].items():
        per_ws = ", ".join(
            f"world size {k}: {v['mre']:.2%}" for k, v in c["per_world_size"].items()
        )
        typer.echo(f"{name:>22}: label MRE between runs {c['mre']:.2%} ({per_ws})")
    for name, comparison in result["comparisons"].items():
        typer.echo(
            f"{name} vs raw: {100 * comparison['mre_difference']:+.2f} points (95% CI "
            f"{100 * comparison['ci_low']:+.2f} to {100 * comparison['ci_high']:+.2f}): "
            f"{comparison['verdict']}"
        )
    if out is not None:
        out.write_text(json.dumps(result, indent=2))
        typer.echo(f"{out}: written")


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
