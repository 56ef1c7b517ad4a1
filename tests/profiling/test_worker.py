"""The worker's per-workload housekeeping: what ``release_memory`` collects and freezes."""

import gc
import weakref

import pytest

from scaledl.profiling.worker import release_memory


class _Node:
    """A reference cycle's member (weak-referenceable)."""

    def __init__(self) -> None:
        self.other = self


@pytest.fixture
def unfrozen():
    """Give the frozen objects back to the collector after the test (pytest keeps running)."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_release_memory_collects_garbage_then_freezes_the_survivors(unfrozen):
    survivor = _Node()
    garbage = _Node()
    gone = weakref.ref(garbage)
    del garbage  # a cycle: only the collector frees it
    assert gc.get_freeze_count() == 0
    release_memory()
    assert gone() is None  # the previous workload's cycles are collected, not frozen
    assert gc.get_freeze_count() > 0  # the survivors are out of later collections' way
    assert survivor.other is survivor
    later = _Node()  # the next workload's objects stay collectable
    gone_later = weakref.ref(later)
    del later
    gc.collect()
    assert gone_later() is None
