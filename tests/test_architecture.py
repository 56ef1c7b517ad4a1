"""The package graph is a contract: import-linter's contracts in pyproject.toml hold."""

import tomllib
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def test_the_import_contracts_hold(capsys):
    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    assert code == 0, capsys.readouterr().out


def test_no_import_is_exempt_from_the_contracts():
    assert {name: c.get("ignore_imports", []) for name, c in _contracts().items()} == {
        "layers": [],
        "acyclic": [],
    }


def test_every_scaledl_package_is_in_a_layer():
    packages = {
        f"scaledl.{p.name}" for p in (ROOT / "scaledl").iterdir() if (p / "__init__.py").exists()
    } | {f"scaledl.{p.stem}" for p in (ROOT / "scaledl").glob("*.py") if p.stem != "__init__"}
    layered = {
        name.strip()
        for layer in _contracts()["layers"]["layers"]
        for name in layer.split("|")
        if name.strip().startswith("scaledl.")
    }
    assert packages - layered == set()


#: Module cycles inside scaledl allowed, each with its reason: none (keep it empty).
ALLOWED_MODULE_CYCLES: dict[frozenset[str], str] = {}


def _module_cycles() -> set[frozenset[str]]:
    """The modules of scaledl that import each other, directly or not, grouped per cycle.

    Every import counts, those inside functions and under ``TYPE_CHECKING`` included (as in the
    contracts): a function-level import hides a cycle from Python, not from the design.
    """
    graph = grimp.build_graph("scaledl", cache_dir=None)
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    reach = {}
    for start in imports:
        seen, todo = set(), list(imports[start])
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo += imports[module]
        reach[start] = seen
    return {
        frozenset({m} | {n for n in reach[m] if m in reach[n]}) for m in imports if m in reach[m]
    }


def test_no_module_cycle_inside_scaledl():
    cycles = _module_cycles()
    unexpected = sorted(sorted(c) for c in cycles - ALLOWED_MODULE_CYCLES.keys())
    assert unexpected == [], (
        "modules that import each other (move what they share to one of them, or to a module "
        f"both import; docs/architecture.md): {unexpected}"
    )
    stale = sorted(sorted(c) for c in ALLOWED_MODULE_CYCLES.keys() - cycles)
    assert stale == [], f"allowed cycles that no longer exist, remove them: {stale}"
