"""EvaluationProgress: a line per stage start, unit and end; the heartbeat while a unit runs."""

import threading

import pytest

from scaledl.evaluation.progress import EvaluationProgress


def test_a_stage_reports_start_each_unit_with_time_left_and_its_end():
    lines = []
    progress = EvaluationProgress(lines.append)
    with progress.stage("splits"):
        progress.add_units(2)
        progress.unit_done("id, scaledl, seed(s) 0-4")
        progress.unit_done("ood/bert, additive, seed(s) 0")
    assert lines == progress.lines and len(lines) == 4
    assert lines[0].startswith("evaluation stage splits: start")
    assert lines[1].startswith("evaluation stage splits: 1/2 done (id, scaledl, seed(s) 0-4)")
    assert "elapsed" in lines[1] and "stage about" in lines[1] and "min left" in lines[1]
    assert lines[2].startswith("evaluation stage splits: 2/2 done (ood/bert, additive")
    assert lines[3].startswith("evaluation stage splits: done in ")
    assert set(progress.stage_seconds) == {"splits"} and progress.stage_seconds["splits"] >= 0


def test_a_stage_run_twice_adds_its_seconds_and_counts_units_afresh():
    progress = EvaluationProgress()
    with progress.stage("external"):
        progress.add_units(1)
        progress.unit_done("fold a")
    first = progress.stage_seconds["external"]
    with progress.stage("external"):
        progress.add_units(1)
        progress.unit_done("fold b")
    assert progress.stage_seconds["external"] >= first
    assert "1/1 done (fold b)" in progress.lines[-2]


def test_the_heartbeat_speaks_while_a_unit_is_silent():
    spoke = threading.Event()

    def on_line(line):
        if ": running;" in line:
            spoke.set()

    progress = EvaluationProgress(on_line, heartbeat_s=0.05)
    with progress.stage("learning_curve"):
        progress.add_units(3)
        progress.unit_done("scaledl, 9 training workloads, seed 0")
        # The unit in progress is silent; the heartbeat line must come (no timing asserted).
        assert spoke.wait(timeout=30)
    beat = next(line for line in progress.lines if ": running;" in line)
    assert beat.startswith("evaluation stage learning_curve: running; 1/3 units done;")
    assert "elapsed" in beat and "left" in beat
    assert progress.lines[-1].startswith("evaluation stage learning_curve: done in ")


def test_a_heartbeat_of_zero_seconds_is_refused():
    with pytest.raises(ValueError, match="heartbeat_s"):
        EvaluationProgress(heartbeat_s=0)


def test_a_failing_stage_says_so_and_stops_its_heartbeat():
    progress = EvaluationProgress(heartbeat_s=0.05)
    with pytest.raises(RuntimeError, match="fit broke"), progress.stage("splits"):
        raise RuntimeError("fit broke")
    assert progress.lines[-1].startswith("evaluation stage splits: failed after ")
    count = len(progress.lines)
    threading.Event().wait(0.2)  # a heartbeat still running would add lines
    assert len(progress.lines) == count
