"""Where ScaleDL's files live: one data layout below one root, and one external-data root.

* :class:`DataLayout`: every path a run reads or writes below the data root (design, profiles,
  validated and quarantined rows, reports, predictor registry, imported GPU data, host specs).
  The CLI, the Dagster settings, the importers and the evaluation all take their paths from it.
  The root is ``$SCALEDL_DATA_DIR`` when set, else ``data`` (:meth:`DataLayout.from_env`; the
  Dagster pipeline's default is ``<repo>/data``).
* :func:`external_root`: the real measurements of others (NeuSight, Vidur):
  ``$SCALEDL_EXTERNAL_DIR`` when set, else the ``external/`` folder of the source checkout the
  package runs from. An installed wheel has no checkout: set ``SCALEDL_EXTERNAL_DIR`` to a copy
  of ``external/``.

A profiles folder and its validation outputs follow one rule
(:meth:`DataLayout.validation_outputs`):
``<root>/profiles`` -> ``<root>/validated``, ``<root>/quarantine``, ``<root>/reports/validation``;
an import ``<root>/imported/<source>`` -> ``<root>/imported/validated/<source>``,
``<root>/imported/quarantine/<source>``, ``<root>/reports/validation/imported/<source>``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DATA_DIR_ENV = "SCALEDL_DATA_DIR"
EXTERNAL_DIR_ENV = "SCALEDL_EXTERNAL_DIR"
DEFAULT_DATA_DIR = Path("data")
#: The source checkout's ``external/`` folder (absent in an installed wheel).
CHECKOUT_EXTERNAL_DIR = Path(__file__).resolve().parents[1] / "external"
PREDICTOR_NAME = "scaledl"


def external_root() -> Path:
    """The folder of external measurements (``neusight/``, ``vidur/``, ``CREDITS.md``).

    Resolved when called, so a changed ``$SCALEDL_EXTERNAL_DIR`` applies. Not checked here: the
    readers (:func:`scaledl.external.neusight.load_neusight`,
    :func:`scaledl.external.vidur.load_vidur_allreduce`) raise ``FileNotFoundError`` naming the
    folder they did not find.

    Returns:
        ``$SCALEDL_EXTERNAL_DIR`` when set, else the source checkout's ``external/``.
    """
    configured = os.environ.get(EXTERNAL_DIR_ENV)
    return Path(configured).expanduser() if configured else CHECKOUT_EXTERNAL_DIR


def neusight_root() -> Path:
    """NeuSight's measurements (``<external>/neusight``; :func:`external_root`)."""
    return external_root() / "neusight"


def neusight_peer_root() -> Path:
    """NeuSight's own predictions (``<external>/neusight_peer``; :func:`external_root`)."""
    return external_root() / "neusight_peer"


def vidur_network_root() -> Path:
    """Vidur's all-reduce measurements (``<external>/vidur/network``; :func:`external_root`)."""
    return external_root() / "vidur" / "network"


@dataclass(frozen=True)
class ValidationOutputs:
    """Where validating one profiles folder writes.

    Attributes:
        validated: the rows that passed.
        quarantine: the rejected rows with their reasons.
        report: the HTML report folder (``index.html``).
    """

    validated: Path
    quarantine: Path
    report: Path


