"""Run settings of the pipeline: preset, data root, forced profiling, and the data layout.

Environment switches (read when the definitions load):

* ``SCALEDL_PRESET``: preset name or YAML path (default ``quick``; ``smoke`` for tests).
* ``SCALEDL_DATA_DIR``: data root (default ``<repo>/data``).
* ``SCALEDL_FORCE_PROFILE=1``: profile every workload again even where an ``ok`` part exists
  (by default a rerun reuses the workloads already profiled, by ``workload_id``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import dagster as dg

from scaledl.layout import DATA_DIR_ENV, DataLayout

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PRESET = "quick"
DEFAULT_DATA_DIR = REPO_ROOT / "data"
TRUE_VALUES = ("1", "true", "yes", "on")


def env_flag(name: str) -> bool:
    """Whether the environment variable ``name`` is set to a true value (``1``, ``true``, ...)."""
    return os.environ.get(name, "").strip().lower() in TRUE_VALUES


class ScaledlSettings(dg.ConfigurableResource):
    """Preset, data root and switches shared by every asset.

    Attributes:
        preset: preset name (``smoke``, ``quick``, ``paper``) or the path of a preset YAML.
        data_dir: data root; every stage writes below it (:attr:`layout`).
        force_profile: profile all workloads again instead of reusing ``ok`` parts.
        max_failed_fraction: largest fraction of failed profiling runs the blocking check allows.
        max_quarantine_fraction: largest fraction of quarantined rows per table before the
            (warning) quarantine check fails.
        holdout_fraction: share of the validated workloads kept out of the predictor's
            training by a stable rule (:func:`scaledl.models.train.holdout_ids`), on which a
            retrained predictor and the registered one are compared (paired) before registering.
    """

    preset: str = DEFAULT_PRESET
    data_dir: str = str(DEFAULT_DATA_DIR)
    force_profile: bool = False
    max_failed_fraction: float = 0.5
    max_quarantine_fraction: float = 0.2
    holdout_fraction: float = 0.2

    @property
    def root(self) -> Path:
        """The data root as an absolute path."""
        return Path(self.data_dir).expanduser().resolve()

    @property
    def layout(self) -> DataLayout:
        """Every path of the run below :attr:`root` (:class:`scaledl.layout.DataLayout`)."""
        return DataLayout(self.root)


def settings_from_env() -> ScaledlSettings:
    """Settings with the preset and data root from the environment when set.

    ``SCALEDL_PRESET`` and ``SCALEDL_DATA_DIR`` are passed as :class:`dagster.EnvVar` so the UI
    shows where the value comes from; unset, the defaults ``quick`` and ``<repo>/data`` apply.
    """
    preset = dg.EnvVar("SCALEDL_PRESET") if os.environ.get("SCALEDL_PRESET") else DEFAULT_PRESET
    data_dir = str(DEFAULT_DATA_DIR)
    if os.environ.get(DATA_DIR_ENV):
        data_dir = dg.EnvVar(DATA_DIR_ENV)
    return ScaledlSettings(
        preset=preset, data_dir=data_dir, force_profile=env_flag("SCALEDL_FORCE_PROFILE")
    )


class WorkloadDesignConfig(dg.Config):
    """Run config of ``workload_design``.

    Attributes:
        augment_k: when > 0 and a design exists, add this many D-optimal workloads not yet in
            the design (sequential design; used by the retraining schedule) instead of reusing it.
        regenerate: build the design from scratch even if one exists for the same preset.
    """

    augment_k: int = 0
    regenerate: bool = False


class ProfilingRunsConfig(dg.Config):
    """Run config of ``profiling_runs``.

    Attributes:
        profile_missing: profile, in this run, the design's workloads not yet complete
            (resuming as a shard does) before consolidating. The retraining job sets it: its
            augmentation adds a few workloads, profiled with the rest of the run; the full
            pipeline leaves it off and profiles through the shards (``profiling_shard``).
    """

    profile_missing: bool = False


class PredictorBundleConfig(dg.Config):
    """Run config of ``predictor_bundle``.

    Attributes:
        policy: ``always`` registers every trained predictor; ``if_not_worse`` registers it
            only when, on held-out workloads neither has seen, its iteration-time MRE is lower
            than the current version's or not distinguishable from it (paired bootstrap
            interval, :mod:`pipelines.defs.policy`).
        confidence_level: coverage of the paired interval.
    """

    policy: Literal["always", "if_not_worse"] = "always"
    confidence_level: float = 0.95
