"""The smoke preset with the interference guard relaxed, for pipeline plumbing tests."""

from pathlib import Path

import yaml

import scaledl


def smoke_without_guard(directory: Path) -> Path:
    """The smoke preset with the interference guard measuring but never flagging.

    Pipeline tests check plumbing beside other tests on a shared host; the guard is tested on
    its own, on an idle host, in ``tests/profiling/test_interference.py``.

    Returns:
        The path of the preset YAML written in ``directory``.
    """
    preset = yaml.safe_load((Path(scaledl.__file__).parent / "presets" / "smoke.yaml").read_text())
    preset["profiling"].update(
        max_retries=0, drift_tolerance=100.0, memory_drift_tolerance=100.0,
        allreduce_drift_tolerance=100.0, max_foreign_load_cores=64.0, quiet_wait_s=0.0,
    )  # fmt: skip
    path = directory / "smoke.yaml"
    path.write_text(yaml.safe_dump(preset))
    return path


def tiny_smoke(directory: Path, n_workloads: int) -> Path:
    """:func:`smoke_without_guard` cut to ``n_workloads`` workloads, one repeat, one rank each.

    A shard's workloads then share one launch (world sizes and repeats are launch groups).

    Returns:
        The path of the preset YAML written in ``directory``.
    """
    preset = smoke_without_guard(directory)
    smaller = yaml.safe_load(preset.read_text())
    smaller["design"]["n_workloads"] = n_workloads
    smaller["profiling"]["repeats"] = 1
    for family in smaller["families"].values():
        family["world_size"] = 1
    preset.write_text(yaml.safe_dump(smaller))
    return preset
