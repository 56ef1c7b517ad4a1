"""Profile the design: every shard of ``profile_design``, one run after another, in this process.

Usage::

    python -m pipelines.backfill                        # every shard ($SCALEDL_PROFILING_SHARDS)
    python -m pipelines.backfill --shards 0-of-4 2-of-4 # only these

Each shard is its own Dagster run on the instance of ``$DAGSTER_HOME``, tagged
``dagster/partition: K-of-N`` as ``dagster job execute --tags`` tags it, so the UI shows one run
and one materialisation of ``profiling_shard`` per shard. Unlike a ``dagster job execute`` per
shard, Dagster, the definitions and torch are imported once, and state the profiler keeps for the
life of a process is kept from one shard to the next.

Every shard is tried, even after one failed. Exit status: 0 when every shard succeeded; 1 when
one failed (``shards failed: K-of-N ... (make run again: kept parts are reused)``); 2 for bad
arguments or environment; 128 + the signal (130 for Ctrl-C, 143 for SIGTERM) when a stop
signal ended a run, after which no further shard starts. A run waiting for the profiling pool's
slot (held by another live run) is ended by the signal too (the executor of
:mod:`pipelines.defs.executor`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import psutil

from pipelines.definitions import defs as load_defs
from pipelines.defs.config import DATA_DIR_ENV, DEFAULT_DATA_DIR
from scaledl.layout import DataLayout
from scaledl.profiling.interrupt import default_stop_signals
from scaledl.profiling.shards import shard_count_from_env, shard_keys

if TYPE_CHECKING:  # Dagster does not export the type dagster.build_reconstructable_job returns.
    from dagster._core.definitions.reconstruct import ReconstructableJob

REPO_ROOT = Path(__file__).resolve().parents[1]
JOB_NAME = "profile_design"
#: The run tag naming a run's partition (what ``dagster job execute --tags`` sets).
PARTITION_TAG = "dagster/partition"
#: The signals that stop the backfill after the run they interrupted (no further shard starts).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@functools.cache
def profile_design_job() -> dg.JobDefinition:
    """``profile_design`` as the definitions resolve it: with their resources and executor.

    Built once per process (a Dagster code server, too, serves every run from one definition):
    Dagster asks for it several times per run, and building the definitions takes ~0.2 s.
    """
    return load_defs().resolve_job_def(JOB_NAME)


def reconstructable_job() -> ReconstructableJob:
    """:func:`profile_design_job` as a job :func:`dagster.execute_job` runs and records.

    :func:`dagster.execute_job` is what ``dagster job execute`` calls, so the runs are recorded
    as ``make run``'s were: the job's own tags (``scaledl/profiling``) merged with the partition
    tag, the executor and resources of the definitions, and a code origin from which another
    process could rebuild the job; with ``raise_on_error=False`` a failed shard returns a failed
    result instead of raising, so the next shard still runs. ``JobDefinition.execute_in_process``
    would record runs without a code origin and always use its own executor. The module is
    named here rather than the function passed to :func:`dagster.reconstructable`, which
    points at the file when this module runs as ``__main__``.

    """
    return dg.build_reconstructable_job(
        "pipelines.backfill",
        profile_design_job.__name__,
        reconstructor_working_directory=str(REPO_ROOT),
    )


@contextlib.contextmanager
def stop_signals_seen() -> Iterator[Callable[[], int | None]]:
    """Notice SIGINT and SIGTERM however they were handled, for as long as the block runs.

    During a run Dagster (``capture_interrupts``) and the profiler
    (:func:`scaledl.profiling.interrupt.stop_signals_raise`) install their own handlers and turn
    a Ctrl-C into a failed run, so a handler of this module never sees it. Python's wakeup file
    descriptor (:func:`signal.set_wakeup_fd`) receives every signal's number whichever Python
    handler runs, so a stop is noticed after the run it ended. (SIGTERM has a Python handler
    only while the profiler runs; elsewhere it ends the process at once, as it did
    ``dagster job execute``.)

    Yields:
        A function returning the first stop signal received so far (``None``: none).
    """
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    received: list[int] = []

    def first_stop() -> int | None:
        with contextlib.suppress(BlockingIOError):
            received.extend(s for s in os.read(read_fd, 4096) if s in STOP_SIGNALS)
        return received[0] if received else None

    previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    try:
        yield first_stop
    finally:
        signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)


def release_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Fail the unfinished runs whose process has died on this host, freeing their pool slots.

    A run killed with SIGKILL (an OOM kill, ``kill -9``, a reboot) stays ``STARTED`` and keeps
    its claim on the ``scaledl_profiling`` pool, so the next profiling step would wait for that
    slot forever. Only on an instance with SQLite storage (one host's ``DAGSTER_HOME``, as
    ``make run``'s), and only for runs tagged ``scaledl/profiling``: such a run counts as dead
    when no process of its events (their ``pid``) runs any more. A shared instance (Postgres,
    several nodes) is left to Dagster's run monitoring.

    Returns:
        The run ids marked failed.
    """
    # The jobs module builds the assets (warnings on stderr): not before the arguments are checked.
    from pipelines.defs.jobs import PROFILING_TAGS

    if not type(instance.run_storage).__name__.startswith("Sqlite"):
        return []
    released = []
    unfinished = dg.RunsFilter(
        statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING],
        tags=PROFILING_TAGS,
    )
    for run in instance.get_runs(filters=unfinished):
        pids = {e.dagster_event.pid for e in instance.all_logs(run.run_id)
                if e.dagster_event is not None and e.dagster_event.pid}  # fmt: skip
        if not pids or any(psutil.pid_exists(pid) for pid in pids):
            continue
        instance.report_run_failed(
            run, message=f"its process ({', '.join(map(str, sorted(pids)))}) is gone"
        )
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        released.append(run.run_id)
    return released