@dataclass(frozen=True)
class DataLayout:
    """Every path of a run below one data root.

    Attributes:
        root: the data root (``data`` by default; relative paths stay relative).
    """

    root: Path

    @classmethod
    def from_env(cls, root: Path | str | None = None) -> DataLayout:
        """The layout of ``root``, else of ``$SCALEDL_DATA_DIR``, else of ``data``."""
        if root is None:
            root = os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR
        return cls(Path(root).expanduser())

    # design
    @property
    def design_dir(self) -> Path:
        """The design folder (``design/``)."""
        return self.root / "design"

    @property
    def search_space_path(self) -> Path:
        """The resolved preset the design was built from (``design/search_space.json``)."""
        return self.design_dir / "search_space.json"

    @property
    def design_path(self) -> Path:
        """The design table (``design/design.parquet``)."""
        return self.design_dir / "design.parquet"

    @property
    def design_fingerprint_path(self) -> Path:
        """Fingerprint of the preset the design was generated from (``design/preset.json``)."""
        return self.design_dir / "preset.json"

    # profiles and validation
    @property
    def profiles_dir(self) -> Path:
        """Profiling parts and consolidated tables (``profiles/``)."""
        return self.root / "profiles"

    @property
    def validated_dir(self) -> Path:
        """Valid profile rows (``validated/``)."""
        return self.root / "validated"

    @property
    def quarantine_dir(self) -> Path:
        """Quarantined profile rows (``quarantine/``)."""
        return self.root / "quarantine"

    @property
    def validation_report_dir(self) -> Path:
        """Validation report page (``reports/validation/``)."""
        return self.reports_dir / "validation"

    def validation_outputs(self, profiles: Path) -> ValidationOutputs:
        """Where validating ``profiles`` writes (the rule of the module docstring).

        Args:
            profiles: a profiles folder: ``<root>/profiles``, an import
                ``<root>/imported/<source>`` or any other folder (whose parent is then taken as
                the root).

        Returns:
            The validated, quarantine and report folders.
        """
        profiles = Path(profiles)
        if profiles.parent.name == "imported":
            base, source = profiles.parent, profiles.name
            report = DataLayout(base.parent).validation_report_dir / "imported" / source
            validated, quarantine = base / "validated" / source, base / "quarantine" / source
            return ValidationOutputs(validated, quarantine, report)
        sibling = DataLayout(profiles.parent)
        return ValidationOutputs(
            sibling.validated_dir, sibling.quarantine_dir, sibling.validation_report_dir
        )

    # imported measurements of others
    def imported_dir(self, source: str = "neusight") -> Path:
        """An import's profile tables (``imported/<source>/``)."""
        return self.root / "imported" / source

    def imported_validated_dir(self, source: str = "neusight") -> Path:
        """An import's validated rows (``imported/validated/<source>/``)."""
        return self.validation_outputs(self.imported_dir(source)).validated

    def imported_quarantine_dir(self, source: str = "neusight") -> Path:
        """An import's quarantined rows (``imported/quarantine/<source>/``)."""
        return self.validation_outputs(self.imported_dir(source)).quarantine

    def imported_report_dir(self, source: str = "neusight") -> Path:
        """An import's validation report (``reports/validation/imported/<source>/``)."""
        return self.validation_outputs(self.imported_dir(source)).report

    def imported_parallel_labels(self, source: str = "neusight") -> Path:
        """An import's multi-GPU labels (``imported/<source>/parallel_labels.parquet``)."""
        return self.imported_dir(source) / "parallel_labels.parquet"

    # evaluation
    @property
    def reports_dir(self) -> Path:
        """Evaluation report, metrics and figures (``reports/``)."""
        return self.root / "reports"

    @property
    def metrics_path(self) -> Path:
        """The evaluation's metrics (``reports/metrics.json``)."""
        return self.reports_dir / "metrics.json"

    @property
    def report_path(self) -> Path:
        """The evaluation's HTML report (``reports/report.html``)."""
        return self.reports_dir / "report.html"

    @property
    def calibration_path(self) -> Path:
        """The evaluation's ScaleDL interval calibration (``reports/calibration.json``)."""
        return self.reports_dir / "calibration.json"

    @property
    def gpu_evaluation_cache_dir(self) -> Path:
        """The GPU evaluation's cache (``.cache/gpu_evaluation/``, not versioned by DVC)."""
        return self.root / ".cache" / "gpu_evaluation"

    # predictors and devices
    @property
    def predictors_dir(self) -> Path:
        """Predictor registry (``predictors/``)."""
        return self.root / "predictors"

    @property
    def candidates_dir(self) -> Path:
        """The last trained, not yet registered predictor bundle (``candidates/``)."""
        return self.root / "candidates"

    def predictor_dir(self, name: str = PREDICTOR_NAME) -> Path:
        """A predictor's name directory: its versions and ``latest`` (``predictors/<name>/``)."""
        return self.predictors_dir / name

    @property
    def hosts_dir(self) -> Path:
        """Measured CPU host specs (``devices/hosts/``)."""
        return self.root / "devices" / "hosts"
