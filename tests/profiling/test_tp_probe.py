"""The tensor-parallel API probe in a one-rank gloo group (the two-rank run: test_layouts)."""

import pytest
import torch
import torch.distributed as dist

from scaledl.profiling import tp_probe
from scaledl.profiling.timers import Clock
from scaledl.profiling.tp_probe import PROBE_ROWS, TensorParallelProbe


@pytest.fixture()
def one_rank(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _probe(train: bool, intermediate: int = 32) -> TensorParallelProbe:
    return TensorParallelProbe(None, "dp", 8, intermediate, 6, torch.float32,
                               torch.device("cpu"), train)  # fmt: skip


def test_rows_are_the_pair_cost_at_the_output_activation(one_rank):
    rows = _probe(train=True).time(Clock(torch.device("cpu")))
    # DTensor dispatch costs far more than a 6 x 8 input: both differences positive
    assert {r["collective"] for r in rows} == set(PROBE_ROWS)
    for r in rows:
        assert r["collective_ms"] > 0 and r["collective_bytes"] == 6 * 8 * 4
        assert (r["group"], r["group_size"], r["source"]) == ("dp", 1, "microbenchmark")
    inference = _probe(train=False).time(Clock(torch.device("cpu")))
    assert {r["collective"] for r in inference} == {"tp_pair_forward"}


def test_a_width_that_does_not_split_names_the_field(one_rank, monkeypatch):
    monkeypatch.setattr(tp_probe.dist, "get_world_size", lambda group=None: 3)
    with pytest.raises(ValueError, match="intermediate_size=32 does not split over the 3 ranks"):
        _probe(train=True)
