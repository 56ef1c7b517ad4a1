"""Resources: profiling launchers, the predictor store and DVC data versioning."""

from __future__ import annotations

import shutil
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import yaml

from pipelines.defs.config import REPO_ROOT, env_flag, settings_from_env
from scaledl.profiling.shards import shard_dir

if TYPE_CHECKING:  # scaledl (torch) is imported lazily: the definitions load fast
    from scaledl.profiling.launch import ProfileSummary
    from scaledl.workloads.spec import Workload


class ProfilingLauncher(dg.ConfigurableResource, ABC):
    """Runs ``torchrun`` profiling of workloads (abstract: local or multi-node).

    Attributes:
        threads_per_rank: ``OMP_NUM_THREADS`` of each CPU rank.
        shard_directories: each shard of ``profiling_shard`` profiles into its own directory,
            ``<profiles>/shards/<K-of-N>`` (own lock, own drift baseline), instead of the
            shared profiles directory. Set it where shards run at once on several nodes over a
            shared file system (``deploy/``); on one host the shards share the directory, so
            a shard reuses any part measured before, and one drift baseline spans the design.
    """

    threads_per_rank: int = 1
    shard_directories: bool = False

    def shard_profiles_dir(self, profiles_dir: Path, key: str) -> Path:
        """Where shard ``key`` profiles: its own directory or ``profiles_dir`` (see above)."""
        return shard_dir(profiles_dir, key) if self.shard_directories else Path(profiles_dir)

    @abstractmethod
    def runnable(self, workloads: list[Workload]) -> tuple[list[Workload], list[Workload]]:
        """Split workloads into those this launcher profiles and those it cannot.

        Args:
            workloads: the design's workloads.

        Returns:
            ``(runnable, not_runnable)``.
        """

    @abstractmethod
    def rendezvous(self) -> Any:
        """The :class:`scaledl.profiling.settings.Rendezvous`, or ``None`` for ``--standalone``."""

    def profile(
        self,
        workloads: list[Workload],
        out_dir: Path,
        profiling: dict[str, Any],
        force: bool = False,
        on_part: Callable[[str], None] | None = None,
    ) -> ProfileSummary:
        """Profile the runnable workloads (skipping ``ok`` parts unless ``force``).

        Args:
            workloads: workloads this launcher can run (see :meth:`runnable`).
            out_dir: the profiles directory.
            profiling: the preset's ``profiling`` section (fields of
                :class:`~scaledl.profiling.settings.ProfileSettings`).
            force: profile again even where an ``ok`` part exists.
            on_part: called with one progress line per finished part (``context.log.info``).

        Returns:
            The library's :class:`~scaledl.profiling.launch.ProfileSummary`.
        """
        from scaledl.profiling.launch import profile_workloads
        from scaledl.profiling.settings import ProfileSettings

        settings = ProfileSettings.from_preset(
            profiling, threads_per_rank=self.threads_per_rank, rendezvous=self.rendezvous()
        )
        return profile_workloads(
            workloads, Path(out_dir), settings, force=force, progress=False, on_part=on_part
        )


class LocalTorchrunLauncher(ProfilingLauncher):
    """Single-node ``torchrun --standalone`` on this host (multi-node workloads are skipped)."""

    def runnable(self, workloads: list[Workload]) -> tuple[list[Workload], list[Workload]]:
        """Single-node workloads run; those spanning several nodes cannot."""
        return (
            [w for w in workloads if w.num_nodes == 1],
            [w for w in workloads if w.num_nodes != 1],
        )

    def rendezvous(self) -> Any:
        """``None``: standalone rendezvous."""
        return None