def run_shards(
    keys: Sequence[str],
    instance: dg.DagsterInstance,
    recon_job: ReconstructableJob,
    stopped: Callable[[], int | None] = lambda: None,
) -> tuple[list[str], list[str]]:
    """Run ``profile_design`` once per key, one after another, printing a line per start and end.

    Args:
        keys: partition keys (``K-of-N``), in the order to run them.
        instance: the Dagster instance the runs are recorded on.
        recon_job: the job (:func:`reconstructable_job`).
        stopped: the stop signal received so far, or ``None`` (:func:`stop_signals_seen`);
            once it returns a signal, no further key is started.

    Returns:
        ``(failed keys, keys not started)``.
    """
    failed: list[str] = []
    for i, key in enumerate(keys):
        if stopped() is not None:
            return failed, list(keys[i:])
        print(f"{JOB_NAME}: shard {key} ({i + 1}/{len(keys)}) started", flush=True)
        started = time.perf_counter()
        try:
            with dg.execute_job(
                recon_job, instance=instance, tags={PARTITION_TAG: key}, raise_on_error=False
            ) as result:
                ok, run_id = result.success, result.run_id
            status = f"{'succeeded' if ok else 'failed'} (run {run_id})"
        except Exception as exc:  # the run could not be created or started: try the next one
            ok, status = False, f"failed before its run started: {type(exc).__name__}: {exc}"
        except KeyboardInterrupt:  # outside the run's own handlers (its creation, its end)
            print(f"{JOB_NAME}: shard {key} interrupted", flush=True)
            return [*failed, key], list(keys[i + 1 :])
        seconds = time.perf_counter() - started
        print(f"{JOB_NAME}: shard {key} {status} in {seconds:.1f} s", flush=True)
        if not ok:
            failed.append(key)
    return failed, []


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.backfill",
        description=(
            f"Run {JOB_NAME} once per shard (partition K-of-N, N = $SCALEDL_PROFILING_SHARDS), "
            "one after another in this process, on the instance of $DAGSTER_HOME."
        ),
    )
    parser.add_argument(
        "--shards", nargs="+", metavar="K-of-N",
        help="only these shards (default: every shard), run in the order of the shard keys",
    )  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the shards (see the module docstring) and return the exit status.

    Started as a background job (SIGINT ignored: ``make run &``, ``nohup``, some CI runners),
    the process would have Dagster map SIGTERM to that ignored handler and could not be stopped;
    SIGINT and SIGTERM get their default meaning first
    (:func:`scaledl.profiling.interrupt.default_stop_signals`).
    """
    default_stop_signals()
    args = _parser().parse_args(argv)
    try:
        valid = shard_keys(shard_count_from_env())
    except ValueError as exc:
        print(f"{JOB_NAME}: error: {exc}", file=sys.stderr)
        return 2
    unknown = [k for k in args.shards or [] if k not in valid]
    if unknown:
        print(
            f"{JOB_NAME}: error: --shards {' '.join(unknown)}: not a shard key; valid keys: "
            f"{' '.join(valid)} (SCALEDL_PROFILING_SHARDS={len(valid)})",
            file=sys.stderr,
        )
        return 2
    keys = [k for k in valid if args.shards is None or k in args.shards]
    if not os.environ.get("DAGSTER_HOME"):
        print(
            f"{JOB_NAME}: error: DAGSTER_HOME is not set (python -m pipelines.home prepares one)",
            file=sys.stderr,
        )
        return 2
    home = Path(os.environ["DAGSTER_HOME"])
    if not home.is_dir():
        print(f"{JOB_NAME}: error: DAGSTER_HOME={home} is not a folder (python -m pipelines.home "
              "prepares one)", file=sys.stderr)  # fmt: skip
        return 2
    design = DataLayout(
        Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR).expanduser().resolve()
    ).design_path
    if not design.is_file():
        print(f"{JOB_NAME}: error: no design at {design}: run design_job first (dagster job "
              "execute -m pipelines.definitions -j design_job)", file=sys.stderr)  # fmt: skip
        return 2
    recon_job = reconstructable_job()
    with dg.DagsterInstance.get() as instance, stop_signals_seen() as stopped:
        for run_id in release_dead_runs(instance):
            print(f"{JOB_NAME}: run {run_id} had died without finishing: marked failed, its "
                  "profiling pool slot freed", flush=True)  # fmt: skip
        failed, not_started = run_shards(keys, instance, recon_job, stopped)
        signum = stopped()
    if not_started or signum is not None:
        name = signal.Signals(signum or signal.SIGINT).name
        print(
            f"{JOB_NAME}: stopped by {name}; failed: {' '.join(failed) or 'none'}; not "
            f"started: {' '.join(not_started) or 'none'}",
            file=sys.stderr,
        )
        return 128 + (signum or signal.SIGINT)
    if failed:
        print(
            f"shards failed: {' '.join(failed)} (make run again: kept parts are reused)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
