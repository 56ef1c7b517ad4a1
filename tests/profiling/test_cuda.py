"""The CUDA path of the profiler (NCCL, CUDA events); skipped on hosts without a GPU."""

import pytest
import torch

from scaledl.devices.local import local_backend, local_device_name
from scaledl.profiling.launch import profile_workloads
from scaledl.profiling.settings import ProfileSettings
from scaledl.profiling.store import consolidate
from scaledl.workloads.spec import Workload

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_cuda_profile_of_tiny_bert(tmp_path):
    world = min(2, torch.cuda.device_count())
    workload = Workload.parse(
        {"family": "bert", "hidden_size": 64, "num_layers": 2, "num_heads": 2,
         "intermediate_size": 128, "vocab_size": 1000, "seq_len": 32, "batch_size": 4,
         "world_size": world, "dataset_size": 64, "device_name": local_device_name(),
         "backend": local_backend()}
    )  # fmt: skip
    summary = profile_workloads([workload], tmp_path, ProfileSettings(timeout_s=120))
    assert summary.ok == 1, summary.failed
    tables = consolidate(tmp_path)
    assert tables["runs"]["device_name"].iloc[0].startswith("cuda:")
    assert (tables["layer_timings"]["forward_ms"] > 0).all()
    assert (tables["iteration_timings"]["iteration_ms"] > 0).all()