class MultiNodeTorchrunLauncher(ProfilingLauncher):
    """``torchrun`` with a c10d rendezvous; start the same run on every node.

    Attributes:
        rdzv_endpoint: ``host:port`` of the rendezvous (node 0).
        nnodes: nodes of the cluster.
        node_rank: this node's rank; single-node workloads run on node 0 only.
    """

    rdzv_endpoint: str
    nnodes: int
    node_rank: int = 0

    def runnable(self, workloads: list[Workload]) -> tuple[list[Workload], list[Workload]]:
        """Workloads spanning exactly ``nnodes`` nodes, plus single-node ones on node 0."""
        allowed = {self.nnodes} | ({1} if self.node_rank == 0 else set())
        return (
            [w for w in workloads if w.num_nodes in allowed],
            [w for w in workloads if w.num_nodes not in allowed],
        )

    def rendezvous(self) -> Any:
        """The c10d rendezvous at ``rdzv_endpoint`` for this ``node_rank``."""
        from scaledl.profiling.settings import Rendezvous

        return Rendezvous(endpoint=self.rdzv_endpoint, node_rank=self.node_rank)


class LocalPredictorStore(dg.ConfigurableResource):
    """Versioned predictor bundles in a local registry directory.

    Attributes:
        root: registry root; empty means ``<data root>/predictors`` of the settings.
        name: bundle name (``<root>/<name>/<version>``, ``<root>/<name>/latest``).
    """

    root: str = ""
    name: str = "scaledl"

    def resolve_root(self, default: Path) -> Path:
        """The registry root, ``default`` when :attr:`root` is empty."""
        return Path(self.root).expanduser().resolve() if self.root else Path(default)

    def name_dir(self, default_root: Path) -> Path:
        """``<root>/<name>``: the versions of :attr:`name` and its ``latest`` pointer file."""
        return self.resolve_root(default_root) / self.name

    def current_bundle(self, default_root: Path) -> Path | None:
        """The version directory ``latest`` names, or ``None`` when nothing is registered.

        Raises:
            scaledl.registry.BundleError: ``latest`` is unusable or names a version without a
                manifest (:func:`scaledl.registry.latest_bundle`).
        """
        from scaledl.registry import latest_bundle

        return latest_bundle(self.name_dir(default_root))

    def register(
        self,
        bundle: Path,
        default_root: Path,
        metrics: dict[str, Any],
        calibration: Path | None = None,
    ) -> Path:
        """Copy a verified bundle in as a new version (and make it ``latest``).

        Args:
            bundle: the candidate bundle.
            default_root: registry root when :attr:`root` is empty.
            metrics: metrics recorded in the registered manifest.
            calibration: the evaluation's ``calibration.json`` to store with the version
                (``None``: keep the bundle's, if any).

        Returns:
            The registered version's directory.

        Raises:
            scaledl.models.intervals.CalibrationError: the calibration is unreadable or was
                computed on other profile tables than the bundle's.
        """
        from scaledl.models.intervals import IntervalCalibration
        from scaledl.registry import register_bundle

        intervals = IntervalCalibration.read(calibration) if calibration is not None else None
        return register_bundle(
            bundle, self.resolve_root(default_root), self.name, metrics, calibration=intervals
        )


class DvcError(RuntimeError):
    """A DVC command failed or the DVC executable is missing."""


