"""The generated part of a profile dataset's datasheet: what its tables hold, from the tables.

A committed dataset (``datasets/reference-cpu/``) carries a ``DATASHEET.md`` in the spirit of
Gebru et al. 2021, *Datasheets for Datasets* (motivation, composition, collection process,
uses). Its composition and collection facts are rendered from the validated tables by
:func:`datasheet_markdown` into the ``datasheet`` block of its ``DATASHEET.md``
(:mod:`scaledl.report.blocks.registry`, ``scaledl docs render``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from scaledl.evaluation.reproducibility import label_quality
from scaledl.models.data import read_tables
from scaledl.workloads.identity import family_key
from scaledl.workloads.parallelism import is_data_parallel, layout_label
from scaledl.workloads.spec import Workload

#: Profiling settings recorded on every run row, reported when they are constant.
SETTING_COLUMNS = ("warmup_steps", "instrumented_steps", "layer_stride", "torch_version",
                   "python_version", "device_name", "host")  # fmt: skip


def _cells(workloads: pd.DataFrame, source: str) -> pd.DataFrame:
    """Family, world size and layout of each workload, by ``workload_id``.

    The family is :func:`family_key`'s, the layout
    :func:`~scaledl.workloads.parallelism.layout_label`'s.
    """
    rows = []
    for record in workloads.to_dict("records"):
        w = Workload.from_record(record, source=source)
        rows.append({"workload_id": w.workload_id, "family": family_key(w),
                     "world_size": w.world_size, "layout": layout_label(w),
                     "data_parallel": is_data_parallel(w)})  # fmt: skip
    return pd.DataFrame(rows)


def _layouts(cells: pd.DataFrame) -> list[str]:
    """Markdown lines of the workloads per parallel layout and family (none if all DDP)."""
    if cells["data_parallel"].all():
        return []
    table = cells.pivot_table(index="layout", columns="family", aggfunc="size", fill_value=0)
    lines = ["", "Workloads with a usable launch per parallel layout:", ""]
    lines.append("| layout | " + " | ".join(table.columns) + " |")
    lines.append("| --- |" + " --- |" * len(table.columns))
    for layout, row in table.iterrows():
        lines.append(f"| {layout} | " + " | ".join(str(int(v)) for v in row) + " |")
    return lines


def _families(cells: pd.DataFrame) -> pd.DataFrame:
    table = cells.pivot_table(index="family", columns="world_size", aggfunc="size", fill_value=0)
    table.columns = [f"world size {c}" for c in table.columns]
    table["workloads"] = table.sum(axis=1)
    return table


@dataclass(frozen=True)
class DatasheetTables:
    """A profile directory's validated tables and where they were read.

    Attributes:
        directory: the folder (``datasets/<name>/validated``).
        tables: table name -> frame (:func:`scaledl.models.data.read_tables`).
    """

    directory: Path
    tables: dict[str, pd.DataFrame]


def read_datasheet_tables(directory: Path) -> DatasheetTables:
    """The validated tables of ``directory``.

    Raises:
        scaledl.models.data.ProfileDataError: a table is missing or malformed.
    """
    return DatasheetTables(Path(directory), read_tables(Path(directory)))


def datasheet_markdown(sheet: DatasheetTables) -> str:
    """The datasheet's generated Markdown (module docstring), without the markers.

    Args:
        sheet: :func:`read_datasheet_tables` of a validated profile directory.

    Returns:
        Markdown: workloads per family and world size (and per layout), then the collection
        facts (launches, measurement window, settings, kept launches, label noise).
    """
    tables, directory = sheet.tables, sheet.directory
    runs = tables["runs"]
    cells = _cells(tables["workloads"], f"{directory}/workloads.parquet")
    measured = cells["workload_id"].isin(set(runs["workload_id"]))
    families = _families(cells[measured])
    quality = label_quality(tables)
    launches = runs.groupby("workload_id").size()
    lines = ["Workloads with a usable launch:", ""]
    lines.append("| family | " + " | ".join(families.columns) + " |")
    lines.append("| --- |" + " --- |" * len(families.columns))
    for family, row in families.iterrows():
        lines.append(f"| {family} | " + " | ".join(str(int(v)) for v in row) + " |")
    total = families.sum()
    lines.append("| **all** | " + " | ".join(f"**{int(v)}**" for v in total) + " |")
    lines += _layouts(cells[measured][["layout", "family", "data_parallel"]])
    missing = cells[~measured].groupby(["family", "world_size"]).size()
    without = ", ".join(f"{f} at world size {ws}: {n}" for (f, ws), n in missing.items())
    lines += [
        "",
        f"- Workloads: {int(measured.sum())} with a usable launch in {len(families)} families, "
        f"of {len(cells)} drawn; without one: {int((~measured).sum())}"
        + (f" ({without})" if without else "")
        + f". Usable launches (independent `torchrun` runs) per workload: {launches.min()}-"
        f"{launches.max()} ({len(runs)} in all).",
        f"- Measured from {runs['started_at'].min()} to {runs['finished_at'].max()} (UTC).",
    ]
    for column in SETTING_COLUMNS:
        if column in runs:
            values = sorted(runs[column].astype(str).unique())
            lines.append(f"- `{column}`: {', '.join(values)}")
    lines += [
        f"- Launches kept (ok, not flagged by the interference guard, inside the drift "
        f"correction's range): {quality['kept']} of {quality['parts']} "
        f"({quality['kept_share']:.1%}).",
        f"- Launch-to-launch label MRE within the run: raw {quality['launch_mre_raw']:.2%}, "
        f"drift-corrected {quality['launch_mre_corrected']:.2%}.",
    ]
    return "\n".join(lines)
