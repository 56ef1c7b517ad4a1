"""Check that nothing of an earlier README was lost when it was cut into docs/ pages.

Every non-blank line of ``README.md`` at ``--ref`` must appear (stripped, heading marks dropped)
in today's ``README.md`` or a ``docs/**/*.md`` page. A line that does not is classified: a
heading renamed to a page title, a line edited in place (its closest line is at least 60%
similar: a marker or command retargeted, a cross-reference made a link) or lost. Exit code 1 when
a line is lost.

Run from the repository root: ``python scripts/readme_lines_kept.py --ref 89af790``.
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from pathlib import Path

SIMILAR = 0.6


def _norm(line: str) -> str:
    return re.sub(r"^#+\s*", "", line.strip())


def main() -> None:
    """Compare, print the counts (and the lost lines), exit 1 when a line is lost."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", required=True, help="git revision of the earlier README")
    parser.add_argument("--verbose", action="store_true", help="print every line not verbatim")
    args = parser.parse_args()
    old = subprocess.run(
        ["git", "show", f"{args.ref}:README.md"], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    pages = [Path("README.md"), *sorted(Path("docs").rglob("*.md"))]
    lines = [_norm(line) for page in pages for line in page.read_text().splitlines()]
    lines = [line for line in lines if line]
    text = "\n".join(lines)
    nonblank = [(n, line) for n, line in enumerate(old, 1) if line.strip()]
    kinds: dict[str, list[str]] = {"heading": [], "edited": [], "lost": []}
    for n, line in nonblank:
        if _norm(line) in text:
            continue
        if line.startswith("#"):
            kinds["heading"].append(f"{n}: {line}")
            continue
        best = max(lines, key=lambda c: difflib.SequenceMatcher(None, _norm(line), c).ratio())
        similar = difflib.SequenceMatcher(None, _norm(line), best).ratio() >= SIMILAR
        kinds["edited" if similar else "lost"].append(f"{n}: {line}\n    -> {best}")
    missing = sum(len(v) for v in kinds.values())
    print(
        f"{len(nonblank)} non-blank lines of README.md at {args.ref}: "
        f"{len(nonblank) - missing} kept verbatim, "
        + ", ".join(f"{kind} {len(found)}" for kind, found in kinds.items())
    )
    for kind, found in kinds.items():
        if args.verbose or kind == "lost":
            print("\n".join(f"[{kind}] {entry}" for entry in found))
    sys.exit(1 if kinds["lost"] else 0)


if __name__ == "__main__":
    main()
