"""``scaledl docs render [--check]``: registered blocks from their results, stale ones named."""

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scaledl.cli import app
from scaledl.cli.common import check_readme, render_readme
from scaledl.io.safe import read_json
from scaledl.report.blocks.layouts import layouts_markdown
from scaledl.report.blocks.markers import markers, read_block, replace_block
from scaledl.report.blocks.registry import BLOCKS, BlockError

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args):
    return CliRunner().invoke(app, ["docs", "render", *(str(a) for a in args)])


def _copy(root: Path, name: str = "reference"):
    """The page and the result of block ``name`` copied below ``root``."""
    block = BLOCKS[name]
    for path in (block.page, block.source):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, root / path)
    return block


def test_check_names_a_stale_block_and_render_restores_it(tmp_path):
    block = _copy(tmp_path)
    page = tmp_path / block.page
    committed = page.read_text()
    run = invoke("--check", "--block", "reference", "--root", tmp_path)
    assert run.exit_code == 0, run.output
    assert "1 block(s) up to date" in run.output
    page.write_text(replace_block(committed, "| typed | 1% |", str(page), block.bounds))
    run = invoke("--check", "--block", "reference", "--root", tmp_path)
    assert run.exit_code == 1, run.output
    assert f"{page}: block reference is stale" in run.output
    assert "| typed | 1% |" in page.read_text()  # --check writes nothing
    run = invoke("--block", "reference", "--root", tmp_path)
    assert run.exit_code == 0, run.output
    assert f"{page}: block reference rendered" in run.output
    assert page.read_text() == committed  # only the block changed, back to the result's


def test_render_changes_only_the_text_between_the_markers(tmp_path):
    block = _copy(tmp_path)
    page = tmp_path / block.page
    begin, end = block.bounds
    prose = "# Page\n\nThe block below (`<!-- reference:begin (old) -->`) is generated.\n"
    page.write_text(f"{prose}{begin}\nstale body\n{end}\nafter\n")
    run = invoke("--block", "reference", "--root", tmp_path)
    assert run.exit_code == 0, run.output
    text = page.read_text()
    assert text.startswith(f"{prose}{begin}\n")
    assert text.endswith(f"\n{end}\nafter\n") and "stale body" not in text


def _no_page(root: Path) -> Path:
    (root / BLOCKS["reference"].page).unlink()
    return root / BLOCKS["reference"].page


def _no_markers(root: Path) -> Path:
    (root / BLOCKS["reference"].page).write_text("# no block\n")
    return root / BLOCKS["reference"].page


def _not_json(root: Path) -> Path:
    (root / BLOCKS["reference"].source).write_text("{not json")
    return root / BLOCKS["reference"].source


def _missing_field(root: Path) -> Path:
    (root / BLOCKS["reference"].source).write_text('{"dataset": {}}')
    return root / BLOCKS["reference"].source


@pytest.mark.parametrize("damage", [_no_page, _no_markers, _not_json, _missing_field])
@pytest.mark.parametrize("check", [False, True])
def test_bad_input_exits_2_with_one_line_naming_the_file(tmp_path, damage, check):
    _copy(tmp_path)
    named = damage(tmp_path)
    page = tmp_path / BLOCKS["reference"].page
    before = page.read_text() if page.exists() else None
    run = invoke(*(["--check"] if check else []), "--block", "reference", "--root", tmp_path)
    assert run.exit_code == 2, run.output
    lines = run.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {named}:"), run.output
    assert (page.read_text() if page.exists() else None) == before


def test_an_unknown_block_exits_2_listing_the_registered_ones(tmp_path):
    run = invoke("--block", "nope", "--root", tmp_path)
    assert run.exit_code == 2
    assert "--block nope: no such block (one of results, gpu," in run.output


def test_readme_option_renders_through_the_registry(tmp_path):
    """The ``--readme PAGE`` of the evaluation commands: the result file, rendered."""
    readme = tmp_path / "README.md"
    begin, end = markers("layouts")
    readme.write_text(f"# R\n{begin}\n{end}\n")
    result = ROOT / "docs" / "results" / "layouts.json"
    check_readme(readme, BLOCKS["layouts"])
    render_readme(readme, BLOCKS["layouts"], result)
    block = read_block(readme.read_text(), str(readme), BLOCKS["layouts"].bounds)
    assert block == layouts_markdown(read_json(result))
    with pytest.raises(BlockError, match="expected one generated block"):
        check_readme(readme, BLOCKS["reference"])
