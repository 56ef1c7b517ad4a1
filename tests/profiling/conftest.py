"""Fixtures shared by the profiling tests."""

import pytest
import torch.distributed as dist


@pytest.fixture()
def one_rank(tmp_path):
    """A one-rank gloo process group for the test (the probes' unit tests)."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()
