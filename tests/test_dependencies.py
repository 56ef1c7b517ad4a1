"""Every third-party module that scaledl/, pipelines/, tests/ and benchmarks/ import is declared."""

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = {"scaledl", "pipelines"}
# Imported only through another library's API, so no import statement shows them.
INDIRECT = {"tabulate": "pandas DataFrame.to_markdown (pipelines/defs/metadata.py)"}


def _imported(folders: list[str]) -> set[str]:
    names = set()
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            local = {p.stem for p in path.parent.glob("*.py")} | {ROOT.joinpath(folder).name}
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found = {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found = {node.module.split(".")[0]}
                else:
                    continue
                names |= {n for n in found if n not in local}
    return {n for n in names if n not in sys.stdlib_module_names and n not in FIRST_PARTY}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def _declared(*extras: str) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [
        r for extra in extras for r in project["optional-dependencies"][extra]
    ]
    return {_normal(re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0]) for r in requirements}


def _distributions(modules: set[str]) -> dict[str, set[str]]:
    found = md.packages_distributions()
    return {m: {_normal(d) for d in found.get(m, [])} for m in modules}


def test_every_library_import_is_a_declared_dependency():
    missing = {
        module: dists
        for module, dists in _distributions(_imported(["scaledl", "pipelines"])).items()
        if not dists & _declared()
    }
    assert missing == {}
    assert set(INDIRECT) <= _declared()


def test_every_test_benchmark_and_script_import_is_declared_with_the_dev_or_docs_extra():
    helpers = {p.stem for p in (ROOT / "tests").rglob("*.py")} | {
        p.stem for p in (ROOT / "benchmarks").glob("*.py")
    }
    modules = _imported(["tests", "benchmarks", "scripts"]) - helpers
    missing = {
        module: dists
        for module, dists in _distributions(modules).items()
        if not dists & _declared("dev", "docs")  # scripts/gen_cli_docs.py builds the docs
    }
    assert missing == {}
