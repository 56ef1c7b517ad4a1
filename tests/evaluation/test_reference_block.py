"""The README's reference block is the committed ``docs/results/reference.json``, rendered."""

import json
from pathlib import Path

from scaledl.evaluation.reference_block import BOUNDS, reference_markdown
from scaledl.report.summary import read_block

ROOT = Path(__file__).resolve().parents[2]


def test_readme_reference_block_matches_the_committed_result():
    result = json.loads((ROOT / "docs" / "results" / "reference.json").read_text())
    block = read_block((ROOT / "README.md").read_text(), "README.md", BOUNDS)
    assert block == reference_markdown(result)


def test_every_target_of_the_result_is_in_the_block():
    result = json.loads((ROOT / "docs" / "results" / "reference.json").read_text())
    block = reference_markdown(result)
    assert [t["name"] for t in result["targets"]] == [
        line.split(" | ")[0].removeprefix("| ")
        for line in block.splitlines()
        if line.startswith("| ")
        and any(line.startswith(f"| {t['name']}") for t in result["targets"])
    ]
