"""The in-iteration timing of tensor parallelism's all-reduces (``TimedTensorParallelAllReduce``).

DTensor's all-reduces go through ``torch.distributed._functional_collectives.all_reduce``; the
real two-rank path is profiled in ``test_layouts.py``. Here the functional all-reduce is a fake
(no process group), so the wrapper's own contract is checked: what it logs, what it returns,
and that the original comes back on exit, also after an error.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed._functional_collectives as funcol

from scaledl.profiling.collectives import CollectiveLog, TimedTensorParallelAllReduce
from scaledl.profiling.timers import Clock


@pytest.fixture
def fake_all_reduce(monkeypatch):
    calls = []

    def fake(tensor, reduceOp, group, tag=""):  # noqa: N803
        calls.append((reduceOp, group))
        return tensor * 2

    monkeypatch.setattr(funcol, "all_reduce", fake)
    return fake, calls


def test_logs_each_call_while_enabled_and_restores(fake_all_reduce):
    fake, calls = fake_all_reduce
    log = CollectiveLog(Clock(torch.device("cpu")))
    x = torch.ones(4, 8)
    with TimedTensorParallelAllReduce(log, group_size=2):
        assert funcol.all_reduce is not fake
        log.enabled = True
        out = funcol.all_reduce(x, "sum", "mesh")
        log.enabled = False
        funcol.all_reduce(x, "sum", "mesh")  # a label step: not logged
    assert funcol.all_reduce is fake
    assert torch.equal(out, x * 2) and calls == [("sum", "mesh"), ("sum", "mesh")]
    (row,) = log.rows()
    assert row["collective"] == "all_reduce" and row["group"] == "tp"
    assert row["group_size"] == 2 and row["collective_bytes"] == 4 * 8 * 4
    assert row["source"] == "measured" and row["collective_ms"] >= 0.0


def test_restores_after_an_error_and_refuses_reentry(fake_all_reduce):
    fake, _ = fake_all_reduce
    timed = TimedTensorParallelAllReduce(CollectiveLog(Clock(torch.device("cpu"))), 2)
    with pytest.raises(ZeroDivisionError), timed:
        with pytest.raises(RuntimeError, match="already entered"):
            timed.__enter__()
        1 / 0  # noqa: B018
    assert funcol.all_reduce is fake
