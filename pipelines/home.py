"""Prepare a project-local ``DAGSTER_HOME`` holding the repository's ``dagster.yaml``.

Usage::

    python -m pipelines.home            # prepares <repo>/.dagster_home and prints its path
    python -m pipelines.home PATH       # prepares PATH instead

``DAGSTER_HOME`` must then point at the printed folder (Dagster reads ``dagster.yaml`` only from
there). The file is linked (copied where links are not possible), so edits to the repository's
``dagster.yaml`` apply without preparing again.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_HOME = REPO_ROOT / ".dagster_home"
INSTANCE_YAML = REPO_ROOT / "dagster.yaml"


def prepare_home(home: Path | str | None = None, instance_yaml: Path = INSTANCE_YAML) -> Path:
    """Create ``home`` and put ``dagster.yaml`` in it.

    Args:
        home: the folder; ``None`` means ``$DAGSTER_HOME`` if set, else ``<repo>/.dagster_home``.
        instance_yaml: the instance configuration to use.

    Returns:
        The absolute path of the prepared folder.

    Raises:
        FileNotFoundError: ``instance_yaml`` does not exist.
    """
    if home is None:
        home = os.environ.get("DAGSTER_HOME") or DEFAULT_HOME
    home = Path(home).expanduser().resolve()
    instance_yaml = Path(instance_yaml).resolve()
    if not instance_yaml.is_file():
        raise FileNotFoundError(f"Dagster instance configuration not found: {instance_yaml}")
    home.mkdir(parents=True, exist_ok=True)
    target = home / "dagster.yaml"
    if target.resolve() == instance_yaml:
        return home
    if target.is_symlink() or target.exists():
        target.unlink()
    try:
        target.symlink_to(instance_yaml)
    except OSError:
        shutil.copyfile(instance_yaml, target)
    return home


def main(argv: list[str] | None = None) -> int:
    """Prepare the folder named by the first argument (or the default) and print its path."""
    args = sys.argv[1:] if argv is None else argv
    print(prepare_home(args[0] if args else None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
