"""Where a profiling run's time went (scripts/compare_profile_runs.py ``time_split``)."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]


def _script():
    path = REPO / "scripts" / "compare_profile_runs.py"
    spec = importlib.util.spec_from_file_location("compare_profile_runs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _runs(parts: list[tuple[float, float, int, int]]) -> pd.DataFrame:
    t0 = pd.Timestamp("2026-12-05T04:00:00+00:00")
    return pd.DataFrame(
        [
            {"started_at": (t0 + pd.Timedelta(seconds=s)).isoformat(),
             "finished_at": (t0 + pd.Timedelta(seconds=e)).isoformat(),
             "repeat": r, "world_size": w}
            for s, e, r, w in parts
        ]
    )  # fmt: skip


def test_time_split_separates_parts_launch_gaps_and_shard_start_ups():
    # Launch r0/ws1: two parts 1 s apart; a 9 s launch boundary to r0/ws2; an 18 s shard
    # boundary to r1/ws1 (rows out of order: sorted by start).
    runs = _runs([(30.0, 33.0, 1, 1), (0.0, 2.0, 0, 1), (3.0, 5.0, 0, 1), (14.0, 16.0, 0, 2)])
    split = _script().time_split(runs)
    assert split["in_parts_s"] == pytest.approx(9.0)
    assert split["between_parts_of_a_launch_s"] == pytest.approx(1.0)
    assert (split["launch_boundaries"], split["launch_boundaries_s"]) == (1, [9.0])
    assert (split["shard_boundaries"], split["shard_boundaries_s"]) == (1, [14.0])
    assert split["span_s"] == pytest.approx(33.0)
