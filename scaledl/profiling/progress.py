"""Progress of a profile, part by part: a tqdm bar for the CLI, a log line for Dagster.

The launcher reports every (workload, repeat) part as it finishes (the worker moves on to the
next workload, or the launch ends): done / total, the part's label and attempts, how many parts
were re-measured, flagged or failed so far, and the time left at the pace so far.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from scaledl.profiling.store import ProfileStoreError, part_path, read_run


class PartProgress:
    """Counts finished parts and tells the user.

    Args:
        total: parts this profile measures now.
        out_dir: the profiles directory (each finished part's ``run.json`` is read).
        show_bar: draw a tqdm bar on stderr.
        on_part: called with one line per finished part (e.g. a Dagster ``context.log.info``).
    """

    def __init__(
        self,
        total: int,
        out_dir: Path,
        show_bar: bool = True,
        on_part: Callable[[str], None] | None = None,
    ) -> None:
        self.total, self.out_dir, self.on_part = total, Path(out_dir), on_part
        self.bar = tqdm(total=total, disable=not show_bar, desc="profiling", unit="part")
        self.reported: set[tuple[str, int]] = set()
        self.remeasured = self.flagged = self.failed = 0
        self.started = time.perf_counter()

    def finished(self, workload_id: str, repeat: int) -> str | None:
        """Report one finished part (once; later calls for it do nothing).

        Returns:
            The line reported, or ``None`` for a part reported before.
        """
        key = (workload_id, int(repeat))
        if key in self.reported:
            return None
        self.reported.add(key)
        try:
            run = read_run(part_path(self.out_dir, workload_id, repeat))
        except ProfileStoreError:
            run = {"status": "unreadable"}
        status = run.get("status", "unknown")
        attempts = int(run.get("attempts", 1) or 1)
        self.remeasured += attempts > 1
        self.flagged += bool(run.get("interference"))
        self.failed += status != "ok"
        self.bar.update(1)
        self.bar.set_postfix(failed=self.failed, flagged=self.flagged)
        done = len(self.reported)
        elapsed = time.perf_counter() - self.started
        left_s = elapsed / done * max(self.total - done, 0)
        line = (
            f"part {done}/{self.total} done: {workload_id} r{repeat} {status}, "
            f"{attempts} attempt(s){', flagged' if run.get('interference') else ''}; so far "
            f"{self.remeasured} re-measured, {self.flagged} flagged, {self.failed} failed; "
            f"about {left_s / 60:.1f} min left"
        )
        if self.on_part is not None:
            self.on_part(line)
        return line

    def close(self) -> None:
        """Close the bar."""
        self.bar.close()
