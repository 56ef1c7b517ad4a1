"""Progress of an evaluation, stage by stage: one line per finished unit, and a heartbeat.

The evaluation's counterpart of :mod:`scaledl.profiling.progress`: the library takes a callback
of one line (the CLI prints to stderr, the Dagster asset passes ``context.log.info``) and calls
it when a stage starts, when a unit of it finishes (a fit of one split and method with its
seeds, a learning-curve fit, a GPU fold) and when it ends. Each line names the stage, the unit,
done / total, the elapsed time and the time left in the stage at the pace so far. While a unit
runs longer than ``heartbeat_s``, a background thread repeats where the stage stands, so the
log is never silent for longer than that.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: Seconds between two lines at most (the heartbeat while a long unit runs).
HEARTBEAT_S = 60.0


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


class EvaluationProgress:
    """Counts the finished units of the current stage and tells the user.

    Args:
        on_line: called with each progress line (``None``: lines are only kept in
            :attr:`lines`).
        heartbeat_s: longest silence while a stage runs, seconds (> 0).

    Attributes:
        lines: every line reported, in order.
        stage_seconds: wall seconds per finished stage.

    Raises:
        ValueError: ``heartbeat_s`` not positive.
    """

    def __init__(
        self, on_line: Callable[[str], None] | None = None, heartbeat_s: float = HEARTBEAT_S
    ) -> None:
        if not heartbeat_s > 0:
            raise ValueError(f"EvaluationProgress: heartbeat_s must be > 0, got {heartbeat_s}")
        self.on_line, self.heartbeat_s = on_line, heartbeat_s
        self.lines: list[str] = []
        self.stage_seconds: dict[str, float] = {}
        self.started = time.perf_counter()
        self._lock = threading.Lock()
        self._stage: str | None = None
        self._stage_started = 0.0
        self._last_line = 0.0
        self._done = self._total = 0

    def _emit(self, line: str) -> None:
        with self._lock:
            self._last_line = time.perf_counter()
            self.lines.append(line)
        if self.on_line is not None:
            self.on_line(line)

    def _where(self) -> str:
        now = time.perf_counter()
        stage_s = now - self._stage_started
        text = f"elapsed {_minutes(now - self.started)} (stage {_minutes(stage_s)})"
        if self._total and self._done:
            left_s = stage_s / self._done * max(self._total - self._done, 0)
            text += f", stage about {_minutes(left_s)} left"
        return text

    @contextmanager
    def stage(self, name: str, total: int = 0) -> Iterator[EvaluationProgress]:
        """Report the block as stage ``name`` of ``total`` units (0: not counted in units).

        Lines: ``start``, one per :meth:`unit_done`, a heartbeat while silent for
        ``heartbeat_s``, and ``done in`` (``failed after`` when the block raises) with the
        stage's seconds (kept in :attr:`stage_seconds`, added to an earlier stage of the same
        name).
        """
        self._stage, self._stage_started = name, time.perf_counter()
        self._done, self._total = 0, total
        units = f" ({total} units)" if total else ""
        self._emit(f"evaluation stage {name}: start{units}; elapsed {_minutes(self._elapsed())}")
        stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(stop,), daemon=True)
        beat.start()
        outcome = "failed after"
        try:
            yield self
            outcome = "done in"
        finally:
            stop.set()
            beat.join()
            seconds = time.perf_counter() - self._stage_started
            self.stage_seconds[name] = self.stage_seconds.get(name, 0.0) + seconds
            self._emit(
                f"evaluation stage {name}: {outcome} {seconds:.1f} s; "
                f"elapsed {_minutes(self._elapsed())}"
            )
            self._stage = None

    def add_units(self, count: int) -> None:
        """Count ``count`` more units in the current stage (once a part of it knows its own)."""
        self._total += count

    def unit_done(self, label: str) -> None:
        """Report one finished unit of the current stage (``label``: split/fold, method, seeds)."""
        self._done += 1
        of = f"/{self._total}" if self._total else ""
        self._emit(f"evaluation stage {self._stage}: {self._done}{of} done ({label}); "
                   f"{self._where()}")  # fmt: skip

    def _elapsed(self) -> float:
        return time.perf_counter() - self.started

    def _heartbeat(self, stop: threading.Event) -> None:
        while not stop.wait(self._wait_s()):
            with self._lock:
                silent = time.perf_counter() - self._last_line
            if silent >= self.heartbeat_s:
                of = f" {self._done}/{self._total} units done;" if self._total else ""
                self._emit(f"evaluation stage {self._stage}: running;{of} {self._where()}")

    def _wait_s(self) -> float:
        with self._lock:
            return max(self.heartbeat_s - (time.perf_counter() - self._last_line), 0.01)
