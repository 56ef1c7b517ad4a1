"""The GPU evaluation's cache: read back for the same inputs, computed again when they change."""

import dataclasses
import shutil

import pandas as pd
import pytest
from gpu_synthetic import TINY_GRID, write_synthetic

from scaledl.evaluation import gpu
from scaledl.evaluation.gpu import GpuEvaluationConfig, evaluate_gpu
from scaledl.evaluation.gpu_cache import ResultCache, cache_key, code_sha256, tree_sha256
from scaledl.evaluation.progress import EvaluationProgress

pytestmark = pytest.mark.slow  # tens of seconds: handed out first in make test (conftest)

CONFIG = GpuEvaluationConfig(
    operator_params={"grid": TINY_GRID, "min_rows": 5}, leave_one_gpu_out=False
)


def test_the_tree_digest_follows_contents_not_location(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    (a / "t.parquet").write_bytes(b"one")
    b = tmp_path / "elsewhere" / "b"
    shutil.copytree(a, b)
    assert tree_sha256([a]) == tree_sha256([b])
    (b / "t.parquet").write_bytes(b"two")
    assert tree_sha256([a]) != tree_sha256([b])
    assert tree_sha256([a, None]) != tree_sha256([a]) != tree_sha256([a, tmp_path / "missing"])
    assert code_sha256() == code_sha256()


def test_a_stored_result_is_read_back_without_computing(tmp_path):
    cache, calls = ResultCache(tmp_path / "cache"), []

    def compute():
        calls.append(1)
        return {"mre": 0.1}, pd.DataFrame({"x": [1.0]})

    first, hit = cache.get_or_compute("k1", compute)
    assert not hit and calls == [1]
    second, hit = cache.get_or_compute("k1", compute)
    assert hit and calls == [1] and second[0] == first[0] and second[1].equals(first[1])
    _, hit = cache.get_or_compute("k2", compute)
    assert not hit and calls == [1, 1]


def test_the_gpu_evaluation_is_cached_until_an_input_changes(tmp_path, monkeypatch):
    (tmp_path / "profiles").mkdir()
    directory, _ = write_synthetic(tmp_path / "profiles")
    cache_dir, runs = tmp_path / "cache", []
    compute = gpu._evaluate_gpu

    def counted(*args):
        runs.append(1)
        return compute(*args)

    monkeypatch.setattr(gpu, "_evaluate_gpu", counted)
    metrics, pred = evaluate_gpu(directory, CONFIG, cache_dir=cache_dir)
    assert runs == [1] and metrics["cache"]["hit"] is False
    progress = EvaluationProgress()
    with progress.stage("external"):
        again, again_pred = evaluate_gpu(directory, CONFIG, progress, cache_dir)
    assert runs == [1] and again["cache"]["hit"] is True
    assert again["cache"]["key"] == metrics["cache"]["key"]
    assert again["cache"]["computed_s"] == metrics["cache"]["computed_s"]
    same = {k: v for k, v in again.items() if k not in ("runtime_s", "cache")}
    assert same == {k: v for k, v in metrics.items() if k not in ("runtime_s", "cache")}
    pd.testing.assert_frame_equal(again_pred, pred)
    assert any("read from the cache" in line for line in progress.lines)
    # A changed label is another input: computed again, under another key.
    timings = pd.read_parquet(directory / "iteration_timings.parquet")
    timings["iteration_ms"] = timings["iteration_ms"] * 1.01
    timings.to_parquet(directory / "iteration_timings.parquet", index=False)
    changed, _ = evaluate_gpu(directory, CONFIG, cache_dir=cache_dir)
    assert runs == [1, 1] and changed["cache"]["hit"] is False
    assert changed["cache"]["key"] != metrics["cache"]["key"]
    # The model configs the tables name are inputs too.
    named = gpu._config_files(directory)
    assert named and all(p.suffix == ".json" and p.is_file() for p in named)
    # The processes computing it are not part of the key; other settings are.
    assert cache_key([directory], CONFIG) == cache_key(
        [directory], dataclasses.replace(CONFIG, n_jobs=2)
    )
    assert cache_key([directory], CONFIG) != cache_key(
        [directory], GpuEvaluationConfig(operator_params={"grid": TINY_GRID, "min_rows": 6})
    )
