"""``scaledl profile``'s stop message: the parts complete and left, and how to go on."""

import signal

from profile_tables import ok_records
from tiny_specs import tiny

from scaledl.cli.profile import _interrupted_text
from scaledl.profiling.interrupt import ProfilingInterrupted
from scaledl.profiling.launch import ProfileSummary
from scaledl.profiling.store import write_part


def _part(out, workload, status: str) -> None:
    records = ok_records(workload) if status == "ok" else {}
    write_part(out, workload, {"repeat": 0, "status": status, "error": ""}, records)


def _stopped(summary: ProfileSummary) -> ProfilingInterrupted:
    exc = ProfilingInterrupted(signal.SIGINT)
    exc.summary = summary
    return exc


def test_a_stopped_profile_counts_the_parts_done_and_left(tmp_path):
    specs = [tiny("bert", batch_size=b) for b in (2, 4, 6)]
    _part(tmp_path, specs[0], "ok")  # reused: complete before this run
    _part(tmp_path, specs[1], "interrupted")
    summary = ProfileSummary(requested=3, skipped=1, interrupted=f"{specs[1].workload_id}/r0")
    text = _interrupted_text(tmp_path, _stopped(summary), specs, repeats=1, force=False)
    assert text == (
        f"{tmp_path}: stopped by SIGINT: 1 of 3 (workload, repeat) parts done, 2 left, "
        f"{specs[1].workload_id}/r0 interrupted (measured again on resume); run the same "
        "command again to resume"
    )


def test_a_stopped_force_run_does_not_advise_resuming_it(tmp_path):
    # --force measures every part again: running it again is no resume. Complete parts on
    # disk (measured now, or before and not reached yet) are what a run without it keeps.
    specs = [tiny("bert", batch_size=b) for b in (2, 4, 6, 8)]
    _part(tmp_path, specs[0], "ok")  # measured again by this run
    _part(tmp_path, specs[1], "interrupted")  # was complete: the stop replaced it
    _part(tmp_path, specs[2], "ok")  # complete from before, not reached
    summary = ProfileSummary(requested=4, ok=1, interrupted=f"{specs[1].workload_id}/r0")
    text = _interrupted_text(tmp_path, _stopped(summary), specs, repeats=1, force=True)
    assert text == (
        f"{tmp_path}: stopped by SIGINT: this --force run measured 1 of 4 (workload, repeat) "
        f"parts again, {specs[1].workload_id}/r0 interrupted; 2 parts are complete, 2 left: "
        "the command without --force measures only the 2 left, with --force it measures "
        "every part again"
    )
    assert "resume" not in text
