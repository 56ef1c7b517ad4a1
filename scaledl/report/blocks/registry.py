"""The registry of generated blocks: each block of a page, its committed result and its renderer.

A generated block sits between the markers of :mod:`scaledl.report.blocks.markers` on a page.
Its :class:`Block` names the page, the marker, the committed result file it is rendered from,
how that file is read and how the result is rendered: the evaluation computes and writes the
result, the renderer is a pure function of it. :data:`BLOCKS` lists every block;
``scaledl docs render`` rewrites them from their committed results (``--check``: names the
stale ones, writes nothing), the evaluation commands that take ``--readme PAGE`` render through
:func:`write_page`, and one parametrised test checks every page against its result.

Adding a block: a render function (result -> Markdown) in a module of this package, the
markers on the page (:func:`~scaledl.report.blocks.markers.markers`), an entry in
:data:`BLOCKS` (docs/development.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaledl.evaluation.envelope import read_result
from scaledl.evaluation.published_runs import PublishedRunsResult
from scaledl.evaluation.results import Metrics
from scaledl.evaluation.targets import Evaluation
from scaledl.io.atomic import write_atomic
from scaledl.io.safe import read_text
from scaledl.report.blocks.benchmarks import benchmark_markdown, read_benchmark_results
from scaledl.report.blocks.datasheet import datasheet_markdown, read_datasheet_tables
from scaledl.report.blocks.gpu_layouts import gpu_layouts_markdown
from scaledl.report.blocks.layout_variants import variants_markdown
from scaledl.report.blocks.layouts import layouts_markdown
from scaledl.report.blocks.markers import ReadmeBlockError, markers, read_block, replace_block
from scaledl.report.blocks.published_runs import published_runs_markdown
from scaledl.report.blocks.reference import reference_markdown
from scaledl.report.summary import gpu_block, results_markdown


class BlockError(ValueError):
    """A page, its markers or the result a block renders from is missing or unreadable."""


@dataclass(frozen=True)
class Block:
    """One generated block of a page.

    Attributes:
        name: the registry's name (``scaledl docs render --block NAME``).
        page: the page that holds it (relative to the repository root, or absolute).
        marker: the name in its markers (``<!-- marker:begin ...`` and ``<!-- marker:end -->``).
        source: the committed result file (or folder) it renders from (as ``page``).
        read: the result's path -> the result (typed where the evaluation has a type).
        render: ``(result, source)`` -> the block's Markdown without markers; ``source`` is the
            result's path as the block may name it (POSIX).
    """

    name: str
    page: Path
    marker: str
    source: Path
    read: Callable[[Path], Any]
    render: Callable[[Any, str], str]

    @property
    def bounds(self) -> tuple[str, str]:
        """The ``(begin, end)`` markers."""
        return markers(self.marker)

    def at(self, page: Path, source: Path) -> Block:
        """The block on another page, rendered from another result file (``--readme``)."""
        return dataclasses.replace(self, page=page, source=source)


def _result_file(evaluation: Evaluation) -> Callable[[Path], dict[str, Any]]:
    """A :attr:`Block.read` of an evaluation's result file, validated by its envelope.

    The file is read by :func:`~scaledl.evaluation.envelope.read_result` (another evaluation's
    file is an error) and handed on as its JSON object
    (:meth:`~scaledl.evaluation.envelope.EvaluationResult.to_dict`).
    """

    def read(path: Path) -> dict[str, Any]:
        return read_result(path, evaluation).to_dict()

    return read


def _ignoring_source(render: Callable[[Any], str]) -> Callable[[Any, str], str]:
    """A :attr:`Block.render` of a renderer whose block does not name its result file."""

    def named(result: Any, source: str) -> str:
        return render(result)

    return named


_RESULTS = Path("docs/results")
_DATASETS = Path("datasets")
#: Every generated block, by name, in the order ``scaledl docs render`` renders them.
BLOCKS: dict[str, Block] = {
    block.name: block
    for block in (
        Block("results", _RESULTS / "metrics.md", "results", _RESULTS / "metrics.json",
              Metrics.read, results_markdown),
        Block("gpu", _RESULTS / "metrics.md", "gpu", _RESULTS / "metrics.json",
              Metrics.read, _ignoring_source(gpu_block)),
        Block("reference", _RESULTS / "reference.md", "reference", _RESULTS / "reference.json",
              _result_file("reference"), _ignoring_source(reference_markdown)),
        Block("layouts", _RESULTS / "layouts.md", "layouts", _RESULTS / "layouts.json",
              _result_file("layouts"), _ignoring_source(layouts_markdown)),
        Block("gpu-layouts", _RESULTS / "gpu-layouts.md", "gpu-layouts",
              _RESULTS / "gpu_layouts.json", _result_file("gpu_layouts"),
              _ignoring_source(gpu_layouts_markdown)),
        Block("published-runs", _RESULTS / "published-runs.md", "published-runs",
              _RESULTS / "published_runs.json", PublishedRunsResult.read,
              _ignoring_source(published_runs_markdown)),
        Block("benchmarks", _RESULTS / "benchmarks.md", "benchmarks", Path("benchmarks/results"),
              read_benchmark_results, _ignoring_source(benchmark_markdown)),
        Block("layout-variants", Path("docs/history/layout-variants.md"), "layout-variants",
              _RESULTS / "layouts.json", _result_file("layouts"),
              _ignoring_source(variants_markdown)),
        Block("datasheet-reference-cpu", _DATASETS / "reference-cpu" / "DATASHEET.md",
              "datasheet", _DATASETS / "reference-cpu" / "validated", read_datasheet_tables,
              _ignoring_source(datasheet_markdown)),
        Block("datasheet-layouts-cpu", _DATASETS / "layouts-cpu" / "DATASHEET.md", "datasheet",
              _DATASETS / "layouts-cpu" / "validated", read_datasheet_tables,
              _ignoring_source(datasheet_markdown)),
    )
}  # fmt: skip


@dataclass(frozen=True)
class PageRender:
    """A page with its blocks rendered, not yet written.

    Attributes:
        path: the page.
        text: its text now.
        rendered: its text with every block replaced.
        stale: the names of the blocks whose text changes, in render order.
    """

    path: Path
    text: str
    rendered: str
    stale: tuple[str, ...]


def _error(path: Path, what: str, reason: str) -> BlockError:
    """``path: what: reason``, without naming ``path`` twice."""
    return BlockError(f"{path}: {what}: {reason.removeprefix(f'{path}: ')}")


def _read_page(path: Path, block: Block) -> str:
    try:
        return read_text(path)
    except FileNotFoundError:
        raise BlockError(f"{path}: no such page (it holds the {block.name} block)") from None
    except (OSError, ValueError) as exc:
        raise _error(path, "cannot read the page", str(exc)) from None


def load(block: Block, source: Path) -> Any:
    """The result ``block`` renders from, read from ``source``.

    Raises:
        BlockError: ``source`` is missing or unreadable (naming it).
    """
    if not source.exists():
        raise BlockError(f"{source}: no such file (the result of the {block.name} block)")
    try:
        return block.read(source)
    except (OSError, ValueError) as exc:
        what = f"cannot read the result of the {block.name} block"
        raise _error(source, what, str(exc)) from None


def markdown(block: Block, result: Any, source: Path, shown: str) -> str:
    """The block's Markdown of ``result``.

    Args:
        block: the block.
        result: :func:`load`'s.
        source: where ``result`` was read (for errors).
        shown: how the block names it.

    Raises:
        BlockError: the result lacks a field or has one of the wrong type (naming ``source``).
    """
    try:
        return block.render(result, shown)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        reason = f"field {exc.args[0]!r} missing" if isinstance(exc, KeyError) else str(exc)
        raise _error(source, f"cannot render the {block.name} block", reason) from None


def render_pages(blocks: Sequence[Block], root: Path = Path(".")) -> list[PageRender]:
    """Render ``blocks`` from their results into their pages, in memory.

    Args:
        blocks: the blocks (their pages and sources relative to ``root``).
        root: the repository root.

    Returns:
        One :class:`PageRender` per page, in the order the pages first appear in ``blocks``.

    Raises:
        BlockError: a page or its markers, or a result file, is missing or unreadable (naming
            the file); nothing is written.
    """
    by_page: dict[Path, list[Block]] = {}
    for block in blocks:
        by_page.setdefault(root / block.page, []).append(block)
    results: dict[tuple[Callable, Path], Any] = {}
    pages = []
    for path, group in by_page.items():
        text = rendered = _read_page(path, group[0])
        stale = []
        for block in group:
            check_markers(block, path, rendered)
            source = root / block.source
            key = (block.read, source)
            if key not in results:
                results[key] = load(block, source)
            body = markdown(block, results[key], source, block.source.as_posix())
            replaced = replace_block(rendered, body, str(path), block.bounds)
            if replaced != rendered:
                stale.append(block.name)
            rendered = replaced
        pages.append(PageRender(path, text, rendered, tuple(stale)))
    return pages


def write_pages(pages: Sequence[PageRender]) -> list[Path]:
    """Write each rendered page that changed, atomically.

    Returns:
        The pages written.
    """
    written = []
    for page in pages:
        if page.rendered != page.text:
            write_atomic(page.path, page.rendered)
            written.append(page.path)
    return written


def check_markers(block: Block, page: Path, text: str | None = None) -> None:
    """Raise unless ``page`` holds one well-formed pair of ``block``'s markers.

    Args:
        block: the block.
        page: the page.
        text: its text (default: read).

    Raises:
        BlockError: the page is missing or unreadable, or its markers are (naming the page).
    """
    text = _read_page(page, block) if text is None else text
    try:
        read_block(text, str(page), block.bounds)
    except ReadmeBlockError as exc:
        raise BlockError(str(exc)) from None


def write_page(page: Path, blocks: Sequence[Block], sources: Sequence[Path]) -> PageRender:
    """Render each of ``blocks`` from its result file in ``sources`` into ``page`` (atomically).

    The ``--readme PAGE`` of an evaluation command: the result it has just written, rendered
    by the registry's renderer into the page the user named.

    Raises:
        BlockError: as :func:`render_pages`; nothing is written.
    """
    moved = [block.at(page, source) for block, source in zip(blocks, sources, strict=True)]
    (rendered,) = render_pages(moved)
    write_pages([rendered])
    return rendered