class DvcResource(dg.ConfigurableResource):
    """Versions the data folder with the DVC executable of its own virtual environment.

    DVC lives in ``.venv-dvc`` because installing it beside Dagster pins an ``antlr4`` that
    breaks ``dagster asset materialize``.

    Attributes:
        dvc_executable: the ``dvc`` program (relative paths are below ``repo_root``).
        repo_root: the git + DVC repository holding the data folder.
        remote: DVC remote to push to (empty: the default remote).
        push: push after ``dvc add`` (off: version locally only).
        timeout_s: seconds each DVC command may take.
    """

    dvc_executable: str = ".venv-dvc/bin/dvc"
    repo_root: str = str(REPO_ROOT)
    remote: str = ""
    push: bool = True
    timeout_s: float = 1800.0

    @property
    def root(self) -> Path:
        """The repository root as an absolute path."""
        return Path(self.repo_root).expanduser().resolve()

    def executable(self) -> Path:
        """The resolved ``dvc`` program.

        Raises:
            DvcError: it does not exist, naming the path and how to install it.
        """
        exe = Path(self.dvc_executable).expanduser()
        if not exe.is_absolute():
            exe = self.root / exe
        if exe.is_file():
            return exe
        found = shutil.which(self.dvc_executable) if "/" not in self.dvc_executable else None
        if found:
            return Path(found)
        raise DvcError(
            f"DVC executable not found: {exe} (install it in its own virtual environment: "
            f"python -m venv .venv-dvc && .venv-dvc/bin/pip install 'dvc>=3,<4')"
        )

    def run(self, *args: str) -> str:
        """Run ``dvc ARGS`` in :attr:`repo_root` and return its stdout.

        Raises:
            DvcError: the command failed or timed out (stderr included).
        """
        cmd = [str(self.executable()), *args]
        try:
            proc = subprocess.run(
                cmd, cwd=self.root, capture_output=True, text=True, timeout=self.timeout_s
            )
        except subprocess.TimeoutExpired as exc:
            raise DvcError(f"{' '.join(cmd)} timed out after {self.timeout_s} s") from exc
        if proc.returncode != 0:
            raise DvcError(
                f"{' '.join(cmd)} failed (exit {proc.returncode}) in {self.root}:\n"
                f"{proc.stderr.strip() or proc.stdout.strip()}"
            )
        return proc.stdout

    def version(self, data_dir: Path) -> dict[str, Any]:
        """``dvc add`` the data folder, ``dvc push`` it, and read the result from its ``.dvc``.

        Args:
            data_dir: the folder to track; must lie inside :attr:`repo_root`.

        Returns:
            ``md5``, ``size``, ``nfiles``, ``dvc_file`` (path), ``target`` (relative) and
            ``pushed``.

        Raises:
            DvcError: ``data_dir`` is outside the repository or a command failed.
        """
        data_dir = Path(data_dir).resolve()
        try:
            target = data_dir.relative_to(self.root)
        except ValueError:
            raise DvcError(
                f"data folder {data_dir} is outside the DVC repository {self.root}"
            ) from None
        self.run("add", "--quiet", str(target))
        if self.push:
            self.run(
                "push",
                "--quiet",
                *(["--remote", self.remote] if self.remote else []),
                f"{target}.dvc",
            )
        dvc_file = self.root / f"{target}.dvc"
        out = read_dvc_file(dvc_file)
        return {**out, "dvc_file": str(dvc_file), "target": str(target), "pushed": self.push}


def read_dvc_file(path: Path) -> dict[str, Any]:
    """The ``md5``, ``size`` and ``nfiles`` of the single output of a ``.dvc`` file.

    Raises:
        DvcError: the file is missing or has no output with an ``md5``.
    """
    try:
        data = yaml.safe_load(Path(path).read_text())
        out = data["outs"][0]
        return {"md5": str(out["md5"]), "size": out.get("size"), "nfiles": out.get("nfiles")}
    except (OSError, KeyError, IndexError, TypeError, yaml.YAMLError) as exc:
        raise DvcError(f"{path}: not a DVC file with an md5 output: {exc}") from exc


def default_resources() -> dict[str, Any]:
    """The resources of the definitions: settings from the environment, local launcher.

    ``SCALEDL_SHARD_DIRECTORIES=1`` gives each profiling shard its own directory
    (:attr:`ProfilingLauncher.shard_directories`).
    """
    settings = settings_from_env()
    return {
        "settings": settings,
        # SCALEDL_SHARD_DIRECTORIES=1 where shards run at once on several nodes (deploy/).
        "launcher": LocalTorchrunLauncher(shard_directories=env_flag("SCALEDL_SHARD_DIRECTORIES")),
        "predictor_store": LocalPredictorStore(),
        "dvc": DvcResource(),
    }


@dg.definitions
def resources() -> dg.Definitions:
    """The code location's resources (:func:`default_resources`)."""
    return dg.Definitions(resources=default_resources())
