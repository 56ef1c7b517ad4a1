"""Progress of a profile, part by part: the line each finished part gets."""

from scaledl.profiling.progress import PartProgress
from scaledl.profiling.store import part_path


def write_run(out_dir, workload_id, repeat, **run):
    path = part_path(out_dir, workload_id, repeat)
    path.mkdir(parents=True)
    import json

    (path / "run.json").write_text(json.dumps({"status": "ok", "attempts": 1, **run}))


def test_each_part_is_reported_once_with_running_counts(tmp_path):
    write_run(tmp_path, "a", 0)
    write_run(tmp_path, "b", 0, attempts=3, interference=True)
    write_run(tmp_path, "c", 0, status="oom")
    lines = []
    progress = PartProgress(4, tmp_path, show_bar=False, on_part=lines.append)
    progress.finished("a", 0)
    progress.finished("a", 0)  # the launch end reports it again: ignored
    progress.finished("b", 0)
    progress.finished("c", 0)
    progress.close()
    assert len(lines) == 3
    assert lines[0].startswith("part 1/4 done: a r0 ok, 1 attempt(s); so far 0 re-measured")
    assert (
        "part 2/4 done: b r0 ok, 3 attempt(s), flagged; so far 1 re-measured, 1 flagged"
        in (lines[1])
    )
    assert "c r0 oom" in lines[2] and "1 failed" in lines[2] and "min left" in lines[2]


def test_an_unreadable_part_is_named_not_fatal(tmp_path):
    lines = []
    PartProgress(1, tmp_path, show_bar=False, on_part=lines.append).finished("gone", 1)
    assert lines == [
        "part 1/1 done: gone r1 unreadable, 1 attempt(s); so far 0 re-measured, 0 flagged, "
        "1 failed; about 0.0 min left"
    ]
