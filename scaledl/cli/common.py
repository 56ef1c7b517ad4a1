"""Helpers shared by the command modules: the exit-2 error, output checks, workload rows."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import typer

from scaledl.layout import DataLayout
from scaledl.workloads.files import load_yaml, read_workloads_file

if TYPE_CHECKING:
    from scaledl.report.blocks.registry import Block


def fail(message: str) -> None:
    """Print ``error: MESSAGE`` (bounded) in red on stderr and exit with code 2."""
    from scaledl.io.excerpt import bounded

    # Bounded: a message quoting a 50 MB field never floods the terminal.
    typer.secho(f"error: {bounded(message)}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


def layout() -> DataLayout:
    """The data layout of ``$SCALEDL_DATA_DIR`` (``data`` when unset): the commands' defaults."""
    return DataLayout.from_env()


def output_path(path: Path | None, suffixes: tuple[str, ...], option: str) -> Path | None:
    """Check an output file option before any work: its suffix, and create its folder.

    Args:
        path: the option's value (``None``: not given).
        suffixes: accepted suffixes, e.g. ``(".csv", ".parquet")``.
        option: the option's name, for the error.

    Returns:
        ``path``.

    Raises:
        ValueError: an unknown suffix, a path that is an existing folder, or a folder that
            cannot be created or written (naming the option, the path and the cause).
    """
    if path is None:
        return None
    if path.suffix.lower() not in suffixes:
        raise ValueError(
            f"{option} {path}: unknown suffix {path.suffix!r} (expected one of {list(suffixes)})"
        )
    if path.is_dir():
        raise ValueError(
            f"{option} {path}: a folder; give a file path in it, e.g. {path / f'out{path.suffix}'}"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{option} {path}: cannot create its folder: {exc}") from None
    if not os.access(path.parent, os.W_OK):  # found after the work otherwise
        raise ValueError(f"{option} {path}: its folder {path.parent} is not writable")
    return path


def _same_path(a: Path, b: Path) -> bool:
    """Whether two paths name one file or folder: after links and ``..``, or by inode."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)  # a hard link
    except OSError:  # one of them does not exist yet
        return False


def refuse_overwrite(
    outputs: dict[str, Path | None], inputs: dict[str, Path | Iterable[Path] | None]
) -> None:
    """Refuse, before any work, an output that is one of the command's inputs or outputs.

    Two paths are the same when they resolve to one path (:func:`os.path.realpath`: symbolic
    links, ``..``) or are one file (:func:`os.path.samefile`: hard links). Every command that
    reads files and writes an output calls this first, so an output never replaces its input.

    Args:
        outputs: option name -> output path (``None``: not written).
        inputs: option name -> input path, or several (``--repeat``), or ``None``; one that
            does not exist is skipped.

    Raises:
        ValueError: one line naming both options and both paths.
    """
    given = [(name, Path(p)) for name, p in outputs.items() if p is not None]
    read = [
        (name, Path(p))
        for name, value in inputs.items()
        if value is not None
        for p in ([value] if isinstance(value, str | os.PathLike) else value)
        if os.path.exists(p)  # a name that is no file (a preset name) cannot be replaced
    ]
    for i, (out_name, out) in enumerate(given):
        for kind, others in (("input", read), ("output", given[:i])):
            for name, other in others:
                if _same_path(out, other):
                    raise ValueError(
                        f"{out_name} {out}: the same file as the {kind} {name} {other} "
                        f"({os.path.realpath(other)}); refused, it would be overwritten: "
                        "write to another path"
                    )


def writable_folder(path: Path, option: str, what: str) -> Path:
    """Create an output folder and prove it writable (a temporary file), before any work.

    Args:
        path: the folder.
        option: the option naming it, for the error.
        what: what the command writes there (``"the validated tables"``), for the error.

    Returns:
        ``path``.

    Raises:
        ValueError: the folder cannot be created or written (a read-only file system, no
            permission, a full disk): one line naming the option, the folder and ``what``.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError as exc:
        raise ValueError(
            f"{option} {path}: cannot write {what} here ({exc.strerror or exc}); give {option} "
            "a writable folder"
        ) from None
    return path


def write_table(table: pd.DataFrame, out: Path) -> None:
    """Write a table as parquet or CSV (by ``out``'s suffix); an ``OSError`` exits with code 2."""
    try:
        if out.suffix.lower() == ".parquet":
            table.to_parquet(out)
        else:
            table.to_csv(out, index=False)
    except OSError as exc:
        fail(f"{out}: cannot write: {exc}")


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
    from scaledl.graph.features import check_traceable
    from scaledl.workloads.spec import Workload

    specs = []
    for i, row in enumerate(rows):
        where = f"{source}: row {i + 1}"
        spec = Workload.from_record(row, source=where, table=False)
        check_traceable(spec, where)
        specs.append(spec)
    return specs


def check_one_source(
    workloads: Path | None, family: str | None, set_: list[str] | None, option: str = "--workloads"
) -> None:
    """Refuse a workloads file given together with an inline ``--family``/``--set`` workload.

    Raises:
        ValueError: both given (one would be ignored), naming the options.
    """
    inline = [name for name, value in (("--family", family), ("--set", set_)) if value]
    if workloads is not None and inline:
        raise ValueError(
            f"{option} {workloads} and {' / '.join(inline)}: give either a file or an inline "
            "workload, not both"
        )


def workload_rows(
    workloads: Path | None, family: str | None, set_: list[str] | None, option: str = "--workloads"
) -> list[dict]:
    """The workload rows of a file (``option``, ``--workloads``) or of ``--family``/``--set``.

    A ``--set`` value is read as YAML (``8``, ``bf16``); ``nan``, ``.nan``, ``inf`` or an empty
    value is refused when the row is parsed, and a field set twice is an error.

    Raises:
        ValueError: neither given, both given (a file and ``--family``/``--set``), a bad or
            repeated ``--set`` item or an unreadable file.
    """
    check_one_source(workloads, family, set_, option)
    if workloads is not None:
        return read_workloads_file(workloads)
    if family is None:
        raise ValueError(f"give {option} FILE or an inline workload (--family and --set)")
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


#: Most values one integer list option may expand to (ranges included), counted before any
#: range is expanded: the planner's candidate limit
#: (:data:`scaledl.planning.planner.MAX_PLAN_CANDIDATES`), since each value is at least one
#: candidate.
INT_LIST_LIMIT = 262_144


def int_list(text: str, option: str, limit: int = INT_LIST_LIMIT) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``; an item ``a-b`` is the range ``a`` to ``b`` inclusive.

    The values are counted before a range is expanded: more than ``limit`` is refused, so a
    range like ``1-10000000`` costs nothing.

    Raises:
        ValueError: a bad item, or more than ``limit`` values (naming the option, the value and
            the count).
    """
    expected = f"{option} {text!r}: expected comma-separated integers or ranges a-b"
    items: list[tuple[int, int]] = []  # (low, high) inclusive
    try:
        for item in (v.strip() for v in text.split(",")):
            low, dash, high = item.partition("-")
            if dash and low:  # a range a-b (a lone "-3" is a negative number, refused later)
                if int(high) < int(low):
                    raise ValueError(expected)
                items.append((int(low), int(high)))
            elif item:
                items.append((int(item), int(item)))
    except ValueError:
        raise ValueError(expected) from None
    if not items:
        raise ValueError(expected)
    count = sum(high - low + 1 for low, high in items)
    if count > limit:
        raise ValueError(
            f"{option} {text!r:.80}: {count:,} values, over the limit of {limit:,}; give "
            "fewer or narrower ranges"
        )
    return [v for low, high in items for v in range(low, high + 1)]


def check_readme(readme: Path | None, block: Block) -> None:
    """Refuse, before any work, a ``--readme`` page without ``block``'s markers.

    Raises:
        scaledl.report.blocks.registry.BlockError: the page or its markers are missing or
            malformed (naming the page).
    """
    if readme is None:
        return
    from scaledl.report.blocks.registry import check_markers

    check_markers(block, readme)


def render_readme(readme: Path | None, block: Block, result: Path) -> None:
    """Render ``block`` from the result file just written into ``--readme`` (one writer).

    Exits 2 naming the file when the page or the result cannot be rendered.
    """
    if readme is None:
        return
    from scaledl.report.blocks.registry import BlockError, write_page

    try:
        write_page(readme, [block], [result])
    except BlockError as exc:
        fail(str(exc))
    typer.echo(f"{readme}: {block.name} block rewritten from {result}")
