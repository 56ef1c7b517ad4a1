import os

import pytest
import torch

from scaledl.profiling.affinity import cores_per_rank_for, pin_local_rank, rank_cores


def test_rank_cores_split_the_available_cores():
    assert rank_cores(0, 2, [0, 1, 2, 3]) == [0, 1]
    assert rank_cores(1, 2, [0, 1, 2, 3]) == [2, 3]
    assert rank_cores(1, 1, [4, 7]) == [7]


def test_more_ranks_than_cores_share_round_robin():
    assert rank_cores(2, 1, [0, 1]) == [0]
    assert rank_cores(3, 1, [0, 1]) == [1]


def test_rank_cores_rejects_bad_input():
    with pytest.raises(ValueError, match="cores_per_rank"):
        rank_cores(0, 0, [0, 1])
    with pytest.raises(ValueError, match="no core"):
        rank_cores(0, 1, [])


def test_cores_per_rank_fit_the_largest_local_world():
    assert cores_per_rank_for(2, available=2) == 1
    assert cores_per_rank_for(1, available=2) == 2
    assert cores_per_rank_for(4, available=16) == 4
    assert cores_per_rank_for(8, available=2) == 1


def test_pin_local_rank_sets_affinity_and_threads():
    before_affinity, before_threads = os.sched_getaffinity(0), torch.get_num_threads()
    try:
        cores = pin_local_rank(0, 1)
        assert os.sched_getaffinity(0) == set(cores) and len(cores) == 1
        assert torch.get_num_threads() == 1
    finally:
        os.sched_setaffinity(0, before_affinity)
        torch.set_num_threads(before_threads)
