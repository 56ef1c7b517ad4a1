"""The package graph is a contract: import-linter's contracts in pyproject.toml hold."""

import tomllib
from pathlib import Path

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
