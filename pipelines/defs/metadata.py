"""Helpers that turn library results into Dagster metadata (markdown tables, embedded PNGs)."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from pathlib import Path

import dagster as dg
import pandas as pd

MAX_EMBEDDED_PNG_BYTES = 400_000


def md_table(frame: pd.DataFrame, max_rows: int = 50) -> dg.MetadataValue:
    """A markdown table of ``frame`` (first ``max_rows`` rows, noting any cut)."""
    if frame.empty:
        return dg.MetadataValue.md("_(empty)_")
    text = frame.head(max_rows).to_markdown(index=False, floatfmt=".4g")
    if len(frame) > max_rows:
        text += f"\n\n_{len(frame) - max_rows} more rows not shown_"
    return dg.MetadataValue.md(text)


def png_markdown(paths: Iterable[Path], limit_bytes: int = MAX_EMBEDDED_PNG_BYTES) -> str:
    """Markdown embedding each PNG as base64 (larger files are linked by path instead)."""
    parts = []
    for path in sorted(Path(p) for p in paths):
        data = path.read_bytes()
        if len(data) <= limit_bytes:
            encoded = base64.b64encode(data).decode()
            parts.append(f"**{path.stem}**\n\n![{path.stem}](data:image/png;base64,{encoded})")
        else:
            parts.append(f"**{path.stem}**: `{path}` ({len(data) / 1e6:.1f} MB, not embedded)")
    return "\n\n".join(parts)
